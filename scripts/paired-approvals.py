#!/usr/bin/env python3
"""Compare two builds on the approval path, step by step: in each round both
builds hold a command (its preview runs), approve it and resume it (the
preview lands), in alternating order, each with its own state directory and
workspace; as the Python integration does, each run and resume writes a
receipt to a new file. Prints each step's medians and the median of the paired
differences B - A, in milliseconds. Each call is timed as a harness sees it:
until its stdout and stderr are closed and its exit status is collected.

    scripts/paired-approvals.py [-n ROUNDS] [--files N] [--no-preview] [--one-call] A_BINARY B_BINARY

--files N puts N files (1,000 a directory) in each workspace: the approval
binds to the workspace's state, read at hold and at resume.
--no-preview holds without a preview (`preview = false`): the hold runs
nothing, and the resume runs the command, confined.
--one-call approves and resumes in one call (`approve ID --resume`), as
tether-sdk does.

Both binaries are first dropped from the page cache, so that both are read
back from disk alike: on a VM a binary's own page-cache history can move its
timing by tenths of a millisecond (see `timed_call.evict`)."""
import argparse, json, os, shutil, statistics, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timed_call import evict, timed_call  # noqa: E402
from fill_workspace import fill_workspace  # noqa: E402


def main():
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("-n", type=int, default=150)
    p.add_argument("--files", type=int, default=0)
    p.add_argument("--no-preview", action="store_true")
    p.add_argument("--one-call", action="store_true")
    p.add_argument("a")
    p.add_argument("b")
    opts = p.parse_args()
    bins = {"A": os.path.abspath(opts.a), "B": os.path.abspath(opts.b)}
    for b in bins.values():
        evict(b)
    root = tempfile.mkdtemp(prefix="tether-paired-approvals.")
    try:
        run(bins, root, opts.n, opts.files, opts.no_preview, opts.one_call)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(bins, root, n, files, no_preview, one_call):
    devnull = os.open(os.devnull, os.O_RDWR)
    policy = os.path.join(root, "p.toml")
    with open(policy, "w") as f:
        rule = '{ prefix = "touch", preview = false }' if no_preview else '"touch"'
        f.write(f'require_approval_for = [{rule}]\ndefault = "allow"\n')
    for k in bins:
        ws = os.path.join(root, f"ws-{k}")
        os.makedirs(ws)
        fill_workspace(ws, files)

    def timed(k, *args, expect=0):
        env = dict(os.environ, TETHER_EXEC_STATE_DIR=os.path.join(root, f"state-{k}"),
                   TETHER_EXEC_APPROVER_KEY=os.path.join(root, f"key-{k}", "approver.key"))
        dt, code = timed_call([bins[k], *args], env, devnull)
        if code != expect:
            sys.exit(f"{bins[k]} {' '.join(args)} exited {code}, expected {expect}")
        return dt

    steps = ["hold", "approve --resume"] if one_call else ["hold", "approve", "resume"]
    times = {k: {s: [] for s in steps} for k in bins}
    for i in range(n + 3):
        for k in (["A", "B"] if i % 2 == 0 else ["B", "A"]):
            os.chdir(os.path.join(root, f"ws-{k}"))
            receipt = os.path.join(root, f"{k}-held{i}.json")
            h = timed(k, "run", "--policy", policy, "--receipt", receipt, "-c", f"touch held{i}", expect=75)
            with open(receipt) as f:
                aid = json.load(f)["pending_id"]
            resumed = os.path.join(root, f"{k}-resumed{i}.json")
            if one_call:
                done = (timed(k, "approve", aid, "--resume", "--receipt", resumed),)
            else:
                done = (timed(k, "approve", aid), timed(k, "resume", "--receipt", resumed, aid))
            if not os.path.exists(f"held{i}"):
                sys.exit(f"{bins[k]}: the resumed command did not land")
            if i >= 3:  # warm-up rounds
                for s, t in zip(steps, (h, *done)):
                    times[k][s].append(t)
    for s in steps:
        a, b = times["A"][s], times["B"][s]
        d = statistics.median(y - x for x, y in zip(a, b))
        print(f"{s:16} A {statistics.median(a):6.2f}  B {statistics.median(b):6.2f}  paired B-A {d:+.2f} ms")
    whole = statistics.median(
        sum(times["B"][s][i] for s in steps) - sum(times["A"][s][i] for s in steps) for i in range(n))
    print(f"{' + '.join(steps)}, paired B-A {whole:+.2f} ms")


if __name__ == "__main__":
    main()
