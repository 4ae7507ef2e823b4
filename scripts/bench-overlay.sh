#!/usr/bin/env bash
# The overlay workspace's cost:
#  1. committing one changed file in workspaces of 100, 10,000 and 100,000 files
#     (overlay run minus the same run in bind mode, medians) — it should grow
#     with the change, not with the workspace;
#  2. what the overlay adds to `run -- /bin/true`;
#  3. a 1 GB file written inside lands by rename, not by copy (wall time of the
#     overlay run against the same write in bind mode).
#   scripts/bench-overlay.sh          (needs hyperfine; RUNS=100 pairs by default)
set -euo pipefail
cd "$(dirname "$0")/.."
bin_release=${TETHER_EXEC_RELEASE_BIN:-$(scripts/build-release.sh)}
tx="$bin_release"
root=$(mktemp -d /tmp/tether-bench-ovl.XXXXXX); trap 'rm -rf "$root"' EXIT
state="$root/state"
printf 'writable_globs = ["**/*.md"]\n' > "$root/overlay.toml"
printf 'writable_globs = ["docs/**"]\n' > "$root/bind.toml"
runs=${RUNS:-100}
paired="$PWD/scripts/paired.py"
for n in 100 10000 100000; do
  ws="$root/ws$n"; mkdir -p "$ws/docs"
  python3 -c "
import os, sys
ws = sys.argv[1]; n = int(sys.argv[2])
for i in range(n):
    d = os.path.join(ws, 'src', 'd%d' % (i // 1000)); os.makedirs(d, exist_ok=True)
    open(os.path.join(d, 'f%d.txt' % i), 'w').write('x')
" "$ws" "$n"
  read -r o b d <<<"$("$paired" -n "$runs" --cwd "$ws" \
    ::A "$tx" --state-dir "$state" run --policy "$root/overlay.toml" -- /bin/sh -c 'date > docs/a.md' \
    ::B "$tx" --state-dir "$state" run --policy "$root/bind.toml" -- /bin/sh -c 'date > docs/a.md')"
  echo "commit one file, $n files in the workspace: overlay $o ms, bind $b ms, overlay adds $d ms (median of paired runs)"
done
ws="$root/ws100"
read -r o b d <<<"$("$paired" -n "$runs" --cwd "$ws" \
  ::A "$tx" --state-dir "$state" run --policy "$root/overlay.toml" -- /bin/true \
  ::B "$tx" --state-dir "$state" run --policy "$root/bind.toml" -- /bin/true)"
echo "run -- /bin/true: overlay $o ms, bind $b ms, overlay adds $d ms (median of paired runs)"
(cd "$ws" && hyperfine -N --warmup 1 --runs 5 --export-json "$root/g.json" \
  --prepare "rm -f docs/big.md" \
  "$tx --state-dir $state run --policy $root/overlay.toml -- /bin/sh -c 'head -c 1G /dev/zero > docs/big.md'" \
  "$tx --state-dir $state run --policy $root/bind.toml -- /bin/sh -c 'head -c 1G /dev/zero > docs/big.md'" >/dev/null)
read -r o b <<<"$(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; print(' '.join('%.2f' % (x['median']*1000) for x in r))" "$root/g.json")"
echo "write 1 GB: overlay $o ms, bind $b ms (a copy at commit would roughly double the overlay time)"
