"""A workspace of N small files, 1,000 a directory (d0/f0.txt ...), for the
benchmarks beside it: what an approval binds to is read at hold and resume.

    python3 scripts/fill_workspace.py DIR N
or, from Python, `fill_workspace(dir, n)`."""
import os
import sys


def fill_workspace(ws, n):
    for i in range(n):
        d = os.path.join(ws, f"d{i // 1000}")
        if i % 1000 == 0:
            os.mkdir(d)
        with open(os.path.join(d, f"f{i}.txt"), "w") as f:
            f.write("x")


if __name__ == "__main__":
    fill_workspace(sys.argv[1], int(sys.argv[2]))
