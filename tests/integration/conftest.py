"""Fixtures for the integration tests: throwaway clusters (tests/lib/cluster.py)
and the assertions the tests share."""

import contextlib
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from cluster import Cluster  # noqa: E402

@pytest.fixture(scope="session")
def cluster():
    """One shared cluster; tests isolate themselves in their own database."""
    c = Cluster()
    c.start()
    yield c
    c.destroy()


@pytest.fixture
def db(cluster):
    """A fresh database with the extension, on the shared cluster."""
    return cluster.new_database()


def _cluster_maker():
    made = []

    def make(**kwargs):
        c = Cluster(**kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.destroy()


@pytest.fixture
def make_cluster():
    """Clusters of a test's own, for settings, crashes and restarts."""
    yield from _cluster_maker()


@pytest.fixture(scope="module")
def make_module_cluster():
    """Clusters shared by the tests of one module."""
    yield from _cluster_maker()


@contextlib.contextmanager
def row_locked(cluster, dbname, tag):
    """A session holding `SELECT ... FOR UPDATE` on a tag's id_segment row
    until the block ends: refills of that tag cannot take a range."""
    locker = cluster.connect(dbname, autocommit=False)
    locker.execute("SELECT * FROM id_segment WHERE biz_tag = %s FOR UPDATE", (tag,))
    try:
        yield
    finally:
        locker.rollback()
        locker.close()


def assert_unique(ids):
    seen = set()
    dups = [i for i in ids if i in seen or seen.add(i)]
    assert not dups, f"{len(dups)} IDs handed out twice, e.g. {dups[:5]}"


def assert_increasing(ids):
    bad = [(a, b) for a, b in zip(ids, ids[1:]) if not a < b]
    assert not bad, f"IDs not strictly increasing, e.g. {bad[:3]}"


def wait_for(predicate, timeout=10.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# ---------------------------------------------------------------------------
# The torture suite's tally, printed at the end of the run.

TORTURE = {"rounds": 0, "ids_checked": 0, "duplicates": 0, "errors": {}}


@pytest.fixture
def torture():
    """Where torture tests count rounds, IDs checked, duplicates and errors."""
    return TORTURE


def count_error(tally, error):
    kind = getattr(error, "sqlstate", None) or type(error).__name__
    name = f"{type(error).__name__} ({kind})" if kind != type(error).__name__ else kind
    tally["errors"][name] = tally["errors"].get(name, 0) + 1


def check_unique(tally, ids):
    """Counts the IDs and duplicates into the tally, then asserts none."""
    tally["ids_checked"] += len(ids)
    tally["duplicates"] += len(ids) - len(set(ids))
    assert_unique(ids)


def pytest_terminal_summary(terminalreporter):
    if TORTURE["rounds"] or TORTURE["ids_checked"]:
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(TORTURE["errors"].items())) or "none"
        terminalreporter.write_line(
            f"torture: {TORTURE['rounds']} rounds, {TORTURE['ids_checked']:,} IDs checked, "
            f"{TORTURE['duplicates']} duplicates; errors by kind: {errors}")
