"""One command timed as a whole process, for the benchmark scripts beside it.

`timed_call(argv, env, stdin_fd, pipes=True)` starts argv (searched on PATH
when it has no slash) and returns (milliseconds, exit code). With pipes its
stdout and stderr are pipes read to their end, as a harness reads them
(tether, `subprocess.run(capture_output=True)`): the call is over when both
are closed and its exit status is collected. Without, they go to stdin_fd's
file (/dev/null) and only the exit status is waited for."""
import os
import selectors
import time


def timed_call(argv, env, stdin_fd, pipes=True):
    t0 = time.perf_counter_ns()
    out = [os.pipe(), os.pipe()] if pipes else [(None, stdin_fd), (None, stdin_fd)]
    pid = os.posix_spawnp(argv[0], argv, env, file_actions=[
        (os.POSIX_SPAWN_DUP2, stdin_fd, 0), (os.POSIX_SPAWN_DUP2, out[0][1], 1), (os.POSIX_SPAWN_DUP2, out[1][1], 2)])
    if pipes:
        with selectors.DefaultSelector() as sel:
            for r, w in out:
                os.close(w)
                sel.register(r, selectors.EVENT_READ)
            while sel.get_map():
                for key, _ in sel.select():
                    if not os.read(key.fd, 65536):
                        sel.unregister(key.fd)
                        os.close(key.fd)
    _, status = os.waitpid(pid, 0)
    return (time.perf_counter_ns() - t0) / 1e6, os.waitstatus_to_exitcode(status)


def evict(path):
    """Drop a binary's pages from the page cache (written out first), so that
    two builds compared are both read back from disk by their first runs.

    A build's start-up depends on how its file sits in the page cache: on this
    VM a copy just written by `cp` started 0.5 ms sooner than the same bytes
    read back after eviction, and copies made at different times differed by
    0.4 ms. Comparing builds whose files were cached differently measures that,
    not the change. False when `path` is not a file this process may open."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
