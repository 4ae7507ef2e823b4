#!/usr/bin/env bash
# What reading a workspace's git index costs a run: `run -- /bin/true` in a
# repository whose index has N entries (one of them a gitlink), against the
# same run in the same folder with the index moved away, in pairs (A B A B).
# Moved back and forth, the index is new to every run that has it: that is
# what the first run after the index changed pays. Then the same index left
# unchanged (its gitlinks are kept in the state directory once it is more
# than a second old) against a repository with no index.
#   scripts/bench-gitindex.sh          (N=100000 entries, RUNS=100 pairs)
set -euo pipefail
cd "$(dirname "$0")/.."
tx=${TETHER_EXEC_RELEASE_BIN:-$(scripts/build-release.sh)}
root=$(mktemp -d /tmp/tether-bench-idx.XXXXXX); trap 'rm -rf "$root"' EXIT
ws="$root/ws"; mkdir "$ws"; git -C "$ws" init -q
python3 -c "
import sys
for i in range(int(sys.argv[1])):
    sys.stdout.write('100644 blob e69de29bb2d1d6434b8b29ae775ad8c2e48c5391\tsrc/d%d/f%06d.txt\n' % (i // 1000, i))
" "${N:-100000}" | git -C "$ws" update-index --index-info
git -C "$ws" update-index --add --cacheinfo 160000,1111111111111111111111111111111111111111,vendor/x
echo "index: $(stat -c %s "$ws/.git/index") bytes"
paired="$PWD/scripts/paired.py"
# A with the index, B without: paired.py runs them in turn, so the index is
# moved between them by a wrapper.
cat > "$root/with.sh" <<SH
#!/bin/sh
[ -e "$root/index.away" ] && mv "$root/index.away" "$ws/.git/index"
exec "$tx" --state-dir "$root/state" run -- /bin/true
SH
cat > "$root/without.sh" <<SH
#!/bin/sh
[ -e "$ws/.git/index" ] && mv "$ws/.git/index" "$root/index.away"
exec "$tx" --state-dir "$root/state" run -- /bin/true
SH
chmod +x "$root/with.sh" "$root/without.sh"
read -r a b d <<<"$("$paired" -n "${RUNS:-100}" --cwd "$ws" ::A "$root/with.sh" ::B "$root/without.sh")"
echo "run -- /bin/true: with the index $a ms, without $b ms, the index adds $d ms (median of paired runs)"
if [ -e "$root/index.away" ]; then mv "$root/index.away" "$ws/.git/index"; fi
ws2="$root/ws2"; mkdir "$ws2"; git -C "$ws2" init -q
sleep 1.2  # older than the racy margin: an index this old is kept
test -s "$ws/.git/index"
read -r a b d <<<"$("$paired" -n "${RUNS:-100}" ::A "$tx" --state-dir "$root/state" run --workspace "$ws" -- /bin/true ::B "$tx" --state-dir "$root/state" run --workspace "$ws2" -- /bin/true)"
echo "run -- /bin/true: with the same index unchanged $a ms, in a repository without one $b ms, the index adds $d ms (median of paired runs)"
