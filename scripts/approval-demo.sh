#!/usr/bin/env bash
# Plays a harness: an agent's command is held, a human approves, the harness
# resumes it and hands the output to the model; then a command is rejected and
# the harness hands the rejection to the model as its observation.
#   scripts/approval-demo.sh          (builds tether-exec if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q
tx="$PWD/target/debug/tether-exec"
root=$(mktemp -d /tmp/tether-demo.XXXXXX); trap 'rm -rf "$root"' EXIT
export TETHER_EXEC_STATE_DIR="$root/state" TETHER_EXEC_APPROVER_KEY="$root/approver.key"
mkdir -p "$root/ws/build" && echo obj > "$root/ws/build/main.o" && cd "$root/ws"
policy="$OLDPWD/policies/workspace-write.toml"

echo "agent> rm -rf build/ && echo cleaned"
set +e
"$tx" run --policy "$policy" --session ses_demo -c 'rm -rf build/ && echo cleaned' 2>"$root/err"
code=$?
set -e
cat "$root/err"
[ "$code" -eq 75 ] || { echo "expected 75 (held), got $code"; exit 1; }
id=$(sed -n 's/.*tether-exec approve \(apr_[0-9a-f]*\).*/\1/p' "$root/err" | head -1)

echo; echo "human> tether-exec show $id"; "$tx" show "$id"
echo; echo "human> tether-exec approve $id"; "$tx" approve "$id"
echo; echo "harness> tether-exec resume $id   (observation for the model:)"
out=$("$tx" resume "$id")
echo "$out"
[ "$out" = "cleaned" ] && [ ! -e build ] || { echo "resume did not run the held command"; exit 1; }

echo; echo "agent> git push origin main"
set +e
"$tx" run --policy "$policy" --session ses_demo -c 'git push origin main' 2>"$root/err"
set -e
id=$(sed -n 's/.*tether-exec approve \(apr_[0-9a-f]*\).*/\1/p' "$root/err" | head -1)
echo "human> tether-exec reject $id --reason \"CI pushes; open a pull request instead\""
"$tx" reject "$id" --reason "CI pushes; open a pull request instead"
set +e
obs=$("$tx" resume "$id" 2>&1)
code=$?
set -e
echo "harness> resume exit $code, observation for the model: $obs"
[ "$code" -eq 77 ] && [ "$obs" = "[ACTION REJECTED BY POLICY]: CI pushes; open a pull request instead" ] || exit 1
echo; echo "human> tether-exec audit verify"; "$tx" audit verify
