#!/usr/bin/env bash
# What holding costs: median wall time of a plain confined run of a command,
# against the hold (which runs the command once, confined, as a preview),
# the approve and the resume (which lands the preview) of the same command,
# each timed as its own process in the same rounds, as a harness sees it
# (until its output pipes close and its exit status is collected), and the
# hold of another command followed by `approve --resume` (the operator's
# decision and the run it releases in one call, as tether-sdk makes it). As the
# Python integration does, every run and resume writes a receipt (a new file
# each call); approve is the operator's and writes none.
#   scripts/bench-approvals.sh        (N=40 rounds by default)
#   FILES=10000 scripts/bench-approvals.sh   (a workspace of that many files,
#   1,000 a directory: what the approval binds to is read at hold and resume)
#   POLICY_EXTRA='fingerprint_ignore = ["d0", "d1"]'   (lines added to the
#   holding policy)
#   RULE='{ prefix = "touch", preview = false }'   (the holding rule: this one
#   holds without a preview, and resume runs the command)
set -euo pipefail
cd "$(dirname "$0")/.."
bin_release=${TETHER_EXEC_RELEASE_BIN:-$(scripts/build-release.sh)}
root=$(mktemp -d /tmp/tether-bench.XXXXXX); trap 'rm -rf "$root"' EXIT
mkdir "$root/ws"
python3 scripts/fill_workspace.py "$root/ws" "${FILES:-0}"
printf 'require_approval_for = [%s]\ndefault = "allow"\n%s\n' "${RULE:-\"touch\"}" "${POLICY_EXTRA:-}" > "$root/p.toml"
TETHER_EXEC_SCRIPTS="$PWD/scripts" python3 - "$bin_release" "$root" "${N:-40}" <<'PY'
import json, os, statistics, sys
sys.path.insert(0, os.environ["TETHER_EXEC_SCRIPTS"])
from timed_call import timed_call
tx, root, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = dict(os.environ, TETHER_EXEC_STATE_DIR=f"{root}/state", TETHER_EXEC_APPROVER_KEY=f"{root}/approver.key")
devnull = os.open(os.devnull, os.O_RDWR)
os.chdir(f"{root}/ws")
def timed(*args, expect=0):
    # As a harness sees a call: until its output pipes close and its exit
    # status is collected.
    dt, code = timed_call([tx, *args], env, devnull)
    if code != expect:
        sys.exit(f"{args} exited {code}, expected {expect}")
    return dt
plain, hold, approve, resume, hold2, both = [], [], [], [], [], []
for i in range(n + 3):
    p = timed("run", "--receipt", f"{root}/plain{i}.json", "-c", f"touch plain{i}")
    h = timed("run", "--policy", f"{root}/p.toml", "--receipt", f"{root}/held{i}.json", "-c", f"touch held{i}", expect=75)
    aid = json.load(open(f"{root}/held{i}.json"))["pending_id"]
    a = timed("approve", aid)
    r = timed("resume", "--receipt", f"{root}/resumed{i}.json", aid)
    # The same, with the operator's decision and the run it releases in one
    # call, as tether-sdk's /approve makes it.
    h2 = timed("run", "--policy", f"{root}/p.toml", "--receipt", f"{root}/held2-{i}.json", "-c", f"touch two{i}", expect=75)
    aid2 = json.load(open(f"{root}/held2-{i}.json"))["pending_id"]
    ar = timed("approve", aid2, "--resume", "--receipt", f"{root}/resumed2-{i}.json")
    if not (os.path.exists(f"held{i}") and os.path.exists(f"two{i}")):
        sys.exit("the resumed command did not land")
    if i >= 3:  # warm-up rounds
        plain.append(p); hold.append(h); approve.append(a); resume.append(r); hold2.append(h2); both.append(ar)
m = {k: statistics.median(v) for k, v in dict(plain=plain, hold=hold, approve=approve, resume=resume, both=both).items()}
whole = statistics.median(h + a + r for h, a, r in zip(hold, approve, resume))
machine = statistics.median(h + r for h, r in zip(hold, resume))
one_call = statistics.median(h + ar for h, ar in zip(hold2, both))
print(f"median ms: plain run {m['plain']:.2f} | hold (with its preview run) {m['hold']:.2f} | approve {m['approve']:.2f} | resume {m['resume']:.2f} | approve --resume {m['both']:.2f}")
print(f"hold + approve + resume {whole:.2f} ms, {whole - m['plain']:+.2f} ms over a plain run; "
      f"hold + resume (the harness's side) {machine:.2f} ms, {machine - m['plain']:+.2f} ms; "
      f"hold + approve --resume {one_call:.2f} ms, {one_call - m['plain']:+.2f} ms")
PY
