#!/usr/bin/env bash
# Start-up cost of a confined run against bare /bin/true and against bubblewrap
# doing less (no Landlock, no seccomp). Medians and ratios from one hyperfine run.
#   scripts/bench.sh            (needs: hyperfine, bubblewrap; a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
bin_release=${TETHER_EXEC_RELEASE_BIN:-$(scripts/build-release.sh)}
bin="$bin_release"
ws=$(mktemp -d /tmp/tether-bench.XXXXXX); trap 'rm -rf "$ws"' EXIT
cd "$ws"
hyperfine -N --warmup 10 --runs "${RUNS:-200}" --export-json "$ws/b.json" \
  "$bin run -- /bin/true" \
  "bwrap --unshare-all --die-with-parent --new-session --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp /bin/true" \
  "/bin/true" >/dev/null
python3 - "$ws/b.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
med = {x["command"].split()[0].rsplit("/", 1)[-1]: x["median"] * 1000 for x in r}
te, bw, tr = med["tether-exec"], med["bwrap"], med["true"]
print(f"median ms: tether-exec run -- /bin/true {te:.2f} | bwrap {bw:.2f} | /bin/true {tr:.2f}")
print(f"ratio tether-exec/bwrap = {te/bw:.2f}   tether-exec/true = {te/tr:.2f}")
PY
