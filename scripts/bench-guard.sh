#!/usr/bin/env bash
# What the create guard costs per name made. A Python script opens 1,000
# files with O_CREAT (each goes to the guard) and, in the same rounds,
# another opens the same 1,000 files without it (none does); the difference
# of their medians, less the same difference outside the sandbox (the
# kernel's own), over 1,000, is the guard's round trip per call.
#   scripts/bench-guard.sh          (N=30 rounds by default)
set -euo pipefail
cd "$(dirname "$0")/.."
bin_release=${TETHER_EXEC_RELEASE_BIN:-$(scripts/build-release.sh)}
root=$(mktemp -d /tmp/tether-bench.XXXXXX); trap 'rm -rf "$root"' EXIT
mkdir "$root/ws"
cat > "$root/ws/creating.py" <<'PY'
import os
for i in range(1000):
    os.close(os.open("out/f%d" % i, os.O_WRONLY | os.O_CREAT, 0o644))
PY
cat > "$root/ws/plain.py" <<'PY'
import os
for i in range(1000):
    os.close(os.open("out/f%d" % i, os.O_WRONLY))
PY
mkdir "$root/ws/out"
(cd "$root/ws" && python3 creating.py)
TETHER_EXEC_SCRIPTS="$PWD/scripts" python3 - "$bin_release" "$root" "${N:-30}" <<'PY'
import os, statistics, sys
sys.path.insert(0, os.environ["TETHER_EXEC_SCRIPTS"])
from timed_call import timed_call
tx, root, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = dict(os.environ, TETHER_EXEC_STATE_DIR=f"{root}/state")
devnull = os.open(os.devnull, os.O_RDWR)
os.chdir(f"{root}/ws")
def timed(cmd):
    dt, code = timed_call(cmd, env, devnull)
    if code != 0:
        sys.exit(f"{cmd} exited {code}")
    return dt
runs = {k: [] for k in ("in_creating", "in_plain", "out_creating", "out_plain")}
for i in range(n + 3):
    order = [("in_creating", [tx, "run", "--", "python3", "creating.py"]),
             ("in_plain", [tx, "run", "--", "python3", "plain.py"]),
             ("out_creating", ["python3", "creating.py"]),
             ("out_plain", ["python3", "plain.py"])]
    if i % 2:
        order.reverse()
    for k, cmd in order:
        t = timed(cmd)
        if i >= 3:  # warm-up rounds
            runs[k].append(t)
m = {k: statistics.median(v) for k, v in runs.items()}
inside = statistics.median(a - b for a, b in zip(runs["in_creating"], runs["in_plain"]))
outside = statistics.median(a - b for a, b in zip(runs["out_creating"], runs["out_plain"]))
print("median ms: " + " | ".join(f"{k} {v:.2f}" for k, v in m.items()))
print(f"1,000 creating opens cost {inside:.2f} ms more than plain opens inside, {outside:.2f} ms outside: "
      # (ms per 1,000 calls is us per call)
      f"the guard adds {inside - outside:.1f} us per name made")
PY
