"""Plain helpers shared by the integration tests, each defined once here:
ID checks, waiting, threads, sessions, drawing IDs, queries on the
allocator's state, finding server processes, libfaketime and standbys.

The other test support lives beside it:
- conftest.py: pytest fixtures (throwaway clusters from tests/lib/cluster.py,
  the module cluster `lc`, the torture tally) and the torture summary;
- adversary.py: the test-only failpoints (Failpoint, paused, armed).
"""

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import threading
import time

import psycopg

# The repository's top directory.
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


# ---------------------------------------------------------------------------
# Checks on the IDs handed out.

def assert_unique(ids):
    """Fails naming a few IDs that occur more than once."""
    seen = set()
    dups = [i for i in ids if i in seen or seen.add(i)]
    assert not dups, f"{len(dups)} IDs handed out twice, e.g. {dups[:5]}"


def assert_increasing(ids):
    """Fails naming a few neighbours that are not strictly increasing."""
    bad = [(a, b) for a, b in zip(ids, ids[1:]) if not a < b]
    assert not bad, f"IDs not strictly increasing, e.g. {bad[:3]}"


def duplicates(ids):
    """The IDs that occur more than once (each repeat listed), in order;
    for tests that report repeats rather than fail on them."""
    seen, dups = set(), []
    for i in ids:
        if i in seen:
            dups.append(i)
        seen.add(i)
    return dups


def count_error(tally, error):
    """Counts an error by class and SQLSTATE into a torture tally
    (conftest.py's `torture` fixture)."""
    kind = getattr(error, "sqlstate", None) or type(error).__name__
    name = f"{type(error).__name__} ({kind})" if kind != type(error).__name__ else kind
    tally["errors"][name] = tally["errors"].get(name, 0) + 1


def check_unique(tally, ids):
    """Counts the IDs and duplicates into the tally, then asserts none."""
    tally["ids_checked"] += len(ids)
    tally["duplicates"] += len(ids) - len(set(ids))
    assert_unique(ids)


# ---------------------------------------------------------------------------
# Waiting and threads.

# What segment_attach and the lease keeper require a postgres_fdw server's
# options to pin on the central session (remote_session.rs).
PINNED = "-c synchronous_commit=on -c lock_timeout=10ms -c idle_in_transaction_session_timeout=5s"


# The client examples (examples/sharding: the central server and shards).
SHARDING_EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "sharding")


def psql_file(cluster, db, path, **variables):
    """Runs a SQL file with psql (stopping at the first error), with psql
    variables."""
    args = ["psql", "-v", "ON_ERROR_STOP=1", "-q", "-d", db, "-f", path]
    for name, value in variables.items():
        args[1:1] = ["-v", f"{name}={value}"]
    done = cluster.client(*args, check=False)
    assert done.returncode == 0, done.stderr


def hand_made_central_table(central, db, step=10):
    """The classic id_segment made by hand in `db` (no pg_idgen, so no guard
    trigger), with 'orders' at 0, and what shards check of a central server
    (examples/sharding/central_by_hand.sql)."""
    central.sql("CREATE TABLE id_segment (biz_tag varchar(64) PRIMARY KEY, max_id bigint NOT NULL, "
                "step int NOT NULL, version bigint NOT NULL DEFAULT 0, updated_at timestamptz)",
                dbname=db)
    central.sql("INSERT INTO id_segment (biz_tag, max_id, step) VALUES ('orders', 0, %s)", (step,),
                dbname=db)
    psql_file(central, db, os.path.join(SHARDING_EXAMPLES, "central_by_hand.sql"))


def free_ports(n):
    """n TCP ports of 127.0.0.1 free at the moment (bound to port 0)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for(predicate, timeout=10.0, interval=0.05):
    """Polls `predicate` until it is true or `timeout` seconds passed;
    returns its last value (so `assert wait_for(...)` fails on timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


JOIN_TIMEOUT = 90


def in_thread(target, *args):
    """Runs target(*args) in a daemon thread; returns (thread, result dict)
    where the dict gets 'value' or 'error'. Wait for it with joined()."""
    result = {}

    def run():
        try:
            result["value"] = target(*args)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            result["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def joined(thread, result):
    """Joins a thread of in_thread() (failing after JOIN_TIMEOUT seconds)
    and returns its result dict."""
    thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive(), f"a helper thread did not finish within {JOIN_TIMEOUT} s"
    return result


# ---------------------------------------------------------------------------
# Sessions and row locks.

def session(cluster, dbname, autocommit=True, refill_timeout=None, user=None):
    """A connection with a statement_timeout, so that nothing hangs a test;
    optionally with pg_idgen.refill_timeout set, or as another role."""
    if user is None:
        conn = cluster.connect(dbname, autocommit=autocommit)
    else:
        conn = psycopg.connect(host=cluster.dir, user=user, dbname=dbname, autocommit=autocommit)
    conn.execute("SET statement_timeout = '120s'")
    if refill_timeout is not None:
        conn.execute(f"SET pg_idgen.refill_timeout = '{refill_timeout}'")
    if not autocommit:
        conn.commit()
    return conn


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


# ---------------------------------------------------------------------------
# Drawing IDs. Each returns the IDs in the order received, from one
# statement; they differ in where that statement runs.

def draw(conn, tag, n):
    """n segment IDs of `tag` on the open connection `conn`."""
    return [r[0] for r in conn.execute(
        "SELECT segment_nextval(%s) FROM generate_series(1, %s)", (tag, n))]


def draw_new(cluster, dbname, tag, n, refill_timeout=None):
    """draw() on a session() of its own (statement_timeout 120 s, and
    `refill_timeout` if given), closed afterwards."""
    with session(cluster, dbname, refill_timeout=refill_timeout) as conn:
        return draw(conn, tag, n)


def draw_plain(cluster, dbname, tag, n):
    """n segment IDs of `tag` on a connection of its own with the server's
    settings as they are (cluster.sql; no statement_timeout)."""
    return [r[0] for r in cluster.sql(
        f"SELECT segment_nextval('{tag}') FROM generate_series(1, {n})", dbname=dbname)]


def draw_snowflakes(cluster, n, function="snowflake_nextval", dbname="postgres"):
    """n snowflake IDs from `function()` (snowflake_nextval, or e.g.
    snowflake_js_nextval) on a connection of its own."""
    with cluster.connect(dbname) as conn:
        return [r[0] for r in conn.execute(f"SELECT {function}() FROM generate_series(1, {n})")]


# ---------------------------------------------------------------------------
# The allocator's state.

def row_range(cluster, dbname, tag):
    """(max_id, step, version) of a tag's id_segment row, or None."""
    rows = cluster.sql("SELECT max_id, step, version FROM id_segment WHERE biz_tag = %s", (tag,),
                       dbname=dbname)
    return rows[0] if rows else None


def status_row(cluster, tag, *columns, dbname="postgres", of_database=None):
    """One tag's segment_status columns (None if it has no row). The view is
    cluster-wide; `of_database` (default: `dbname`) picks the database."""
    rows = cluster.sql(
        f"SELECT {', '.join(columns)} FROM segment_status WHERE tag = %s AND database = %s",
        (tag, of_database or dbname), dbname=dbname)
    assert len(rows) <= 1, f"segment_status shows {len(rows)} rows for one (database, tag)"
    return rows[0] if rows else None


def total_waits(cluster, dbname, tag):
    """segment_status.waits of a tag in `dbname`, summed (0 without a row)."""
    return cluster.sql("SELECT coalesce(sum(waits), 0) FROM segment_status WHERE tag = %s "
                       "AND database = current_database()", (tag,), dbname=dbname)[0][0]


# ---------------------------------------------------------------------------
# Server processes.

WORKER_TYPE = "pg_idgen refill worker"


def refill_worker_pids(cluster, dbname):
    """Pids of the refill workers connected to `dbname` (pg_stat_activity),
    in ascending order."""
    rows = cluster.sql(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = %s AND datname = %s ORDER BY pid",
        (WORKER_TYPE, dbname))
    return [r[0] for r in rows]


def backend_pids(cluster, backend_type):
    """Pids of every process of `backend_type` in pg_stat_activity (e.g.
    'client backend'), in any database, except the querying session's own."""
    return [pid for pid, in cluster.sql(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = %s AND pid <> pg_backend_pid()", (backend_type,))]


def keeper_pids(cluster):
    """The live keeper processes of the cluster's postmaster (the keeper has
    no database connection, so pg_stat_activity does not list it): children
    of postmaster.pid's pid whose command line names the keeper, from /proc."""
    with open(os.path.join(cluster.data, "postmaster.pid")) as f:
        postmaster = f.readline().strip()
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, IndexError):
            continue
        if ppid == postmaster and b"pg_idgen snowflake keeper" in cmdline:
            pids.append(int(entry))
    return pids


# ---------------------------------------------------------------------------
# libfaketime (tests/setup.sh installs Debian's faketime).

# Its path, or None when faketime is not installed.
LIBFAKETIME = (glob.glob("/usr/lib/*/faketime/libfaketime.so.1") or [None])[0]


def faketime_env(offset_seconds):
    """The server's clock shifted by `offset_seconds`, through libfaketime
    (environment for Cluster.start/restart's extra_env)."""
    assert LIBFAKETIME, "faketime is not installed (tests/setup.sh installs it)"
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": f"{offset_seconds:+d}", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


# ---------------------------------------------------------------------------
# Standbys.

def standby_of(primary, make_cluster, conf=(), env=None, tcp_port=None):
    """A hot standby of `primary` (pg_basebackup -R, streaming), started
    on a socket of its own (and on 127.0.0.1:`tcp_port` if given); `env`
    for its server (e.g. faketime_env)."""
    standby = make_cluster(conf=conf, tcp_port=tcp_port)
    shutil.rmtree(standby.data)
    primary.client("pg_basebackup", "-c", "fast", "-D", standby.data, "-R", "-X", "stream")
    subprocess.run(["chown", "-R", "postgres:postgres", standby.data], check=True)
    tcp = (f"listen_addresses = '127.0.0.1'", f"port = {tcp_port}") if tcp_port else ()
    standby.append_conf(f"unix_socket_directories = '{standby.dir}'", "hot_standby = on", *tcp)
    standby.start(extra_env=env)
    return standby


def replayed(primary, standby, timeout=60):
    """Waits until `standby` has replayed all the WAL `primary` flushed."""
    (lsn,), = primary.sql("SELECT pg_current_wal_flush_lsn()")
    return wait_for(lambda: standby.sql("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,))
                    == [(True,)], timeout=timeout)


def archived(server, timeout=60):
    """Switches `server` to a new WAL file and waits until the archiver has
    copied the one it closed, so a restore from the archive reaches every
    record written before the call. The file to wait for is named once: WAL
    written after the switch (the refill worker's, a checkpoint's) must not
    move the goal."""
    (last,), = server.sql("SELECT pg_walfile_name(pg_switch_wal())")
    return wait_for(lambda: server.sql("SELECT last_archived_wal >= %s FROM pg_stat_archiver", (last,))
                    == [(True,)], timeout=timeout)


def promote(server):
    """pg_ctl promote, and waits until the server has left recovery."""
    subprocess.run(["runuser", "-u", "postgres", "--", f"{server.pg_bin}/pg_ctl", "-D", server.data,
                    "-w", "-t", "60", "promote"], check=True, capture_output=True)
    assert wait_for(lambda: server.sql("SELECT pg_is_in_recovery()") == [(False,)], timeout=60)


# ---------------------------------------------------------------------------
# Snowflake time far ahead of the clock.

# A layout of 16 IDs per ms (4 sequence bits), so that a burst of 200,000
# IDs is 12.5 s of snowflake time however fast the machine inserts them: a
# generator that forgot its high-water mark would then start below IDs
# already issued. Lead up to 5 minutes is allowed.
BURST_LAYOUT = (
    "pg_idgen.machine_id = 7",
    "pg_idgen.snowflake_time_bits = 47",
    "pg_idgen.snowflake_machine_bits = 12",
    "pg_idgen.snowflake_sequence_bits = 4",
    "pg_idgen.snowflake_max_lead = '5min'",
)

# How far ahead of the clock two bursts of 200,000 IDs of BURST_LAYOUT put
# snowflake time at the least: 25 s of IDs, less the seconds the inserts
# themselves take.
BURST_LEAD_MS = 5_000

# What the keeper logs when a primary started from a base backup still
# runs on the backup's timeline with a fixed machine id.
COPY_WARNING = "started from a base backup and still runs on the backup's timeline"


def lead_ms(server, dbname="postgres"):
    """How far (ms) the default generator's time is ahead of the clock."""
    rows = server.sql("SELECT lead_ms FROM snowflake_status WHERE generator = 'default'", dbname=dbname)
    return rows[0][0] or 0
