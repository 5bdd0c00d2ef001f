"""Test-only failpoints, for the tests that force an interleaving
(test_ddl_and_workers.py, test_blocks.py, test_remote.py, test_lease.py).
The queries and ID checks the tests share are in helpers.py.

Failpoints exist only in builds with the cargo feature `failpoints`. At a
named point, the server looks for the file `<PGDATA>/pg_idgen_failpoints/<name>`:
- content `pause`: the process writes its pid into `<name>.reached`, then
  sleeps (interruptibly) for as long as `<name>` exists;
- content `error`: it raises an ERROR there (in the worker before it
  connects, the worker exits while starting).
Names: `worker-start`, `worker-before-refill`, `worker-remote-before-commit`,
`worker-before-publish`, `worker-before-give-back`; the lease keeper's
`lease-before-renew`, `lease-before-cas` and `lease-after-read`; and
`backend-block-size`, a number read once per process: the size of every
block a backend takes of a hot tag (src/failpoints.rs says where each is).
"""

import contextlib
import os
import shutil
import time

from cluster import PG_BIN

FAILPOINT_DIR = "pg_idgen_failpoints"

# How long a test waits for a process to reach a paused failpoint. Reaching
# one takes milliseconds; this is generous for a busy 2-core machine, and
# still ends a test against a build without failpoints in reasonable time.
REACH_TIMEOUT = 20.0


def _library_has_failpoints():
    """Whether the installed pg_idgen library mentions the failpoint
    directory at all (only to make the failure message clearer)."""
    path = os.path.join(os.path.dirname(PG_BIN.rstrip("/")), "lib", "pg_idgen.so")
    try:
        with open(path, "rb") as f:
            return FAILPOINT_DIR.encode() in f.read()
    except OSError:
        return None


class Failpoint:
    """One named failpoint of one cluster's data directory."""

    def __init__(self, cluster, name):
        self.cluster, self.name = cluster, name
        self.dir = os.path.join(cluster.data, FAILPOINT_DIR)
        self.path = os.path.join(self.dir, name)
        self.reached_path = self.path + ".reached"

    def arm(self, action):
        assert action in ("pause", "error"), action
        self.arm_value(action)

    def arm_value(self, value):
        """Writes `value` as the failpoint's content (a point's action, or
        the number `backend-block-size` holds)."""
        action = value
        os.makedirs(self.dir, exist_ok=True)
        shutil.chown(self.dir, "postgres", "postgres")
        os.chmod(self.dir, 0o775)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.reached_path)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(action)
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.path)  # the server never sees a half-written file

    def reached_pid(self):
        """The pid written into `<name>.reached`, or None."""
        try:
            with open(self.reached_path) as f:
                text = f.read().strip()
        except FileNotFoundError:
            return None
        token = text.split()[0] if text else ""
        return int(token) if token.isdigit() else -1

    def wait_reached(self, timeout=REACH_TIMEOUT, poke=None):
        """Waits until a process reached the paused point; returns its pid.
        `poke` (optional) is called between looks, e.g. to draw an ID so that
        the worker is asked for a refill."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.reached_pid()
            if pid is not None:
                # The pid may still be being written: read once more.
                time.sleep(0.05)
                return self.reached_pid()
            if poke is not None:
                poke()
            time.sleep(0.05)
        has = _library_has_failpoints()
        build = {True: "the installed pg_idgen.so mentions pg_idgen_failpoints",
                 False: "the installed pg_idgen.so does not mention pg_idgen_failpoints: "
                        "it was built without the `failpoints` feature",
                 None: "pg_idgen.so not found"}[has]
        raise AssertionError(
            f"failpoint {self.name!r} was never reached within {timeout:.0f} s "
            f"(no {self.reached_path}); {build}")

    def release(self):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


@contextlib.contextmanager
def paused(cluster, name, trigger=None, timeout=REACH_TIMEOUT):
    """Arms failpoint `name` with `pause`, calls `trigger()` (if given) to make
    a process get there (called repeatedly until it does, so it should be
    cheap and not block for long), waits for `<name>.reached`, and yields the
    paused process's pid. Releases the pause on the way out, whatever
    happens, so no process stays paused after a failed test."""
    fp = Failpoint(cluster, name)
    fp.arm("pause")
    try:
        yield fp.wait_reached(timeout, poke=trigger)
    finally:
        fp.release()


@contextlib.contextmanager
def armed(cluster, name, action="error"):
    """Failpoint `name` set to `action` for the duration of the block."""
    fp = Failpoint(cluster, name)
    fp.arm(action)
    try:
        yield fp
    finally:
        fp.release()
