"""Fixtures for the integration tests: throwaway clusters (tests/lib/cluster.py)
and the assertions the tests share."""

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
