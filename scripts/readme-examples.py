#!/usr/bin/env python3
"""Run every ```console block of README.md as a newcomer would, and compare.

Each `$ command` runs (bash, in a fresh project folder with this repository's
policies/), and its output must equal the lines README shows under it. Values
that differ per run are normalised on both sides: held-action ids (README's ids
are mapped to the real ones in order of appearance, so later commands use the
real id), approver key ids, and digests. A command with no lines under it in
README must print nothing.
    scripts/readme-examples.py        (uses target/debug/tether-exec)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ID = re.compile(r"apr_[0-9a-f]{16}")
KEY = re.compile(r"\b(as|approver:) ?[0-9a-f]{16}\b")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def blocks(text: str) -> list[list[str]]:
    out, cur, inside = [], [], False
    for line in text.splitlines():
        if line.strip() == "```console":
            inside, cur = True, []
        elif inside and line.strip() == "```":
            inside = False
            out.append(cur)
        elif inside:
            cur.append(line)
    return out


def main() -> int:
    readme = (ROOT / "README.md").read_text()
    tmp = Path(tempfile.mkdtemp(prefix="tether-readme-"))
    env = dict(os.environ)
    env["PATH"] = f"{ROOT / 'target' / 'debug'}:{env['PATH']}"
    env["TETHER_EXEC_STATE_DIR"] = str(tmp / "state")
    env["TETHER_EXEC_APPROVER_KEY"] = str(tmp / "approver.key")
    env["NO_COLOR"] = "1"
    ids: dict[str, str] = {}
    failures, ran = 0, 0
    try:
        for block in blocks(readme):
            cwd = tmp
            i = 0
            while i < len(block):
                line = block[i]
                i += 1
                if not line.startswith("$ "):
                    continue
                cmd = line[2:]
                expected = []
                while i < len(block) and not block[i].startswith("$ "):
                    if block[i].strip():
                        expected.append(block[i])
                    i += 1
                for readme_id, real in ids.items():
                    cmd = cmd.replace(readme_id, real)
                if cmd.startswith("cd "):
                    # The project a newcomer stands in: the repository's policies and a build/ folder.
                    cwd = tmp / cmd[3:].strip()
                    (cwd / "build").mkdir(parents=True, exist_ok=True)
                    (cwd / "build" / "main.o").write_text("obj\n")
                    shutil.copytree(ROOT / "policies", cwd / "policies", dirs_exist_ok=True)
                    continue
                ran += 1
                if cmd.startswith("echo $?"):
                    actual = [str(last_code)]
                else:
                    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True)
                    last_code = p.returncode
                    actual = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
                    # Map README's ids to the real ones, in order of first appearance.
                    want_ids = [m for ln in expected for m in ID.findall(ln)]
                    got_ids = [m for ln in actual for m in ID.findall(ln)]
                    for w, g in zip(dict.fromkeys(want_ids), dict.fromkeys(got_ids)):
                        ids.setdefault(w, g)

                def norm(lines: list[str]) -> list[str]:
                    res = []
                    for ln in lines:
                        for readme_id, real in ids.items():
                            ln = ln.replace(readme_id, real)
                        ln = KEY.sub(r"\1 <key>", DIGEST.sub("sha256:<digest>", ln))
                        res.append(ln.rstrip())
                    return res

                if norm(actual) != norm(expected):
                    failures += 1
                    print(f"README example differs: $ {cmd}\n  README says:\n    " + "\n    ".join(expected) + "\n  it printed:\n    " + "\n    ".join(actual))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"readme examples: {ran - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
