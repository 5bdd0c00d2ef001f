"""pg_idgen behind a connection pooler: a real PgBouncer in transaction
pooling (`pool_mode = transaction`) on 127.0.0.1, in front of a throwaway
server it reaches on the server's Unix socket (docs/poolers.md).

What a client sees there: `segment_currval` in a statement of its own may
answer with another client's ID (and in the draw's transaction never
does); a session `SET` of a pg_idgen setting reaches other clients (and
`SET LOCAL`, or a database's default, does not / reaches all alike); the ID
pool of examples/id_pool.py, made as the example makes its connection,
gets unique, increasing blocks where psycopg's automatic prepared
statements fail; and many clients drawing at once through a few server
connections get no ID twice.

The traps are shown deterministically: the pool `one` has a single server
connection, so two clients' statements run on one backend in the order
the test sends them; a client that must wait for that connection is seen
waiting in PgBouncer's own `SHOW POOLS` before the test goes on. No
assertion depends on the machine's speed."""

import os
import shutil
import subprocess
import sys
import tempfile
import threading

import psycopg
import pytest

from helpers import (REPO, assert_increasing, assert_unique, free_ports, in_thread, joined,
                     wait_for)

sys.path.insert(0, os.path.join(REPO, "examples"))
from id_pool import IdPool  # noqa: E402

# Debian's package puts it in /usr/sbin, which root's PATH may lack.
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"

# The statement examples/id_pool.py runs.
RESERVE = "SELECT first, last FROM segment_reserve(%s, %s) ORDER BY first"


class PgBouncer:
    """A pgbouncer process of the test's own: its pgbouncer.ini and
    userlist in a temporary directory, run as the `postgres` user (it
    refuses to run as root), listening on 127.0.0.1 only (no Unix socket
    of its own), pooling per transaction. `databases` maps each name
    clients connect to onto (the server's database, server connections
    in its pool)."""

    def __init__(self, cluster, databases):
        self.dir = tempfile.mkdtemp(prefix="pg_idgen-pgbouncer.")
        shutil.chown(self.dir, "postgres", "postgres")
        self.cluster, self.databases = cluster, databases
        self.proc = None
        self.port = None

    def _write_config(self):
        lines = ["[databases]"]
        for alias, (dbname, pool_size) in self.databases.items():
            # host: the server's socket directory (a path: a Unix socket).
            lines.append(f"{alias} = host={self.cluster.dir} port={self.cluster.port} "
                         f"dbname={dbname} pool_size={pool_size}")
        lines += [
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {self.dir}/userlist.txt",
            "admin_users = postgres",
            "pool_mode = transaction",
            "max_client_conn = 100",
            "default_pool_size = 1",
            f"logfile = {self.dir}/pgbouncer.log",
            f"pidfile = {self.dir}/pgbouncer.pid",
        ]
        with open(os.path.join(self.dir, "pgbouncer.ini"), "w") as f:
            f.write("\n".join(lines) + "\n")
        # trust: the user must still be listed; the server trusts it too.
        with open(os.path.join(self.dir, "userlist.txt"), "w") as f:
            f.write('"postgres" ""\n')

    def start(self):
        assert os.path.exists(PGBOUNCER), "pgbouncer is not installed: run tests/setup.sh"
        # A port free a moment ago may be taken by the time pgbouncer binds
        # it: then it exits, and the next try takes another port.
        for _ in range(5):
            self.port = free_ports(1)[0]
            self._write_config()
            self.proc = subprocess.Popen([PGBOUNCER, os.path.join(self.dir, "pgbouncer.ini")],
                                         user="postgres", group="postgres", extra_groups=[],
                                         cwd=self.dir,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if wait_for(lambda: self.proc.poll() is not None or self._accepts(), timeout=60) \
                    and self.proc.poll() is None:
                return
            self.stop()
        raise AssertionError(f"pgbouncer did not start; its log:\n{self.log()}")

    def _accepts(self):
        try:
            with self.connect("pgbouncer"):
                return True
        except psycopg.OperationalError:
            return False

    def log(self):
        try:
            with open(os.path.join(self.dir, "pgbouncer.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def connect(self, alias, **kwargs):
        """A client connection through the pooler: autocommit, as most
        applications behind a transaction pooler run, and without
        psycopg's automatic prepared statements (see the test of them),
        unless the caller passes its own `prepare_threshold`."""
        kwargs.setdefault("autocommit", True)
        kwargs.setdefault("prepare_threshold", None)
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=alias,
                               connect_timeout=60, **kwargs)

    def waiting_clients(self, alias):
        """cl_waiting of the pool of `alias` in the admin console's SHOW
        POOLS (which speaks the simple query protocol only)."""
        with self.connect("pgbouncer") as console:
            result = console.pgconn.exec_(b"SHOW POOLS")
            columns = [result.fname(i).decode() for i in range(result.nfields)]
            for row in range(result.ntuples):
                values = dict(zip(columns, (result.get_value(row, i).decode()
                                            for i in range(result.nfields))))
                if values["database"] == alias:
                    return int(values["cl_waiting"])
        return 0

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()        # SIGTERM: pgbouncer shuts down at once
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(60)
        self.proc = None

    def destroy(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def bouncer(make_module_cluster):
    server = make_module_cluster()
    server.start()
    server.sql("CREATE EXTENSION pg_idgen")      # the snowflake keeper's database
    db = server.new_database()
    for tag, step in (("pooled", 1000), ("blocks", 100), ("crowd", 100)):
        server.sql("SELECT segment_create(%s, step => %s)", (tag, step), dbname=db)
    server.sql("CREATE SEQUENCE native_seq", dbname=db)
    server.sql("CREATE TABLE returning_rows (id bigint DEFAULT segment_nextval('pooled'))", dbname=db)
    # A database whose default for the setting every server connection
    # of its pool starts with.
    tuned = server.new_database()
    server.sql(f"ALTER DATABASE {tuned} SET pg_idgen.refill_timeout = '45s'")
    pooler = PgBouncer(server, {"one": (db, 1), "many": (db, 4), "tuned": (tuned, 1)})
    pooler.start()
    yield pooler
    pooler.destroy()


def one(conn, query, params=None):
    return conn.execute(query, params).fetchone()[0]


def test_segment_currval_alone_can_be_another_clients_id_in_the_draws_transaction_never(bouncer):
    with bouncer.connect("one") as a, bouncer.connect("one") as b:
        # Both clients' statements run on the pool's one server connection.
        assert one(a, "SELECT pg_backend_pid()") == one(b, "SELECT pg_backend_pid()")

        # The trap: a statement of its own runs on whichever backend the
        # pooler picks, and that backend's last ID may be another client's.
        mine = one(a, "SELECT segment_nextval('pooled')")
        theirs = one(b, "SELECT segment_nextval('pooled')")
        assert theirs != mine
        assert one(a, "SELECT segment_currval('pooled')") == theirs
        # A native sequence's currval has the same trap.
        mine_native = one(a, "SELECT nextval('native_seq')")
        theirs_native = one(b, "SELECT nextval('native_seq')")
        assert one(a, "SELECT currval('native_seq')") == theirs_native != mine_native

        # In the draw's transaction the server connection is the client's
        # alone: the other client, drawing meanwhile, waits for it.
        for _ in range(3):
            with a.transaction():
                mine = one(a, "SELECT segment_nextval('pooled')")
                thread, result = in_thread(one, b, "SELECT segment_nextval('pooled')")
                assert wait_for(lambda: bouncer.waiting_clients("one") >= 1, timeout=60), \
                    "the other client never waited for the server connection"
                assert one(a, "SELECT segment_currval('pooled')") == mine
            drawn = joined(thread, result)
            assert "error" not in drawn, drawn.get("error")
            assert drawn["value"] != mine
            # Out of the transaction the trap is back.
            assert one(a, "SELECT segment_currval('pooled')") == drawn["value"]

        # RETURNING needs no second statement: each client gets its row's ID.
        mine = one(a, "INSERT INTO returning_rows DEFAULT VALUES RETURNING id")
        theirs = one(b, "INSERT INTO returning_rows DEFAULT VALUES RETURNING id")
        assert mine != theirs
        assert one(a, "SELECT array_agg(id ORDER BY id) FROM returning_rows") == sorted([mine, theirs])


def test_a_session_set_reaches_other_clients_and_set_local_does_not(bouncer):
    with bouncer.connect("one") as a, bouncer.connect("one") as b:
        default = one(b, "SHOW pg_idgen.refill_timeout")
        assert default == "10s"                  # tests/lib/cluster.conf
        # A session SET stays on the server connection, for the next client.
        a.execute("SET pg_idgen.refill_timeout = '37s'")
        assert one(b, "SHOW pg_idgen.refill_timeout") == "37s"
        a.execute("SET pg_idgen.snowflake_max_wait = '3s'")
        assert one(b, "SHOW pg_idgen.snowflake_max_wait") == "3s"
        # Whoever is on that connection can undo it for everyone.
        b.execute("RESET pg_idgen.refill_timeout")
        b.execute("RESET pg_idgen.snowflake_max_wait")
        assert one(a, "SHOW pg_idgen.refill_timeout") == default
        assert one(a, "SHOW pg_idgen.snowflake_max_wait") == "10s"

        # SET LOCAL ends with the transaction: no other client sees it.
        with a.transaction():
            a.execute("SET LOCAL pg_idgen.refill_timeout = '41s'")
            assert one(a, "SHOW pg_idgen.refill_timeout") == "41s"
            one(a, "SELECT segment_nextval('pooled')")
        assert one(b, "SHOW pg_idgen.refill_timeout") == default
        with a.transaction():
            one(a, "SELECT set_config('pg_idgen.refill_timeout', '42s', true)")
            assert one(a, "SHOW pg_idgen.refill_timeout") == "42s"
        assert one(b, "SHOW pg_idgen.refill_timeout") == default

    # A database's (or role's) default: every server connection starts
    # with it, so every client sees it.
    with bouncer.connect("tuned") as a, bouncer.connect("tuned") as b:
        assert one(a, "SHOW pg_idgen.refill_timeout") == one(b, "SHOW pg_idgen.refill_timeout") == "45s"

    # Startup options are refused by the pooler, not passed on.
    with pytest.raises(psycopg.OperationalError, match="unsupported startup parameter"):
        bouncer.connect("one", options="-c pg_idgen.refill_timeout=30s").close()


def test_psycopgs_automatic_prepared_statements_collide_behind_the_pooler(bouncer):
    """The control for the next test: what the ID pool did before it
    turned them off. psycopg prepares a query at its 6th execution by a
    connection (prepare_threshold = 5), naming it `_pg3_0` on every
    connection; two clients on one server connection prepare the same name
    there."""
    conninfo = f"host=127.0.0.1 port={bouncer.port} user=postgres dbname=one"
    with psycopg.connect(conninfo, autocommit=True) as a, psycopg.connect(conninfo, autocommit=True) as b:
        assert a.prepare_threshold == 5          # psycopg's default
        with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
            for _ in range(10):
                for conn in (a, b):
                    conn.execute(RESERVE, ("blocks", 10)).fetchall()


def test_the_id_pool_example_gets_unique_increasing_blocks_behind_the_pooler(bouncer):
    """examples/id_pool.py with a connection string, as the example makes
    its connection: three pools, two sharing one server connection, one
    over four."""
    pools = {name: IdPool(f"host=127.0.0.1 port={bouncer.port} user=postgres dbname={alias}",
                          "blocks", block_size=50)
             for name, alias in (("A", "one"), ("B", "one"), ("C", "many"))}
    ids = {name: [] for name in pools}
    try:
        for _ in range(1000):                 # interleaved: 20 reservations each
            for name, pool in pools.items():
                ids[name].append(pool.next_id())
    finally:
        for pool in pools.values():
            pool.close()
    everything = []
    for name, pool in pools.items():
        assert pool.reserve_calls >= 20, "well past psycopg's prepare threshold"
        assert_increasing(ids[name])
        everything += ids[name]
    assert_unique(everything)


def test_many_clients_drawing_at_once_through_the_pooler_get_no_id_twice(bouncer):
    clients, rounds, batch = 12, 100, 20
    segment = [[] for _ in range(clients)]
    snowflake = [[] for _ in range(clients)]
    backends = set()
    failures = []
    start = threading.Barrier(clients)

    def work(i):
        try:
            with bouncer.connect("many") as conn:
                start.wait()
                for _ in range(rounds):
                    pid, seg, flake = conn.execute(
                        "SELECT pg_backend_pid(), segment_nextval('crowd'), snowflake_nextval()").fetchone()
                    backends.add(pid)
                    segment[i].append(seg)
                    snowflake[i].append(flake)
                    segment[i] += [r[0] for r in conn.execute(
                        "SELECT segment_nextval('crowd', %s)", (batch,)).fetchall()]
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not failures, failures[0]
    # Twelve clients shared at most four server connections.
    assert 1 <= len(backends) <= 4
    every_segment = [i for ids in segment for i in ids]
    assert len(every_segment) == clients * rounds * (1 + batch)
    assert_unique(every_segment)
    every_snowflake = [i for ids in snowflake for i in ids]
    assert len(every_snowflake) == clients * rounds
    assert_unique(every_snowflake)
    # Snowflake IDs increase across the cluster, so per client too,
    # whichever backend each statement ran on.
    for ids in snowflake:
        assert_increasing(ids)
