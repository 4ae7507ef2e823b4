"""tether-exec driven by a real tether harness policy (PyPI `tether-sdk`).

Run: python3.12 -m unittest integrations/python/test_tether_exec.py
(needs `pip install tether-sdk` and TETHER_EXEC_BIN or tether-exec on PATH).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tether.sandbox import SandboxPolicy  # noqa: E402  (PyPI tether-sdk)

from tether_exec import TetherExec, render_observation  # noqa: E402


class Base(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="tether-py-")
        root = Path(self._tmp.name).resolve()
        self.ws = root / "ws"
        self.ws.mkdir()
        self.state = root / "state"
        os.environ["TETHER_EXEC_APPROVER_KEY"] = str(root / "approver.key")

    def tearDown(self) -> None:
        self._tmp.cleanup()

    def policy(self, **kw) -> SandboxPolicy:
        return SandboxPolicy(workspace_root=self.ws, **kw)

    def tx(self, policy: dict | None, **kw) -> TetherExec:
        return TetherExec(self.ws, policy, state_dir=self.state, **kw)


class ObservationFormat(Base):
    """Our observation is tether's observation, for the same command."""

    COMMANDS = [
        "echo hello",
        "printf ''",
        "exit 3",
        "echo out; echo err >&2",
        "echo err >&2; exit 2",
        "seq 1 5000",
        "head -c 30000 /dev/zero | tr '\\0' x",
    ]

    def test_matches_tethers_own_rendering(self) -> None:
        pol = self.policy(network=True, max_output_chars=2000)
        for cmd in self.COMMANDS:
            with self.subTest(cmd=cmd):
                ours = self.tx(pol.to_dict()).run(cmd)
                code, theirs = asyncio.run(pol.execute_bash_with_code(cmd))
                self.assertEqual(ours.exit_code, code)
                self.assertEqual(ours.observation, theirs)

    def test_render_rules(self) -> None:
        self.assertEqual(render_observation(0, "", "", 100), "[exit 0: no output] Command succeeded.")
        self.assertEqual(render_observation(1, "", "", 100), "[exit 1: no output]")
        self.assertEqual(render_observation(2, "a", "b", 100), "a\n[stderr]\nb\n[exit 2]")
        long = render_observation(0, "x" * 50, "", 20)
        self.assertIn("... [truncated 30 chars by sandbox cap] ...", long)


class TetherPolicies(Base):
    def test_to_dict_is_accepted_unchanged_and_confines(self) -> None:
        d = self.policy(network=False, timeout_seconds=10.0).to_dict()
        r = self.tx(d).run("echo ok > made.txt && cat made.txt && touch /etc/x")
        self.assertEqual(r.decision, "allow")
        self.assertIn("ok", r.observation)
        self.assertIn("Read-only file system", r.observation)
        self.assertTrue((self.ws / "made.txt").exists())
        self.assertEqual(r.receipt["isolation"]["network"], "none (fresh namespace, loopback only)")

    def test_tethers_refusals_are_refusals(self) -> None:
        d = self.policy(network=False).to_dict()
        pol = self.policy(network=False)
        for cmd in ["sudo ls", "su root", "mount /dev/sda1 /mnt", "dd if=/dev/zero of=x bs=1 count=1", "chmod 777 x", "rm -rf /"]:
            with self.subTest(cmd=cmd):
                with self.assertRaises(PermissionError):
                    pol.validate_bash_command(cmd)  # tether refuses it ...
                r = self.tx(d).run(cmd)  # ... and so does tether-exec, before anything runs
                self.assertEqual(r.decision, "deny", r.observation)
                self.assertEqual(r.exit_code, 77)
                self.assertTrue(r.observation.startswith("Sandbox violation:"), r.observation)

    def test_refusal_messages_carry_tethers_words(self) -> None:
        ws = self.tx(self.policy(network=False).to_dict())
        self.assertIn("outside", ws.run("echo x > /etc/passwd").observation)
        (self.ws / ".git" / "hooks").mkdir(parents=True)
        self.assertIn("protected", ws.run("echo x > .git/hooks/pre-commit").observation)
        ro = self.tx(self.policy(profile="read-only", network=False).to_dict())
        self.assertIn("read-only", ro.run("echo x > notes.md").observation)
        r = ro.run("python3 -c 'print(1)'")
        self.assertEqual(r.decision, "deny")
        self.assertIn("allowlist", r.observation)
        self.assertEqual(ro.run("ls -la").decision, "allow")

    def test_timeout_is_124_with_tethers_message(self) -> None:
        r = self.tx(self.policy(network=False, timeout_seconds=1.0).to_dict()).run("sleep 30")
        self.assertEqual(r.exit_code, 124)
        self.assertEqual(r.observation, "Error: command timed out after 1.0s (SIGKILL).")


class ApprovalFlow(Base):
    def gated(self) -> dict:
        d = self.policy(network=False).to_dict()
        d.update({"require_approval_for": ["rm"], "default": "allow"})
        return d

    def test_approve_runs_the_held_command_once(self) -> None:
        (self.ws / "build").mkdir()
        tx = self.tx(self.gated(), session="ses_py")
        held = tx.run("rm -rf build && echo removed")
        self.assertEqual(held.decision, "ask")
        self.assertTrue(held.observation.startswith("[APPROVAL REQUIRED] Session `ses_py` wants to run:"))
        self.assertTrue((self.ws / "build").exists())
        done = tx.operator_message(held.pending_id, "/approve")
        self.assertEqual(done.exit_code, 0)
        self.assertEqual(done.observation, "removed\n")
        self.assertFalse((self.ws / "build").exists())

    def test_a_repeated_approve_returns_the_recorded_result(self) -> None:
        (self.ws / "build").mkdir()
        tx = self.tx(self.gated())
        held = tx.run("rm -rf build && echo removed >> runs.log && echo removed")
        first = tx.operator_message(held.pending_id, "/approve")
        again = tx.operator_message(held.pending_id, "/approve")
        self.assertEqual((first.exit_code, again.exit_code), (0, 0), again.observation)
        self.assertEqual(first.observation, "removed\n")
        self.assertIn("already ran", again.stderr)
        self.assertEqual((self.ws / "runs.log").read_text(), "removed\n")

    def test_an_action_needing_two_approvers_stays_held_after_one(self) -> None:
        (self.ws / "build").mkdir()
        policy = self.gated()
        policy["require_approval_for"] = [{"prefix": "rm", "approvals": 2}]
        tx = self.tx(policy)
        held = tx.run("rm -rf build")
        done = tx.operator_message(held.pending_id, "/approve")
        self.assertEqual((done.decision, done.exit_code), ("ask", 75), done.observation)
        self.assertIn("1 of 2 approvals", done.observation)
        self.assertTrue((self.ws / "build").exists())

    def test_reject_becomes_the_observation(self) -> None:
        (self.ws / "build").mkdir()
        tx = self.tx(self.gated())
        held = tx.run("rm -rf build")
        done = tx.operator_message(held.pending_id, "/reject use make clean instead")
        self.assertEqual(done.exit_code, 77)
        self.assertEqual(done.observation, "[ACTION REJECTED BY POLICY]: use make clean instead")
        self.assertTrue((self.ws / "build").exists())

    def test_a_reason_that_looks_like_an_option_is_still_the_reason(self) -> None:
        (self.ws / "build").mkdir()
        tx = self.tx(self.gated())
        held = tx.run("rm -rf build")
        done = tx.operator_message(held.pending_id, "/reject --force is not allowed here")
        self.assertEqual(done.exit_code, 77, done.observation)
        self.assertEqual(done.observation, "[ACTION REJECTED BY POLICY]: --force is not allowed here")
        self.assertTrue((self.ws / "build").exists())

    def test_held_stdin_is_what_runs(self) -> None:
        tx = self.tx(self.gated())
        held = tx.run("rm -f nothing; cat > got.txt", stdin="payload")
        done = tx.operator_message(held.pending_id, "/approve")
        self.assertEqual(done.exit_code, 0, done.observation)
        self.assertEqual((self.ws / "got.txt").read_text(), "payload")


class HarnessEdges(Base):
    """What a harness sends that the command line could misread."""

    def test_text_that_starts_with_a_dash_is_never_an_option(self) -> None:
        tx = self.tx(self.policy(network=False).to_dict(), session="-s1")
        r = tx.run("--version")
        # Judged as the script `--version` (a program of that name, which
        # the gate holds), in the session `-s1`: not a usage error.
        self.assertEqual((r.decision, r.exit_code), ("ask", 75), r.observation)
        self.assertIn("--version", r.observation)
        self.assertIn("Session `-s1`", r.observation)
        self.assertEqual(tx.resume("--help").decision, "error")
        self.assertNotEqual(tx.approve("--help").returncode, 0)
        self.assertNotEqual(tx.reject("--help", "r").returncode, 0)

    def test_an_empty_command_with_stdin_runs_stdin_as_tether_does(self) -> None:
        pol = self.policy(network=False)
        ours = self.tx(pol.to_dict()).run("  ", stdin="echo from-stdin")
        code, theirs = asyncio.run(pol.execute_bash_with_code("  ", "echo from-stdin"))
        self.assertEqual((ours.exit_code, ours.observation), (code, theirs))
        self.assertEqual(ours.observation, "from-stdin\n")

    def test_a_toml_policy_gives_its_timeout_and_output_cap(self) -> None:
        path = self.ws.parent / "p.toml"
        path.write_text('default = "allow"\ntimeout_seconds = 1\n')
        r = TetherExec(self.ws, path, state_dir=self.state).run("sleep 30")
        self.assertEqual(r.exit_code, 124)
        self.assertEqual(r.observation, "Error: command timed out after 1.0s (SIGKILL).")

    def test_policies_are_stored_in_the_state_directory_and_never_trusted_elsewhere(self) -> None:
        tx = self.tx(self.policy(network=False).to_dict())
        self.assertEqual(tx.policy_path.parent, self.state / "policies")
        self.assertEqual(tx.baseline_path.parent, self.state / "policies")
        # Without a state directory: tether-exec's own default, never a
        # shared temporary folder.
        os.environ["TETHER_EXEC_STATE_DIR"] = str(self.state.parent / "default-state")
        try:
            other = TetherExec(self.ws, {"default": "allow"})
        finally:
            del os.environ["TETHER_EXEC_STATE_DIR"]
        self.assertEqual(other.policy_path.parent, self.state.parent / "default-state" / "policies")
        # A stored policy someone changed is written back, not trusted.
        tx.baseline_path.write_text('default = "allow"\n')
        again = self.tx(self.policy(network=False).to_dict())
        self.assertIn("deny", again.baseline_path.read_text())
        self.assertEqual(again.run("dd if=/dev/zero of=/dev/null count=1").decision, "deny")
        # A folder others can write is refused.
        (self.state / "policies").chmod(0o777)
        with self.assertRaises(PermissionError):
            self.tx({"default": "allow"})

    def test_threads_storing_one_policy_never_see_it_half_written(self) -> None:
        import threading

        policy = self.policy(network=False).to_dict()
        errors: list[BaseException] = []
        seen: list[str] = []

        def make() -> None:
            try:
                tx = self.tx(dict(policy, note="x" * 200_000))
                seen.append(tx.policy_path.read_text())
            except BaseException as e:  # noqa: BLE001 - collected for the assertion
                errors.append(e)

        threads = [threading.Thread(target=make) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len({len(s) for s in seen}), 1, "every thread read the whole policy")
        leftovers = [p.name for p in (self.state / "policies").iterdir() if p.name.endswith(".tmp")]
        self.assertEqual(leftovers, [])


if __name__ == "__main__":
    unittest.main()
