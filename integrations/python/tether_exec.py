"""Run an agent's shell command through tether-exec, from a Python harness.

No dependencies. A harness calls ``TetherExec(workspace, policy).run(cmd, stdin)``
and gets a ``Result`` with the decision, the exit code, the output and the
observation text to hand to the model, rendered exactly as tether's own
``SandboxPolicy.execute_bash_with_code`` renders it (stdout, then ``[stderr]``
and stderr; ``[exit N]`` when non-zero; ``[exit 0: no output] Command
succeeded.`` when empty; head-and-tail truncation at ``max_output_chars``;
timeouts as exit 124 with tether's message).

Held actions: ``run`` returns decision ``"ask"`` with ``pending_id``; the
operator's ``/approve`` and ``/reject <reason>`` map onto
``operator_message(pending_id, text)``, which approves and resumes in one
call (the observation is the command's output) or rejects and resumes (the
observation is ``[ACTION REJECTED BY POLICY]: <reason>``).

The policy may be tether's ``SandboxPolicy.to_dict()`` unchanged, any dict of
tether-exec's policy keys, or a path to a policy file (``.toml`` or
``.json``). A dict is stored content-addressed in the state directory (the one
given, else tether-exec's own default), so ``resume`` re-reads the very file
the action was held under.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What tether's own `validate_bash_command` refuses, as tether-exec rules: stacked
# on the harness's policy (which can only narrow), so a harness that switches
# from bubblewrap to tether-exec keeps every refusal it had, plus the kernel's.
TETHER_BASELINE = """
# tether compatibility layer: tether's refusals as rules.
deny = ["sudo", "su", "doas", "mkfs", "mkfs.ext4", "mkfs.xfs", "fdisk", "parted", "mount", "umount", "dd",
        "chmod 777", "chmod -R 777", "rm -rf /", "rm -fr /"]
default = "allow"
"""

# tether's read-only profile allows only these programs (`_READONLY_ALLOWED_BINARIES`).
TETHER_READ_ONLY_BASELINE = """
# tether compatibility layer, read-only profile: tether's allowlist of programs.
bash_allow_prefixes = ["ls", "cat", "head", "tail", "grep", "rg", "find", "wc", "pwd", "echo", "stat", "file",
                       "which", "uname", "date", "sort", "uniq", "cut", "tr"]
deny = ["sudo", "su", "doas", "mount", "umount", "dd"]
default = "deny"
"""

HELD = 75
REFUSED = 77
TIMEOUT = 124
INTERNAL = 125

__all__ = ["TetherExec", "Result", "render_observation", "HELD", "REFUSED", "TIMEOUT"]


@dataclass
class Result:
    """What happened to one command."""

    decision: str  # "allow" | "ask" | "deny" | "error"
    exit_code: int
    stdout: str
    stderr: str
    observation: str
    pending_id: str | None = None
    receipt: dict[str, Any] = field(default_factory=dict)


def render_observation(returncode: int, stdout: str, stderr: str, max_output_chars: int) -> str:
    """tether's observation format, byte for byte."""
    combined = stdout
    if stderr:
        combined = f"{stdout}\n[stderr]\n{stderr}".strip()
    if not combined:
        combined = f"[exit {returncode}: no output]" + (" Command succeeded." if returncode == 0 else "")
    elif returncode != 0:
        combined = f"{combined}\n[exit {returncode}]"
    if len(combined) > max_output_chars:
        half = max_output_chars // 2
        omitted = len(combined) - max_output_chars
        combined = f"{combined[:half]}\n... [truncated {omitted:,} chars by sandbox cap] ...\n{combined[-half:]}"
    return combined


def _default_state_dir() -> Path:
    """tether-exec's own default state directory (as it resolves it)."""
    explicit = os.environ.get("TETHER_EXEC_STATE_DIR")
    if explicit:
        return Path(explicit).absolute()
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "tether-exec"
    # The password database's home, never $HOME (tether sets it to the workspace).
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".local" / "state" / "tether-exec"


def _read_policy_file(path: Path) -> dict[str, Any]:
    """The keys the module itself uses (timeout, output cap) of a policy file."""
    if path.suffix == ".json":
        return json.loads(path.read_text())
    if path.suffix == ".toml":
        try:
            import tomllib
        except ModuleNotFoundError:  # Python < 3.11
            try:
                import tomli as tomllib  # type: ignore[no-redef]
            except ModuleNotFoundError:
                return {}
        with open(path, "rb") as f:
            return tomllib.load(f)
    return {}


def _option(name: str, value: str) -> list[str]:
    """``NAME VALUE``, or ``NAME=VALUE`` for a value that starts with ``-``
    (which would otherwise read as an option)."""
    return [f"{name}={value}"] if value.startswith("-") else [name, value]


class TetherExec:
    """A harness's handle on tether-exec for one workspace and session."""

    def __init__(
        self,
        workspace: str | os.PathLike[str],
        policy: dict[str, Any] | str | os.PathLike[str] | None = None,
        *,
        session: str | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        binary: str | None = None,
        tether_compat: bool = True,
    ) -> None:
        self.workspace = Path(workspace).resolve()
        self.session = session
        self.binary = binary or os.environ.get("TETHER_EXEC_BIN") or shutil.which("tether-exec") or "tether-exec"
        # A state directory named by the environment is made absolute here
        # and passed on: tether-exec runs in the workspace, where a relative
        # one would name another directory than the one policies go to.
        from_env = os.environ.get("TETHER_EXEC_STATE_DIR")
        chosen = state_dir or from_env
        self.state_dir = Path(chosen).absolute() if chosen else None
        policy_dict: dict[str, Any] = {}
        if isinstance(policy, dict):
            policy_dict = policy
            self.policy_path: Path | None = self._store_policy(policy)
        elif policy is not None:
            self.policy_path = Path(policy).resolve()
            policy_dict = _read_policy_file(self.policy_path)
        else:
            self.policy_path = None
        # tether's refusals, as a narrowing layer (on by default).
        self.baseline_path: Path | None = None
        if tether_compat:
            read_only = policy_dict.get("profile") == "read-only"
            text = TETHER_READ_ONLY_BASELINE if read_only else TETHER_BASELINE
            self.baseline_path = self._store_text(text, ".toml")
        self.timeout_seconds = float(policy_dict.get("timeout_seconds", 600.0))
        self.max_output_chars = int(policy_dict.get("max_output_chars", 12000))

    # -- plumbing -------------------------------------------------------------

    def _policy_dir(self) -> Path:
        # In the state directory, which is the user's own: a folder others
        # can write (a shared temporary directory) would let them put their
        # own policy where the harness's is looked for.
        base = self.state_dir or _default_state_dir()
        # Private from the first byte, as tether-exec makes it.
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        d = base / "policies"
        d.mkdir(exist_ok=True, mode=0o700)
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise PermissionError(
                f"{d}: the folder for stored policies must be a directory of yours that others cannot write "
                f"(owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}); fix it or remove it"
            )
        return d

    def _store_policy(self, policy: dict[str, Any]) -> Path:
        return self._store_text(json.dumps(policy, sort_keys=True, indent=1), ".json")

    def _store_text(self, text: str, suffix: str) -> Path:
        # Content-addressed: `resume` re-reads exactly the file the action was held under.
        d = self._policy_dir()
        path = d / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}{suffix}"
        try:
            if path.read_text() == text:
                return path
        except (FileNotFoundError, UnicodeDecodeError):
            pass
        # A temporary file of its own (threads share a pid), whole before it
        # takes the name: a launch never reads a policy half written.
        fd, tmp = tempfile.mkstemp(dir=d, prefix=path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def _base(self) -> list[str]:
        argv = [self.binary]
        if self.state_dir:
            argv += ["--state-dir", str(self.state_dir)]
        return argv

    def _invoke(self, args: list[str], stdin: str | None) -> tuple[int, str, str, dict[str, Any], bool]:
        with tempfile.TemporaryDirectory(prefix="tether-exec-receipt-") as tmp:
            receipt_path = Path(tmp) / "receipt.json"
            argv = self._base() + args[:1] + ["--receipt", str(receipt_path)] + args[1:]
            try:
                proc = subprocess.run(
                    argv,
                    input=stdin.encode() if stdin is not None else None,
                    stdin=None if stdin is not None else subprocess.DEVNULL,
                    capture_output=True,
                    cwd=self.workspace,
                    # tether-exec enforces the policy's timeout itself (exit 124);
                    # this is only a backstop should the launcher itself hang.
                    timeout=self.timeout_seconds + 30,
                    start_new_session=True,
                )
            except subprocess.TimeoutExpired:
                return TIMEOUT, "", "", {}, True
            receipt: dict[str, Any] = {}
            if receipt_path.exists():
                receipt = json.loads(receipt_path.read_text())
            return (
                proc.returncode,
                proc.stdout.decode("utf-8", errors="replace"),
                proc.stderr.decode("utf-8", errors="replace"),
                receipt,
                False,
            )

    def _result(self, code: int, out: str, err: str, receipt: dict[str, Any], hung: bool) -> Result:
        # The receipt, not the exit code, says what happened: a command may
        # itself exit 75, 77 or 124.
        pending = receipt.get("pending_id")
        decision = receipt.get("decision")
        if hung or receipt.get("timed_out") is True:
            msg = f"Error: command timed out after {self.timeout_seconds:.1f}s (SIGKILL)."
            return Result("allow", TIMEOUT, out, err, msg, pending, receipt)
        if decision == "ask" and code == HELD:
            return Result("ask", code, out, err, err.strip(), pending, receipt)
        if decision == "deny" and code == REFUSED:
            return Result("deny", code, out, err, err.strip(), pending, receipt)
        if receipt.get("exit_code") is None:
            return Result("error", code, out, err, err.strip(), pending, receipt)
        obs = render_observation(code, out, err, self.max_output_chars)
        return Result("allow", code, out, err, obs, pending, receipt)

    # -- the harness API --------------------------------------------------------

    def run(self, cmd: str, stdin: str | None = None) -> Result:
        """Gate and run ``cmd`` (a bash script) confined; see ``Result``.

        As tether's ``execute_bash_with_code``: the command is stripped, and an
        empty one with stdin runs stdin as the command."""
        cmd = cmd.strip()
        if not cmd and stdin:
            cmd, stdin = stdin.strip(), None
        args = ["run"]
        if self.policy_path:
            args += ["--policy", str(self.policy_path)]
        if self.baseline_path:
            args += ["--policy", str(self.baseline_path)]
        args += ["--workspace", str(self.workspace)]
        if self.session:
            args += _option("--session", self.session)
        args += _option("-c", cmd)
        return self._result(*self._invoke(args, stdin))

    def resume(self, pending_id: str) -> Result:
        """Run an approved held action (once), or learn that it was rejected."""
        return self._result(*self._invoke(["resume", "--", pending_id], None))

    def approve(self, pending_id: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._base() + ["approve", "--", pending_id], capture_output=True, text=True, check=False
        )

    def reject(self, pending_id: str, reason: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._base() + ["reject", f"--reason={reason}", "--", pending_id], capture_output=True, text=True, check=False
        )

    def operator_message(self, pending_id: str, message: str) -> Result | None:
        """Map tether's ``/approve`` and ``/reject <reason>`` onto one call each:
        ``approve --resume`` (the observation is the command's output; decision
        ``"ask"`` while the rule still needs another approver) and ``reject
        --resume`` (the observation is ``[ACTION REJECTED BY POLICY]: <reason>``).
        Either may be sent again after a lost answer: the action runs once, and
        the repeat returns its recorded result.

        Returns the observation for the model, or ``None`` for other messages.
        """
        text = message.strip()
        if text == "/approve":
            return self._result(*self._invoke(["approve", "--resume", "--", pending_id], None))
        if text.startswith("/reject"):
            reason = text[len("/reject") :].strip() or "rejected by the operator"
            # One argument: a reason that starts with `-` is still the reason.
            return self._result(*self._invoke(["reject", f"--reason={reason}", "--resume", "--", pending_id], None))
        return None
