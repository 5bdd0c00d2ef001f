"""Fixtures for the integration tests: throwaway clusters (tests/lib/cluster.py)
and the torture suite's tally. The plain helpers the tests share (ID checks,
sessions, draws, queries) are in helpers.py; the failpoints in adversary.py."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from cluster import Cluster  # noqa: E402

@pytest.fixture(scope="session")
def cluster():
    """One shared cluster; tests isolate themselves in their own database."""
    c = Cluster()
    c.start()
    # pg_idgen.snowflake_database: where the snowflake mark is WAL-logged.
    c.sql("CREATE EXTENSION pg_idgen")
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


@pytest.fixture(scope="module")
def lc(make_module_cluster):
    """The module's cluster for tests that need no settings of their own
    and no restart (refill_timeout = 10s, as every test cluster); one per
    test module that uses it."""
    c = make_module_cluster()
    c.start()
    return c


# ---------------------------------------------------------------------------
# The torture suite's tally, printed at the end of the run (counted with
# helpers.count_error and helpers.check_unique).

TORTURE = {"rounds": 0, "ids_checked": 0, "duplicates": 0, "errors": {}}


@pytest.fixture
def torture():
    """Where torture tests count rounds, IDs checked, duplicates and errors."""
    return TORTURE


def pytest_terminal_summary(terminalreporter):
    if TORTURE["rounds"] or TORTURE["ids_checked"]:
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(TORTURE["errors"].items())) or "none"
        terminalreporter.write_line(
            f"torture: {TORTURE['rounds']} rounds, {TORTURE['ids_checked']:,} IDs checked, "
            f"{TORTURE['duplicates']} duplicates; errors by kind: {errors}")
