#!/usr/bin/env python3
"""Time two commands in turn (A B B A A B ...) and print both medians and the
median of the paired differences A - B, in milliseconds. Pairing keeps the
comparison fair when the machine's speed drifts during the measurement; the
order alternates within pairs because whichever runs right after the other
pays for part of its teardown.

    scripts/paired.py [-n RUNS] [--warmup N] [--cwd DIR] [--pipes] ::A A... ::B B...

Each command runs without a shell, its output discarded; a non-zero exit
stops the measurement. With --pipes its stdout and stderr are pipes read to
their end, as a harness reads them (tether, `subprocess.run(capture_output=
True)`): a command is then done when both are closed and it has exited.

Each program named by a path is first dropped from the page cache, so that
both are read back from disk alike (see `timed_call.evict`); --keep-cache
leaves them as they are."""
import argparse, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timed_call import evict, timed_call  # noqa: E402

def main():
    argv = sys.argv[1:]
    if argv.count("::A") != 1 or argv.count("::B") != 1 or argv.index("::A") > argv.index("::B"):
        sys.exit(__doc__)
    first = argv.index("::A")
    second = argv.index("::B")
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--cwd", default=".")
    p.add_argument("--pipes", action="store_true")
    p.add_argument("--keep-cache", action="store_true")
    opts = p.parse_args(argv[:first])
    a, b = argv[first + 1:second], argv[second + 1:]
    devnull = os.open(os.devnull, os.O_RDWR)
    os.chdir(opts.cwd)
    if not opts.keep_cache:
        # Both programs read back from disk alike (see `evict`).
        for cmd in (a, b):
            if "/" in cmd[0]:
                evict(cmd[0])

    def once(cmd):
        ms, code = timed_call(cmd, os.environ, devnull, pipes=opts.pipes)
        if code != 0:
            sys.exit(f"paired.py: {' '.join(cmd)} exited {code}")
        return ms

    for _ in range(opts.warmup):
        once(a), once(b)
    ta, tb = [], []
    for i in range(opts.n):
        if i % 2 == 0:
            ta.append(once(a))
            tb.append(once(b))
        else:
            tb.append(once(b))
            ta.append(once(a))
    diff = statistics.median(x - y for x, y in zip(ta, tb))
    print(f"{statistics.median(ta):.2f} {statistics.median(tb):.2f} {diff:.2f}")

main()
