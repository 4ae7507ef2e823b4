#!/usr/bin/env bash
# What the audit trail adds to a run: `run -- /bin/true` of the shipped build
# against a build whose runs record nothing (feature bench-unaudited, built
# into its own target directory), started in turn A B A B ... so that drift of
# the machine hits both alike. Prints both medians and the median of the
# paired differences. Verifying 100,000 records: `cargo bench --bench audit`.
#   scripts/bench-audit.sh           (N=400 pairs by default)
set -euo pipefail
cd "$(dirname "$0")/.."
audited=$(scripts/build-release.sh)
CARGO_TARGET_DIR="$PWD/target/bench-unaudited" \
  cargo rustc --release --bin tether-exec --features bench-unaudited -q -- -C target-feature=+crt-static
unaudited="$PWD/target/bench-unaudited/release/tether-exec"
root=$(mktemp -d /tmp/tether-bench-audit.XXXXXX); trap 'rm -rf "$root"' EXIT
mkdir "$root/ws"
python3 - "$audited" "$unaudited" "$root" "${N:-400}" <<'PY'
import os, statistics, sys, time
audited, unaudited, root, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
env = dict(os.environ, TETHER_EXEC_STATE_DIR=os.path.join(root, "state"))
devnull = os.open(os.devnull, os.O_RDWR)
os.chdir(os.path.join(root, "ws"))
def once(binary):
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(binary, [binary, "run", "--", "/bin/true"], env,
                         file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)])
    _, status = os.waitpid(pid, 0)
    t1 = time.perf_counter_ns()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{binary} run -- /bin/true failed")
    return (t1 - t0) / 1e6
for _ in range(20):
    once(audited); once(unaudited)
a, u = [], []
for _ in range(n):
    a.append(once(audited)); u.append(once(unaudited))
diff = statistics.median(x - y for x, y in zip(a, u))
records = sum(1 for _ in open(os.path.join(root, "state", "audit", "log.jsonl")))
print(f"median ms: audited {statistics.median(a):.3f} | unaudited {statistics.median(u):.3f} | "
      f"paired difference {diff:.3f} ms per run ({records / (n + 20):.0f} records per run, "
      f"{diff / (records / (n + 20)):.3f} ms per record)")
PY
