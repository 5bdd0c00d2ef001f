"""Fixtures for the integration tests: throwaway clusters (tests/lib/cluster.py)
and the torture suite's tally. The plain helpers the tests share (ID checks,
sessions, draws, queries) are in helpers.py; the failpoints in adversary.py."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from cluster import Cluster  # noqa: E402

# The integration tests' servers crash as processes do (an immediate stop,
# a kill), never as a machine does: what a server wrote stays in the
# kernel's cache either way, so fsync only costs their time (the benchmark
# keeps cluster.conf's fsync = on). A test's own lines come after this one.
TEST_CONF = ("fsync = off",)

@pytest.fixture(scope="session")
def cluster():
    """One shared cluster; tests isolate themselves in their own database."""
    c = Cluster(conf=TEST_CONF)
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

    def make(conf=(), **kwargs):
        c = Cluster(conf=(*TEST_CONF, *conf), **kwargs)
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
# Spreading the tests over pytest-xdist's workers (tests/test.sh runs them
# with --dist loadgroup): the tests of a module that take a module-scoped
# fixture (the module's clusters) stay together in one worker, in file
# order; every other test goes to whichever worker is free, so a long
# module of tests with clusters of their own is no longer one worker's
# critical path.

_SHARED_SCOPES = ("module", "class", "package")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks
def pytest_collection_modifyitems(config, items):
    def shares(item):
        info = getattr(item, "_fixtureinfo", None)
        return info is not None and any(
            d.scope in _SHARED_SCOPES for defs in info.name2fixturedefs.values() for d in defs)

    for item in items:
        if shares(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


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
