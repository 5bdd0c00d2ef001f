"""A Citus cluster of throwaway PostgreSQL servers, for the Citus tests and
the benchmark's Citus section: a coordinator and workers, each its own
cluster (tests/lib/cluster.py) listening on 127.0.0.1 (Citus connects its
nodes over TCP; trust authentication, loopback only) and on its Unix
socket, with `shared_preload_libraries = 'citus,pg_idgen'`. Citus is
test-only: tests/setup.sh builds it into the PostgreSQL 16-18 trees."""

import os
import socket

from cluster import PG_BIN, Cluster

CITUS_CONF = (
    "shared_preload_libraries = 'citus,pg_idgen'",
    # The throwaway servers have no TLS: Citus asks for it by default.
    "citus.node_conninfo = 'sslmode=disable'",
    "max_connections = 100",
)


def citus_available(pg_bin=None):
    """Whether Citus is built into the PostgreSQL tree of `pg_bin`."""
    lib = os.path.join(os.path.dirname((pg_bin or PG_BIN).rstrip("/")), "lib", "citus.so")
    return os.path.exists(lib)


def free_port():
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


class CitusCluster:
    """A coordinator and `workers` workers, started, with Citus and
    pg_idgen created on the coordinator (Citus propagates pg_idgen to the
    workers). `make`: a Cluster factory (the tests' make_cluster, or
    Cluster itself); `conf`: extra postgresql.conf lines for every node,
    `node_conf(i)`: for node i (0: the coordinator) only."""

    def __init__(self, make=Cluster, workers=2, conf=(), node_conf=lambda i: ()):
        self.make, self.conf, self.node_conf = make, conf, node_conf
        self.coordinator = self._node(0)
        self.workers = []
        c = self.coordinator
        c.sql("CREATE EXTENSION citus")
        c.sql("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (c.port,))
        for _ in range(workers):
            self.add_worker()
        c.sql("CREATE EXTENSION pg_idgen")

    def _node(self, index):
        node = self.make(conf=(*CITUS_CONF, *self.conf, *self.node_conf(index)), tcp_port=free_port())
        node.start()
        return node

    def add_worker(self):
        """Starts a new node and adds it to the cluster (citus_add_node):
        the only step a node added later needs."""
        worker = self._node(len(self.workers) + 1)
        worker.sql("CREATE EXTENSION citus")
        self.coordinator.sql("SELECT citus_add_node('127.0.0.1', %s)", (worker.port,))
        self.workers.append(worker)
        return worker

    @property
    def nodes(self):
        return [self.coordinator, *self.workers]

    def group_of(self, node):
        (group,), = node.sql("SELECT groupid FROM pg_dist_local_group")
        return group
