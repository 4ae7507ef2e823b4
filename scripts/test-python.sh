#!/usr/bin/env bash
# The Python harness module against the real tether harness (PyPI tether-sdk,
# Python 3.12+), in a venv under target/. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
py=""
for cand in /root/.pyenv/versions/3.1[23]*/bin/python3 "$HOME"/.pyenv/versions/3.1[23]*/bin/python3 python3.13 python3.12 python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
    py=$cand
    break
  fi
done
if [ -z "$py" ]; then
  echo "scripts/test-python.sh: tether-sdk needs Python 3.12 or newer and none was found (install python3.12, or pyenv install 3.12)" >&2
  exit 1
fi
venv=target/tether-py-venv
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -c 'import tether, jsonschema' 2>/dev/null || "$venv/bin/pip" install -q 'tether-sdk==0.2.9' 'jsonschema==4.26.0'
cargo build -q
export TETHER_EXEC_BIN="$PWD/target/debug/tether-exec"
"$venv/bin/python" -m unittest -v integrations/python/test_tether_exec.py tests/schemas/test_schemas.py
