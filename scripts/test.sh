#!/usr/bin/env bash
# The whole test suite. As root it runs twice: once as root, then the very same
# test binaries again as an unprivileged user (uid 65534 via setpriv), because
# the sandbox must hold in both worlds. As a normal user it runs once.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --lib --bins --tests --no-fail-fast
scripts/test-python.sh
scripts/approval-demo.sh >/dev/null && echo "approval demo: ok"
python3 scripts/readme-examples.py

if [ "$(id -u)" -ne 0 ]; then
  exit 0
fi

echo "== again as an unprivileged user (uid 65534)"
stage=$(mktemp -d /tmp/tether-exec-unpriv.XXXXXX)
trap 'rm -rf "$stage"' EXIT
chmod 755 "$stage"
# Build (no-op after the run above) and list the test executables.
mapfile -t tests < <(cargo test --lib --bins --tests --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["executable"])')
cp target/debug/tether-exec "$stage/tether-exec"
chmod 755 "$stage/tether-exec"
fail=0
for t in "${tests[@]}"; do
  cp "$t" "$stage/"
  name=$(basename "$t")
  chmod 755 "$stage/$name"
  echo "-- $name"
  if ! (cd "$stage" && setpriv --reuid=65534 --regid=65534 --clear-groups \
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$stage" TMPDIR=/tmp \
        TETHER_EXEC_BIN="$stage/tether-exec" "./$name"); then
    fail=1
  fi
done
exit $fail
