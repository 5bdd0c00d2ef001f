"""Never twice, never backwards, under a real HA manager: three Patroni 3
nodes (Debian's PostgreSQL 15, asynchronous streaming replication) with
one etcd, all on the loopback address, clients inserting snowflake and
segment IDs through a switchover and then a failover (kill -9 of the
leader's postmaster), reconnecting to whichever node is the primary.

The layout is helpers.BURST_LAYOUT (16 IDs per ms), so bursts of 50,000
IDs put the leader's logical clock seconds ahead of the wall clock: a new
leader that forgot the WAL-logged high-water mark would issue IDs below
(or equal to) those the old one committed.

Each insert is a batch of one transaction, tagged (events.kind) and
recorded by its client with its IDs' range, the timeline it ran on and
when its COMMIT returned. At the end, on the final leader: each batch is
there whole or not at all; every batch whose COMMIT returned is there,
except on the timeline ended by the kill (asynchronous replication may
lose its last commits: counted and reported); and the IDs of every batch
of a later timeline — or that began after the new leader was seen — are
above those of every earlier one, for both generators.

About 30 s. Skipped unless PG_IDGEN_PATRONI=1: tests/test.sh sets it on
PostgreSQL 15 (Debian's patroni runs Debian's PostgreSQL; tests/setup.sh
installs patroni, etcd-server and etcd-client), and tests/torture.sh runs
it with more rounds. PG_IDGEN_PATRONI_ROUNDS (default 1) repeats the
switchover and the failover; PG_IDGEN_PATRONI_KEEP=1 keeps the cluster's
directory (logs, data) afterwards."""

import array
import dataclasses
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import psycopg
import pytest

from cluster import PG_BIN, base_conf
from helpers import (BURST_LAYOUT, BURST_LEAD_MS, COPY_WARNING, assert_unique, count_error, free_ports, in_thread,
                     joined, lead_ms, replayed, wait_for)

pytestmark = pytest.mark.skipif(os.environ.get("PG_IDGEN_PATRONI") != "1",
                                reason="PG_IDGEN_PATRONI=1 runs it (tests/test.sh on PostgreSQL 15, tests/torture.sh)")

ROUNDS = int(os.environ.get("PG_IDGEN_PATRONI_ROUNDS", "1"))
KEEP = os.environ.get("PG_IDGEN_PATRONI_KEEP") == "1"
PATRONI = "/usr/bin/patroni"
PATRONICTL = "/usr/bin/patronictl"
ETCD = "/usr/bin/etcd"
NODES = ("node1", "node2", "node3")

# Generous: a loaded 2-core machine runs three servers, etcd and Patroni.
BOOT_TIMEOUT = 300
LEADER_TIMEOUT = 180
PROGRESS_TIMEOUT = 300

# The clients: (generator, rows per batch, pause between batches in s).
# Two insert bursts of 50,000 snowflake IDs (3.1 s of snowflake time at 16
# IDs per ms: the clock runs ahead, and a burst outlasts the mark the
# keeper writes 2 s ahead, so it needs the keeper's writes); one inserts
# 1,000 at a time (mostly within the mark: an orphaned backend of the
# killed postmaster can commit them); one inserts 500 segment IDs of a tag
# with step 100 at a time.
CLIENTS = (("snowflake", 50_000, 0.5), ("snowflake", 50_000, 0.5), ("snowflake", 1_000, 0.1),
           ("segment", 500, 0.1))
# Committed batches of each generator that each leader's timeline must see
# before the next event (and the final one before the checks).
BATCHES_PER_TIMELINE = 3

# The settings of every throwaway cluster (cluster.conf), the burst layout
# and a streaming primary; Patroni sets the addresses, the port and the
# socket directory itself (per node).
NODE_LOCAL = ("listen_addresses", "port", "unix_socket_directories")


def settings(lines):
    """postgresql.conf lines (`name = value`) as Patroni parameters."""
    params = {}
    for line in lines:
        name, value = (part.strip() for part in line.split("=", 1))
        if name not in NODE_LOCAL:
            params[name] = value[1:-1] if value[:1] == "'" == value[-1:] else value
    return params


def http(url, method="GET", body=None, timeout=5):
    """(status, text) of a request; (None, error) when nothing answered."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, urllib.error.URLError) as e:
        return None, str(e)


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("RUST_", "PG"))}


def tail(path, lines=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"({e})\n"


# ---------------------------------------------------------------------------
# The cluster: one etcd, three Patroni nodes.

class Node:
    """One Patroni node and its PostgreSQL (TCP on 127.0.0.1, a socket in
    its own directory), run as the postgres user."""

    def __init__(self, root, name, pg_port, api_port, etcd_port, dcs_parameters):
        self.name, self.pg_port, self.api_port = name, pg_port, api_port
        self.dir = os.path.join(root, name)
        os.mkdir(self.dir)
        shutil.chown(self.dir, "postgres", "postgres")
        self.data = os.path.join(self.dir, "data")
        self.log_dir = os.path.join(self.dir, "log")
        self.config_path = os.path.join(self.dir, "patroni.yml")
        self.patroni_log = os.path.join(self.dir, "patroni.log")
        self.proc = None
        config = {
            "scope": "pg_idgen",
            "namespace": "/pg_idgen-test/",
            "name": name,
            "restapi": {"listen": f"127.0.0.1:{api_port}", "connect_address": f"127.0.0.1:{api_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": 10, "loop_wait": 2, "retry_timeout": 4,
                    # Asynchronous replicas that lag under the bursts are
                    # still candidates; a crashed primary is failed over
                    # at once rather than restarted in place.
                    "maximum_lag_on_failover": 1 << 30,
                    "primary_start_timeout": 0,
                    "postgresql": {"use_pg_rewind": True, "use_slots": True,
                                   "parameters": dcs_parameters},
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}, "no-sync"],
                "pg_hba": ["local all all trust",
                           "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{pg_port}",
                "connect_address": f"127.0.0.1:{pg_port}",
                "data_dir": self.data,
                "bin_dir": PG_BIN,
                "pgpass": os.path.join(self.dir, "pgpass"),
                "use_unix_socket": True,
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                },
                "parameters": {
                    "unix_socket_directories": self.dir,
                    "logging_collector": "on",
                    "log_directory": self.log_dir,
                    "log_filename": "postgresql.log",
                },
            },
        }
        # JSON is YAML.
        with open(self.config_path, "w") as f:
            json.dump(config, f, indent=1)
        shutil.chown(self.config_path, "postgres", "postgres")

    def start(self):
        log = open(self.patroni_log, "ab")
        self.proc = subprocess.Popen(["runuser", "-u", "postgres", "--", PATRONI, self.config_path],
                                     cwd=self.dir, env=clean_env(), stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def terminate(self):
        """SIGTERM to Patroni (it stops its PostgreSQL, then exits)."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)

    def wait_stopped(self, timeout):
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def api(self, path, method="GET", body=None, timeout=5):
        return http(f"http://127.0.0.1:{self.api_port}{path}", method, body, timeout)

    def is_primary(self):
        return self.api("/primary", timeout=2)[0] == 200

    def is_replica(self):
        return self.api("/replica", timeout=2)[0] == 200

    def connect(self, autocommit=True):
        return psycopg.connect(host="127.0.0.1", port=self.pg_port, user="postgres", dbname="postgres",
                               autocommit=autocommit, connect_timeout=5)

    def sql(self, query, params=None, dbname="postgres"):
        """Cluster.sql's interface (test_failover.lead_ms uses it)."""
        with self.connect() as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def postmaster_pid(self):
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            return int(f.readline())

    def timeline(self):
        (wal,), = self.sql("SELECT pg_walfile_name(pg_current_wal_lsn())")
        return int(wal[:8], 16)

    @property
    def pg_log(self):
        return os.path.join(self.log_dir, "postgresql.log")

    def log(self):
        try:
            with open(self.pg_log, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""


class PatroniCluster:
    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="pg_idgen-patroni.")
        shutil.chown(self.root, "postgres", "postgres")
        ports = free_ports(2 + 2 * len(NODES))
        self.etcd_port, etcd_peer = ports[:2]
        self.etcd_dir = os.path.join(self.root, "etcd")
        self.etcd_log = os.path.join(self.root, "etcd.log")
        self.etcd = None
        self.etcd_peer = etcd_peer
        parameters = settings([*base_conf(self.root), *BURST_LAYOUT, "wal_level = replica",
                               "wal_keep_size = '256MB'"])
        self.nodes = [Node(self.root, name, ports[2 + 2 * i], ports[3 + 2 * i], self.etcd_port, parameters)
                      for i, name in enumerate(NODES)]

    def start(self):
        url = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer}"
        with open(self.etcd_log, "ab") as log:
            self.etcd = subprocess.Popen(
                [ETCD, "--name", "etcd0", "--data-dir", self.etcd_dir,
                 "--listen-client-urls", url, "--advertise-client-urls", url,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"etcd0={peer}", "--initial-cluster-state", "new"],
                cwd=self.root, env=clean_env(), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        assert wait_for(lambda: http(f"{url}/health", timeout=2)[0] == 200, timeout=60), \
            "etcd did not become healthy:\n" + tail(self.etcd_log)
        for node in self.nodes:
            node.start()
        leader = self.wait_leader(timeout=BOOT_TIMEOUT)
        self.wait_replicas(leader, len(self.nodes) - 1, BOOT_TIMEOUT)
        return leader

    def leader(self):
        """The node whose Patroni says it is the primary (None if none or
        more than one says so)."""
        primaries = [n for n in self.nodes if n.is_primary()]
        return primaries[0] if len(primaries) == 1 else None

    def wait_leader(self, other_than=None, timeout=LEADER_TIMEOUT):
        found = []

        def ready():
            leader = self.leader()
            if leader is None or leader is other_than:
                return False
            try:
                if leader.sql("SELECT pg_is_in_recovery()") != [(False,)]:
                    return False
            except psycopg.Error:
                return False
            found[:] = [leader]
            return True

        assert wait_for(ready, timeout=timeout, interval=0.2), "no new leader within %s s" % timeout
        return found[0]

    def wait_replicas(self, leader, count, timeout=BOOT_TIMEOUT):
        """Until `count` other nodes are running replicas streaming from
        `leader`."""
        def ready():
            if sum(n.is_replica() for n in self.nodes if n is not leader) < count:
                return False
            try:
                return leader.sql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")[0][0] >= count
            except psycopg.Error:
                return False

        assert wait_for(ready, timeout=timeout, interval=0.5), f"{count} replicas did not stream from {leader.name}"

    def wait_replayed(self, leader, timeout=PROGRESS_TIMEOUT):
        """Until every other node has replayed the WAL `leader` has flushed
        (helpers.replayed, for each)."""
        for node in self.nodes:
            if node is not leader:
                assert replayed(leader, node, timeout), f"{node.name} did not replay {leader.name}'s WAL"

    def dsn(self):
        """libpq's multi-host string: whichever node takes writes."""
        return (f"host={','.join('127.0.0.1' for _ in self.nodes)} "
                f"port={','.join(str(n.pg_port) for n in self.nodes)} "
                "user=postgres dbname=postgres target_session_attrs=read-write connect_timeout=3")

    def patronictl_list(self):
        result = subprocess.run([PATRONICTL, "-c", self.nodes[0].config_path, "list"],
                                capture_output=True, text=True, env=clean_env(), timeout=30)
        return result.stdout + result.stderr

    def dump(self):
        """The logs' tails, for a failure."""
        parts = []
        try:
            parts.append(self.patronictl_list())
        except (OSError, subprocess.SubprocessError) as e:
            parts.append(f"patronictl list: {e}")
        parts.append("== etcd\n" + tail(self.etcd_log, 10))
        for node in self.nodes:
            parts.append(f"== {node.name} patroni\n" + tail(node.patroni_log))
            parts.append(f"== {node.name} postgres\n" + tail(node.pg_log))
        return "\n".join(parts)

    def our_processes(self):
        """Pids of processes under the cluster's directory (working
        directory or command line): Patroni, PostgreSQL (orphaned backends
        of a killed postmaster included), etcd."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read().decode(errors="replace")
            except OSError:
                continue
            if cwd == self.root or cwd.startswith(self.root + "/") or self.root + "/" in cmdline:
                pids.append(int(entry))
        return pids

    def close(self):
        for node in self.nodes:
            node.terminate()
        for node in self.nodes:
            node.wait_stopped(60)
        for node in self.nodes:
            if os.path.exists(os.path.join(node.data, "postmaster.pid")):
                subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_ctl", "-D", node.data,
                                "-m", "immediate", "-w", "-t", "30", "stop"], capture_output=True)
        if self.etcd and self.etcd.poll() is None:
            self.etcd.terminate()
            try:
                self.etcd.wait(30)
            except subprocess.TimeoutExpired:
                self.etcd.kill()
                self.etcd.wait(30)
        for pid in self.our_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert wait_for(lambda: not self.our_processes(), timeout=30), \
            f"processes left: {self.our_processes()}"
        if KEEP:
            print(f"patroni: kept {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def patroni_cluster():
    c = PatroniCluster()
    try:
        yield c
    finally:
        c.close()


# ---------------------------------------------------------------------------
# The load: clients that insert batches and record them.

@dataclasses.dataclass
class Batch:
    generator: str          # 'snowflake' (table events) or 'segment' (orders)
    tag: str                # events.kind of a snowflake batch
    started: float          # time.monotonic() before the INSERT was sent
    rows: int = 0           # rows asked for
    n: int = 0              # rows inserted
    lo: int = 0
    hi: int = 0
    timeline: int = 0
    port: int = 0
    ids: array.array = dataclasses.field(default=None, repr=False)  # a segment batch's IDs
    committed: float = None  # when its COMMIT returned (None: in doubt)


# Errors a client meets while its leader goes away: a lost or refused
# connection (08*, 57P0*, and psycopg's own), a read-only or recovering
# server, and pg_idgen's 55000 on an orphaned backend whose keeper died
# with the postmaster. Anything else fails the test.
TOLERATED = ("08", "57P01", "57P02", "57P03", "25006", "55000")


class Load:
    def __init__(self, dsn):
        self.dsn = dsn
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.batches = []
        self.tally = {"errors": {}}
        self.unexpected = []
        self.tags = itertools.count(1)
        self.threads = []
        self.in_flight = {}  # thread ident -> the batch it runs

    def start(self):
        self.threads = [in_thread(self.client, *client) for client in CLIENTS]

    def finish(self):
        self.stop.set()
        for thread, result in self.threads:
            assert "error" not in joined(thread, result), f"a client failed: {result.get('error')!r}"

    def committed(self, generator=None, timeline=None):
        with self.lock:
            return [b for b in self.batches if b.committed is not None
                    and (generator is None or b.generator == generator)
                    and (timeline is None or b.timeline == timeline)]

    def busy(self, generator, rows):
        """Whether a batch of `generator` of at least `rows` rows is
        running (sent, not finished)."""
        with self.lock:
            return any(b.generator == generator and b.rows >= rows for b in self.in_flight.values())

    def progressed(self, timeline, since, count=BATCHES_PER_TIMELINE):
        """`count` batches of each generator begun after `since` and
        committed on `timeline`."""
        for thread, result in self.threads:
            assert "error" not in result, f"a client failed: {result['error']!r}"
        return all(len([b for b in self.committed(g, timeline) if b.started > since]) >= count
                   for g in ("snowflake", "segment"))

    def _note(self, error):
        with self.lock:
            count_error(self.tally, error)
            state = getattr(error, "sqlstate", None)
            if not isinstance(error, psycopg.OperationalError) and not (state and state.startswith(TOLERATED)):
                detail = getattr(getattr(error, "diag", None), "message_detail", None)
                self.unexpected.append(f"{type(error).__name__} ({state}): {error} {detail or ''}".strip())

    def _one(self, conn, generator, rows):
        """One batch in one transaction; recorded before COMMIT (then in
        doubt), marked committed when COMMIT returned."""
        tag = f"b{next(self.tags)}"
        batch = Batch(generator, tag, time.monotonic(), rows)
        with self.lock:
            self.in_flight[threading.get_ident()] = batch
        try:
            self._run(conn, batch, rows)
        finally:
            with self.lock:
                del self.in_flight[threading.get_ident()]

    def _run(self, conn, batch, rows):
        generator, tag = batch.generator, batch.tag
        if generator == "snowflake":
            batch.lo, batch.hi, batch.n = conn.execute(
                "WITH ins AS (INSERT INTO events SELECT snowflake_nextval(), %s FROM generate_series(1, %s)"
                " RETURNING id) SELECT min(id), max(id), count(*) FROM ins", (tag, rows)).fetchone()
        else:
            batch.ids = array.array("q", (r[0] for r in conn.execute(
                "INSERT INTO orders SELECT FROM generate_series(1, %s) RETURNING id", (rows,))))
            batch.lo, batch.hi, batch.n = min(batch.ids), max(batch.ids), len(batch.ids)
        wal, batch.port = conn.execute("SELECT pg_walfile_name(pg_current_wal_lsn()), inet_server_port()").fetchone()
        batch.timeline = int(wal[:8], 16)
        with self.lock:
            self.batches.append(batch)
        conn.commit()
        batch.committed = time.monotonic()

    def client(self, generator, rows, pause):
        conn = None
        while not self.stop.is_set():
            try:
                if conn is None:
                    conn = psycopg.connect(self.dsn, autocommit=False)
                    conn.execute("SET statement_timeout = '120s'")
                    conn.commit()
                self._one(conn, generator, rows)
            except psycopg.Error as e:
                self._note(e)
                if conn is not None:
                    conn.close()
                conn = None
                self.stop.wait(0.2)
                continue
            self.stop.wait(pause)
        if conn is not None:
            conn.close()


# ---------------------------------------------------------------------------
# The checks.

def present_batches(leader, load):
    """The batches whose rows the final leader holds, after checking that
    each batch is there whole or not at all and that every row belongs to
    a recorded batch."""
    events = {kind: (n, lo, hi) for kind, n, lo, hi in leader.sql(
        "SELECT kind, count(*), min(id), max(id) FROM events GROUP BY kind")}
    orders = {r[0] for r in leader.sql("SELECT id FROM orders")}
    present, partial = [], []
    for b in load.batches:
        if b.generator == "snowflake":
            row = events.pop(b.tag, None)
            if row is not None:
                (present if row == (b.n, b.lo, b.hi) else partial).append(b)
        else:
            found = sum(i in orders for i in b.ids)
            if found:
                (present if found == b.n else partial).append(b)
                orders.difference_update(b.ids)
    assert not partial, f"batches not whole on the final leader: {partial[:3]}"
    assert not events, f"events rows of no recorded batch: {list(events.items())[:5]}"
    assert not orders, f"{len(orders)} orders rows of no recorded batch, e.g. {sorted(orders)[:5]}"
    return present


def check_order_by_timeline(present, generator):
    """Every ID of a later timeline is above every ID of an earlier one."""
    batches = [b for b in present if b.generator == generator]
    top = None  # (hi, batch) over the timelines so far
    for tl in sorted({b.timeline for b in batches}):
        group = [b for b in batches if b.timeline == tl]
        low = min(group, key=lambda b: b.lo)
        if top is not None:
            assert low.lo > top[0], (
                f"{generator} IDs out of order across a leader change: batch {low.tag} on timeline {tl}"
                f" (port {low.port}) starts at {low.lo}, not above {top[0]} of batch {top[1].tag} on"
                f" timeline {top[1].timeline} (port {top[1].port}); {top[0] - low.lo + 1} below")
        high = max(group, key=lambda b: b.hi)
        if top is None or high.hi > top[0]:
            top = (high.hi, high)


def check_order_by_commit(present, generator, event):
    """The IDs of every batch that began after the new leader was seen are
    above those of every batch whose COMMIT returned before the event."""
    batches = [b for b in present if b.generator == generator]
    before = [b for b in batches if b.committed is not None and b.committed < event["started"]]
    after = [b for b in batches if b.started > event["leader_seen"]]
    assert before and after, f"{event['kind']}: no {generator} batches on both sides"
    top = max(before, key=lambda b: b.hi)
    low = min(after, key=lambda b: b.lo)
    assert low.lo > top.hi, (
        f"{generator} IDs after the {event['kind']} not above those before it: batch {low.tag}"
        f" (timeline {low.timeline}) starts at {low.lo}, batch {top.tag} (timeline {top.timeline})"
        f" reached {top.hi}")


def check_no_write_after_a_newer_leader(present):
    """No batch on an older timeline committed after one on a newer
    timeline began (no two primaries took writes at once)."""
    for b in present:
        late = [a for a in present if a.timeline < b.timeline and a.committed is not None
                and a.committed > b.started]
        assert not late, (f"batch {late[0].tag} committed on timeline {late[0].timeline} after batch"
                          f" {b.tag} had begun on timeline {b.timeline}")


def fmt_ids(batches, generator=""):
    """'N [generator ]batches (N IDs)'."""
    return f"{len(batches)} {generator + ' ' if generator else ''}batches ({sum(b.n for b in batches):,} IDs)"


# ---------------------------------------------------------------------------

def test_switchover_and_failover_under_patroni_keep_ids_unique_and_ordered(patroni_cluster, capsys):
    began = time.monotonic()
    c = patroni_cluster
    try:
        leader = c.start()
        boot = time.monotonic() - began
        leader.sql("CREATE EXTENSION pg_idgen")
        leader.sql("CREATE TABLE events (id bigint PRIMARY KEY, kind text)")
        leader.sql("SELECT segment_create('orders', step => 100)")
        leader.sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'))")
        load = Load(c.dsn())
        load.start()
        events = []
        crashed_timelines = set()
        timeline, since = leader.timeline(), 0.0
        for _ in range(ROUNDS):
            for kind in ("switchover", "failover"):
                # The leader takes writes from both generators, its clock
                # runs ahead, every other node streams from it and has
                # replayed some batches of its timeline (so that some are
                # there after the kill too); the load goes on meanwhile.
                assert wait_for(lambda: load.progressed(timeline, since), timeout=PROGRESS_TIMEOUT,
                                interval=0.2), f"the clients committed too few batches on timeline {timeline}"
                assert wait_for(lambda: lead_ms(leader) > BURST_LEAD_MS, timeout=PROGRESS_TIMEOUT,
                                interval=0.2), "the bursts did not put snowflake time ahead of the clock"
                c.wait_replicas(leader, len(c.nodes) - 1)
                c.wait_replayed(leader)
                event = {"kind": kind, "from": leader.name, "timeline": timeline,
                         "lead_ms": lead_ms(leader), "started": time.monotonic()}
                if kind == "switchover":
                    candidate = next(n for n in c.nodes if n is not leader)
                    status, text = leader.api("/switchover", "POST",
                                              {"leader": leader.name, "candidate": candidate.name}, timeout=60)
                    assert status == 200, f"switchover refused: {status} {text}"
                else:
                    # While a burst runs (it outlasts the mark the keeper
                    # wrote); orphaned backends may go on to commit what
                    # no standby receives.
                    crashed_timelines.add(timeline)
                    assert wait_for(lambda: load.busy("snowflake", 50_000), timeout=60, interval=0.01), \
                        "no burst began within 60 s"
                    os.kill(leader.postmaster_pid(), signal.SIGKILL)
                new = c.wait_leader(other_than=leader)
                event["leader_seen"] = time.monotonic()
                event["to"] = new.name
                event["took"] = event["leader_seen"] - event["started"]
                leader, old_timeline, timeline, since = new, timeline, new.timeline(), event["leader_seen"]
                assert timeline > old_timeline, f"{new.name} leads on timeline {timeline}, not above {old_timeline}"
                events.append(event)
        assert wait_for(lambda: load.progressed(timeline, since), timeout=PROGRESS_TIMEOUT, interval=0.2), \
            f"the clients committed too few batches on the final timeline {timeline}"
        load.finish()

        # -- every ID once: the primary key judged each insert; no client
        # saw a unique violation (nor any other unexpected error).
        assert not load.unexpected, f"{len(load.unexpected)} unexpected errors: {load.unexpected[:5]}"
        assert_unique([r[0] for r in leader.sql("SELECT id FROM events")])
        assert_unique([r[0] for r in leader.sql("SELECT id FROM orders")])

        # -- what the clients saw committed is there, except what the kill
        # may have lost (asynchronous replication).
        present = present_batches(leader, load)
        present_tags = {b.tag for b in present}
        committed = [b for b in load.batches if b.committed is not None]
        missing = [b for b in committed if b.tag not in present_tags]
        lost_beyond_a_crash = [b for b in missing if b.timeline not in crashed_timelines]
        assert not lost_beyond_a_crash, (
            f"committed batches missing on the final leader: {fmt_ids(lost_beyond_a_crash)},"
            f" e.g. {lost_beyond_a_crash[:3]}")
        # The WAL reaches a standby in order: a lost commit is never older
        # than a kept one of its timeline.
        for b in missing:
            kept_after = [a for a in present if a.timeline == b.timeline and a.started > b.committed]
            assert not kept_after, f"batch {b.tag} lost, but {kept_after[0].tag} (begun after its COMMIT) kept"
        in_doubt = [b for b in load.batches if b.committed is None]

        # -- order kept across every leader change, for both generators.
        assert len({b.timeline for b in present}) == 1 + len(events)
        for generator in ("snowflake", "segment"):
            check_order_by_timeline(present, generator)
            for event in events:
                check_order_by_commit(present, generator, event)
        check_no_write_after_a_newer_leader(present)

        # -- IDs of later leaders inside the range of a lost commit: a
        # reuse its client could see (its rows went with the commit; the
        # guarantee is for what was replicated). Reported, not judged.
        reused = {}
        for b in missing:
            later = [a for a in present if a.generator == b.generator and a.timeline > b.timeline]
            if b.generator == "snowflake":
                (count,), = leader.sql("SELECT count(*) FROM events WHERE id BETWEEN %s AND %s AND kind = ANY(%s)",
                                       (b.lo, b.hi, [a.tag for a in later]))
            else:
                count = sum(b.lo <= i <= b.hi for a in later for i in a.ids)
            if count:
                reused[b.tag] = count

        # -- the killed node comes back as a replica (pg_rewind) and every
        # node replays the final leader's rows; no node mistook itself for
        # a copy of a base backup.
        c.wait_replicas(leader, len(c.nodes) - 1, timeout=PROGRESS_TIMEOUT)
        c.wait_replayed(leader)
        counts = "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM orders)"
        for node in c.nodes:
            assert node.sql(counts) == leader.sql(counts), f"{node.name} holds other rows than the leader"
            assert COPY_WARNING not in node.log(), f"{node.name} warned it was a copy of a base backup"
    except BaseException:
        print(c.dump())
        raise

    took = time.monotonic() - began
    snowflakes = [b for b in present if b.generator == "snowflake"]
    segments = [b for b in present if b.generator == "segment"]
    errors = ", ".join(f"{k}: {v}" for k, v in sorted(load.tally["errors"].items())) or "none"
    lines = [f"patroni: {len(c.nodes)} nodes, bootstrap {boot:.0f} s; kept {fmt_ids(snowflakes, 'snowflake')}"
             f" and {fmt_ids(segments, 'segment')} on timelines "
             f"{min(b.timeline for b in present)}-{max(b.timeline for b in present)}"]
    for e in events:
        lines.append(f"patroni: {e['kind']} {e['from']} (timeline {e['timeline']}, lead {e['lead_ms'] / 1000:.1f} s)"
                     f" -> {e['to']}: new leader seen after {e['took']:.1f} s")
    which = ", ".join(f"{b.generator} {b.tag} [{b.lo}, {b.hi}] timeline {b.timeline}" for b in missing)
    lines.append(f"patroni: committed but lost with the kill: {fmt_ids(missing)}{f' ({which})' if which else ''};"
                 f" later IDs inside their ranges: {reused or 'none'}; in doubt: {len(in_doubt)}"
                 f" ({sum(b.tag in present_tags for b in in_doubt)} kept)")
    lines.append(f"patroni: client errors by kind: {errors}")
    lines.append(f"patroni: took {took:.0f} s")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
