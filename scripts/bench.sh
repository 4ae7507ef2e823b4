#!/usr/bin/env bash
# Start-up cost of a confined run against bare /bin/true and against bubblewrap
# doing less (no Landlock, no seccomp). hyperfine runs the three commands in
# ROUNDS alternating rounds (so that the machine's drift hits all of them
# alike); medians over every run, and the ratio of the medians.
#   scripts/bench.sh            (needs: hyperfine, bubblewrap; builds the release binary)
#   ROUNDS=10 RUNS=30 scripts/bench.sh
#   REPO=1 scripts/bench.sh     (the workspace is a git repository of 200 files:
#                                its .git becomes an overlay of its own)
set -euo pipefail
cd "$(dirname "$0")/.."
bin_release=${TETHER_EXEC_RELEASE_BIN:-$(scripts/build-release.sh)}
bin="$bin_release"
ws=$(mktemp -d /tmp/tether-bench.XXXXXX); trap 'rm -rf "$ws"' EXIT
cd "$ws"
if [ -n "${REPO:-}" ]; then
  git init -q && for i in $(seq 200); do echo "$i" > "f$i"; done
  git add . && git -c user.name=b -c user.email=b@b commit -qm bench
fi
for round in $(seq "${ROUNDS:-10}"); do
  hyperfine -N --warmup 5 --runs "${RUNS:-30}" --export-json "$ws/b$round.json" \
    "$bin run -- /bin/true" \
    "bwrap --unshare-all --die-with-parent --new-session --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp /bin/true" \
    "/bin/true" >/dev/null
done
python3 - "$ws"/b*.json <<'PY'
import json, statistics, sys
times = {}
for path in sys.argv[1:]:
    for x in json.load(open(path))["results"]:
        times.setdefault(x["command"].split()[0].rsplit("/", 1)[-1], []).extend(x["times"])
med = {k: statistics.median(v) * 1000 for k, v in times.items()}
te, bw, tr = med["tether-exec"], med["bwrap"], med["true"]
print(f"median ms over {len(times['true'])} runs each: tether-exec run -- /bin/true {te:.2f} | bwrap {bw:.2f} | /bin/true {tr:.2f}")
print(f"ratio tether-exec/bwrap = {te/bw:.2f}   tether-exec/true = {te/tr:.2f}")
PY
