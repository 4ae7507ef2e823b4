#!/usr/bin/env bash
# What holding costs: median wall time of a plain confined run of a command,
# against the hold (which runs the command once, confined, as a preview),
# the approve and the resume (which lands the preview) of the same command,
# each timed as its own process in the same rounds, as a harness sees it
# (until its output pipes close and its exit status is collected).
#   scripts/bench-approvals.sh        (N=40 rounds by default)
set -euo pipefail
cd "$(dirname "$0")/.."
bin_release=${TETHER_EXEC_RELEASE_BIN:-$(scripts/build-release.sh)}
root=$(mktemp -d /tmp/tether-bench.XXXXXX); trap 'rm -rf "$root"' EXIT
mkdir "$root/ws"
printf 'require_approval_for = ["touch"]\ndefault = "allow"\n' > "$root/p.toml"
python3 - "$bin_release" "$root" "${N:-40}" <<'PY'
import json, os, selectors, statistics, sys, time
tx, root, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = dict(os.environ, TETHER_EXEC_STATE_DIR=f"{root}/state", TETHER_EXEC_APPROVER_KEY=f"{root}/approver.key")
devnull = os.open(os.devnull, os.O_RDWR)
os.chdir(f"{root}/ws")
def timed(*args, expect=0):
    # As a harness sees a call: until its stdout and stderr (pipes) are
    # closed and its exit status is collected.
    t0 = time.perf_counter_ns()
    pipes = [os.pipe(), os.pipe()]
    pid = os.posix_spawn(tx, [tx, *args], env, file_actions=[
        (os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, pipes[0][1], 1), (os.POSIX_SPAWN_DUP2, pipes[1][1], 2)])
    with selectors.DefaultSelector() as sel:
        for r, w in pipes:
            os.close(w)
            sel.register(r, selectors.EVENT_READ)
        while sel.get_map():
            for key, _ in sel.select():
                if not os.read(key.fd, 65536):
                    sel.unregister(key.fd)
                    os.close(key.fd)
    _, st = os.waitpid(pid, 0)
    dt = (time.perf_counter_ns() - t0) / 1e6
    if os.waitstatus_to_exitcode(st) != expect:
        sys.exit(f"{args} exited {os.waitstatus_to_exitcode(st)}, expected {expect}")
    return dt
plain, hold, approve, resume = [], [], [], []
for i in range(n + 3):
    p = timed("run", "-c", f"touch plain{i}")
    h = timed("run", "--policy", f"{root}/p.toml", "--receipt", f"{root}/r.json", "-c", f"touch held{i}", expect=75)
    aid = json.load(open(f"{root}/r.json"))["pending_id"]
    a = timed("approve", aid)
    r = timed("resume", aid)
    if not os.path.exists(f"held{i}"):
        sys.exit("the resumed command did not land")
    if i >= 3:  # warm-up rounds
        plain.append(p); hold.append(h); approve.append(a); resume.append(r)
m = {k: statistics.median(v) for k, v in dict(plain=plain, hold=hold, approve=approve, resume=resume).items()}
whole = statistics.median(h + a + r for h, a, r in zip(hold, approve, resume))
machine = statistics.median(h + r for h, r in zip(hold, resume))
print(f"median ms: plain run {m['plain']:.2f} | hold (with its preview run) {m['hold']:.2f} | approve {m['approve']:.2f} | resume {m['resume']:.2f}")
print(f"hold + approve + resume {whole:.2f} ms, {whole - m['plain']:+.2f} ms over a plain run; "
      f"hold + resume (the harness's side) {machine:.2f} ms, {machine - m['plain']:+.2f} ms")
PY
