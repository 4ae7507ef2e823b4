#!/usr/bin/env bash
# What holding costs: median wall time of a plain confined run, against the
# whole hold + approve + resume sequence of the same command (three processes).
#   scripts/bench-approvals.sh        (N=30 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
bin_release=${TETHER_EXEC_RELEASE_BIN:-$(scripts/build-release.sh)}
tx="$bin_release"
root=$(mktemp -d /tmp/tether-bench.XXXXXX); trap 'rm -rf "$root"' EXIT
export TETHER_EXEC_STATE_DIR="$root/state" TETHER_EXEC_APPROVER_KEY="$root/approver.key"
mkdir "$root/ws" && cd "$root/ws"
printf 'require_approval_for = ["touch"]\ndefault = "allow"\n' > "$root/p.toml"
n=${N:-30}
ns() { date +%s%N; }
plain=(); held=()
for _ in $(seq "$n"); do
  t0=$(ns); "$tx" run -c 'true'; t1=$(ns); plain+=($(( (t1 - t0) / 1000 )))
  t0=$(ns)
  id=$("$tx" run --policy "$root/p.toml" -c 'touch x' 2>&1 >/dev/null | sed -n 's/.*tether-exec approve \(apr_[0-9a-f]*\).*/\1/p' | head -1 || true)
  "$tx" approve "$id" >/dev/null
  "$tx" resume "$id"
  t1=$(ns); held+=($(( (t1 - t0) / 1000 )))
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mp=$(median "${plain[@]}"); mh=$(median "${held[@]}")
echo "median µs: plain run $mp | hold + approve + resume $mh | added $((mh - mp)) (ratio $(awk "BEGIN{printf \"%.2f\", $mh/$mp}"))"
