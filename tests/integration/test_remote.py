"""Many servers, one ID space: shards whose tags take their ranges from a
central server's id_segment through postgres_fdw (segment_attach), and the
opt-in snowflake fallback. Every server is a throwaway cluster of its own,
on its own Unix socket."""

import bisect
import os
import re
import shutil
import subprocess
import threading
import time

import psycopg
import pytest

from adversary import REACH_TIMEOUT, Failpoint, paused
from helpers import (PINNED, SHARDING_EXAMPLES, archived, assert_increasing, assert_unique, draw, draw_plain,
                     free_ports, hand_made_central_table, in_thread, joined, promote, psql_file, replayed,
                     row_locked, session, wait_for)
from proxy import LinkProxy

# Shards keep a bounded cache, so that a test can run it dry.
SHARD_CONF = ("pg_idgen.refill_timeout = '2s'", "pg_idgen.remote_cache_ahead = '1s'",
              "pg_idgen.max_ids_ahead = 20000", "pg_idgen.remote_timeout = '2s'")


def attach(shard, db, central, central_db, tag="orders", via=None):
    """The README's shard setup, without the example table; `via`: a
    LinkProxy the shard reaches the central server through."""
    host, port = ("127.0.0.1", via.port) if via else (central.dir, central.port)
    for statement in [
        "CREATE EXTENSION IF NOT EXISTS postgres_fdw",
        f"CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{host}', "
        f"port '{port}', dbname '{central_db}', connect_timeout '2', options '{PINNED}')",
        "CREATE USER MAPPING FOR CURRENT_USER SERVER central OPTIONS (user 'postgres')",
        f"SELECT segment_attach('{tag}', 'central')",
    ]:
        shard.sql(statement, dbname=db)


def central_and_shards(make_cluster, shards=2, step=10, conf=SHARD_CONF):
    central = make_cluster()
    central.start()
    central_db = central.new_database()
    central.sql(f"SELECT segment_create('orders', step => {step})", dbname=central_db)
    made = []
    for i in range(shards):
        shard = make_cluster(conf=(*conf, f"pg_idgen.machine_id = {i + 1}"))
        shard.start()
        # pg_idgen.snowflake_database (postgres): where the mark is WAL-logged.
        shard.sql("CREATE EXTENSION pg_idgen")
        db = shard.new_database()
        attach(shard, db, central, central_db)
        made.append((shard, db))
    return central, central_db, made


def central_behind_a_proxy(make_cluster):
    """A central server on 127.0.0.1 with 'orders' at step 10, and a
    LinkProxy in front of it for shards to attach through."""
    [port] = free_ports(1)
    central = make_cluster(tcp_port=port)
    central.start()
    central_db = central.new_database()
    central.sql("SELECT segment_create('orders', step => 10)", dbname=central_db)
    return central, central_db, LinkProxy(port)


def central_max_id(central, central_db, tag="orders"):
    (max_id,), = central.sql("SELECT max_id FROM id_segment WHERE biz_tag = %s", (tag,),
                             dbname=central_db)
    return max_id


def test_shards_and_a_classic_version_cas_client_never_share_an_id(make_cluster):
    """Central + 2 shards x 4 sessions x 100,000 IDs at step 10, while a
    client runs the classic version-CAS protocol on the central row itself.
    The client updates the row in a loop with no pause, so a shard's refill
    can lose many CAS rounds in a row on a busy machine: its callers wait
    up to 10 s for a range here (2 s elsewhere), so that the test asserts
    the protocol, not the machine's speed."""
    central, central_db, shards = central_and_shards(
        make_cluster, conf=(*SHARD_CONF, "pg_idgen.refill_timeout = '10s'"))
    per_session, sessions = {}, []
    stop = threading.Event()
    client_ranges, failures = [], []

    def session(shard, db, key):
        try:
            with shard.connect(db) as conn:
                ids = []
                for _ in range(10):
                    ids += [r[0] for r in conn.execute(
                        "SELECT segment_nextval('orders') FROM generate_series(1, 10000)")]
                per_session[key] = ids
        except Exception as e:  # reported below
            failures.append(e)

    def classic_client():
        with central.connect(central_db) as conn:
            while not stop.is_set():
                (max_id, step, version), = conn.execute(
                    "SELECT max_id, step, version FROM id_segment WHERE biz_tag = 'orders'").fetchall()
                won = conn.execute(
                    "UPDATE id_segment SET max_id = max_id + step, version = version + 1, "
                    "updated_at = now() WHERE biz_tag = 'orders' AND version = %s RETURNING max_id",
                    (version,)).fetchall()
                if won:
                    client_ranges.append((won[0][0] - step + 1, won[0][0]))

    client = threading.Thread(target=classic_client)
    client.start()
    for s, (shard, db) in enumerate(shards):
        for i in range(4):
            t = threading.Thread(target=session, args=(shard, db, (s, i)))
            t.start()
            sessions.append(t)
    for t in sessions:
        t.join()
    stop.set()
    client.join()
    assert not failures, failures[:3]
    assert len(per_session) == 8
    for ids in per_session.values():
        assert_increasing(ids)
    everything = [i for ids in per_session.values() for i in ids]
    assert len(everything) == 800_000
    assert_unique(everything)
    assert client_ranges, "the classic version-CAS client never won a range"
    ranges = sorted(client_ranges)
    starts = [first for first, _ in ranges]
    inside = [i for i in everything
              if (k := bisect.bisect_right(starts, i) - 1) >= 0 and i <= ranges[k][1]]
    assert not inside, f"shards handed out IDs of the classic client's ranges: {inside[:5]}"
    assert max(everything) <= central_max_id(central, central_db)
    (source,), = shards[0][0].sql("SELECT source FROM segment_status WHERE tag = 'orders'",
                                  dbname=shards[0][1])
    assert source == "central"


def test_a_stopped_central_server_costs_the_cached_ids_then_an_08_error_then_nothing(make_cluster):
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    before = draw_plain(shard, db, "orders", 5000)
    # The worker keeps IDs cached ahead of the callers.
    assert wait_for(lambda: shard.sql(
        "SELECT ids_ahead + remaining_in_range FROM segment_status WHERE tag = 'orders'",
        dbname=db)[0][0] > 0, timeout=30)
    central.stop()
    during, error = [], None
    with shard.connect(db) as conn:
        started = time.monotonic()
        while error is None and time.monotonic() - started < 120:
            try:
                during += [r[0] for r in conn.execute(
                    "SELECT segment_nextval('orders') FROM generate_series(1, 100)")]
            except psycopg.Error as e:
                error = e
    assert during, "no cached ID was served while the central server was down"
    assert error is not None, "callers never failed with the central server down"
    assert error.sqlstate.startswith("08"), (error.sqlstate, str(error))
    assert "central" in str(error), str(error)
    (last_error,), = shard.sql("SELECT last_error FROM segment_status WHERE tag = 'orders'",
                               dbname=db)
    assert last_error and "central" in last_error
    central.start()
    after = []

    def resumed():
        try:
            after.extend(draw_plain(shard, db, "orders", 1000))
            return True
        except psycopg.Error:
            return False

    assert wait_for(resumed, timeout=60, interval=0.5), "the shard did not resume by itself"
    after += draw_plain(shard, db, "orders", 5000)
    assert_unique(before + during + after)
    assert max(after) <= central_max_id(central, central_db)


def test_a_shard_crashing_with_its_refill_in_flight_on_the_central_server_leaves_only_a_gap(
        make_cluster):
    """The central server holds the shard's UPDATE (a trigger sleeps in it);
    the shard is stopped -m immediate meanwhile."""
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    central.sql("CREATE TABLE hold (on_ boolean); "
                "CREATE FUNCTION hold_refill() RETURNS trigger LANGUAGE plpgsql AS "
                "$$BEGIN IF EXISTS (SELECT FROM public.hold) THEN PERFORM pg_catalog.pg_sleep(5); END IF; "
                "RETURN NEW; END$$; "
                "CREATE TRIGGER hold_refill BEFORE UPDATE ON id_segment FOR EACH ROW "
                "EXECUTE FUNCTION hold_refill()", dbname=central_db)
    before = draw_plain(shard, db, "orders", 3000)
    central.sql("INSERT INTO hold VALUES (true)", dbname=central_db)
    drained = []
    drawer = threading.Thread(target=_drain, args=(shard, db, drained))
    drawer.start()
    in_flight = lambda: central.sql(  # noqa: E731
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' "
        "AND query LIKE 'UPDATE%id_segment%'", dbname=central_db)[0][0] > 0
    assert wait_for(in_flight, timeout=30), "the shard's refill never reached the central server"
    shard.stop("immediate")
    drawer.join()
    central.sql("DELETE FROM hold", dbname=central_db)
    shard.start()
    # The central backend of the dead shard holds the row until its sleep
    # ends and it finds the connection gone: callers may wait that long.
    after = []
    assert wait_for(lambda: _drew(shard, db, after), timeout=60, interval=0.5)
    assert_unique(before + drained + after)
    assert min(after) > max(before + drained)
    assert max(after) <= central_max_id(central, central_db)


def _drew(cluster, db, into, n=3000):
    try:
        into.extend(draw_plain(cluster, db, "orders", n))
        return True
    except psycopg.Error:
        return False


def _keep_drawing(cluster, db, into, stop):
    """Draws 'orders' 50 at a time into `into` until `stop` is set; a
    failed draw is retried after a pause."""
    with cluster.connect(db) as conn:
        while not stop.is_set():
            try:
                into += draw(conn, "orders", 50)
            except psycopg.Error:
                time.sleep(0.05)


def _drain(shard, db, into):
    """Draws until the server goes away."""
    try:
        with shard.connect(db) as conn:
            while True:
                into.extend(r[0] for r in conn.execute(
                    "SELECT segment_nextval('orders') FROM generate_series(1, 100)"))
    except psycopg.Error:
        pass


def test_a_shard_crashing_after_the_central_commit_before_publishing_leaves_only_a_gap(
        make_cluster):
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    before, drained = draw_plain(shard, db, "orders", 3000), []
    drawer = threading.Thread(target=_drain, args=(shard, db, drained), daemon=True)

    def start_drawer():  # paused() pokes until the worker gets there
        if drawer.ident is None:
            drawer.start()

    with paused(shard, "worker-before-publish", trigger=start_drawer):
        committed = central_max_id(central, central_db)
        shard.stop("immediate")
    shard.start()
    after = draw_plain(shard, db, "orders", 3000)
    assert_unique(before + drained + after)
    assert min(after) > committed, "a range committed on the central server was served again"


@pytest.mark.parametrize("fallback", ["on", "off"])
def test_the_snowflake_fallback_is_opt_in(make_cluster, fallback):
    central, central_db, [(shard, db)] = central_and_shards(
        make_cluster, shards=1, conf=(*SHARD_CONF, f"pg_idgen.snowflake_fallback = {fallback}"))
    own = draw_plain(shard, db, "orders", 1000)
    central.stop()
    got, error = [], None
    with shard.connect(db) as conn:
        while error is None and len(got) < 200_000:
            try:
                got += [r[0] for r in conn.execute(
                    "SELECT segment_nextval('orders') FROM generate_series(1, 1000)")]
            except psycopg.Error as e:
                error = e
            if got and got[-1] > 1 << 40:
                break
    if fallback == "off":
        assert error is not None and error.sqlstate.startswith("08"), error
        return
    assert error is None, error
    fallbacks = [i for i in got if i > 1 << 40]
    assert fallbacks, "no snowflake ID came back with the fallback on"
    (count,), = shard.sql("SELECT fallback_ids FROM segment_status WHERE tag = 'orders'", dbname=db)
    assert count >= len(fallbacks)
    assert_unique(own + got)
    warnings = re.findall(r"WARNING:.*handing out snowflake IDs instead", shard.log())
    assert len(warnings) == 1, warnings


def test_the_fallback_refuses_to_stand_in_while_the_machine_id_is_not_set(make_cluster):
    """Two servers that never set pg_idgen.machine_id would both fall back
    with machine id 0 and hand out the same snowflake IDs. A shard whose
    postgresql.conf turns the fallback on but sets no machine id warns at
    start, and fails with 55000 naming pg_idgen.machine_id once its cached
    IDs are gone, handing out no snowflake ID; set (here by ALTER SYSTEM
    and a restart), it falls back."""
    central = make_cluster()
    central.start()
    central_db = central.new_database()
    central.sql("SELECT segment_create('orders', step => 10)", dbname=central_db)
    shard = make_cluster(conf=(*SHARD_CONF, "pg_idgen.machine_id = ''",
                               "pg_idgen.snowflake_fallback = on"))
    shard.start()
    shard.sql("CREATE EXTENSION pg_idgen")
    db = shard.new_database()
    attach(shard, db, central, central_db)
    own = draw_plain(shard, db, "orders", 1000)
    central.stop()
    got = []
    error = _draw_until_error(shard, db, got, n=100)
    assert isinstance(error, psycopg.errors.ObjectNotInPrerequisiteState), error
    assert "pg_idgen.machine_id is not set on this server" in str(error), error
    assert "Set pg_idgen.machine_id" in error.diag.message_hint
    assert all(i < 1 << 40 for i in got), "a snowflake ID came back with machine id 0"
    shard.sql("ALTER SYSTEM SET pg_idgen.machine_id = '7'")
    shard.restart()
    fallbacks = draw_plain(shard, db, "orders", 100)
    assert all(i > 1 << 40 for i in fallbacks), fallbacks[:3]
    assert_unique(own + got + fallbacks)


def test_the_readme_sharding_example_gives_every_row_its_own_ids(make_cluster):
    central = make_cluster()
    central.start()
    central_db = central.new_database(extension=False)
    psql_file(central, central_db, os.path.join(SHARDING_EXAMPLES, "central.sql"))
    shards = []
    for i in (1, 2):
        shard = make_cluster(conf=(f"cluster_name = 'shard{i}'", f"pg_idgen.machine_id = {i}"))
        shard.start()
        db = shard.new_database(extension=False)
        psql_file(shard, db, os.path.join(SHARDING_EXAMPLES, "shard.sql"), central_host=central.dir,
                  central_port="5432", central_db=central_db, central_user="postgres")
        shards.append((shard, db))
    coordinator = make_cluster(preload=False)
    coordinator.start()
    coord_db = coordinator.new_database(extension=False)
    psql_file(coordinator, coord_db, os.path.join(SHARDING_EXAMPLES, "coordinator.sql"),
              shard1_host=shards[0][0].dir, shard1_port="5432", shard1_db=shards[0][1],
              shard2_host=shards[1][0].dir, shard2_port="5432", shard2_db=shards[1][1],
              shard_user="postgres")

    def insert(shard, db):
        with shard.connect(db) as conn:
            for _ in range(20):
                conn.execute("INSERT INTO orders (item) SELECT 'x' FROM generate_series(1, 500)")

    threads = [threading.Thread(target=insert, args=s) for s in shards for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = coordinator.sql("SELECT id, event_id, shard FROM orders", dbname=coord_db)
    assert len(rows) == 2 * 2 * 20 * 500
    assert {r[2] for r in rows} == {"shard1", "shard2"}
    assert_unique([r[0] for r in rows])
    assert_unique([r[1] for r in rows])
    (machines,), = coordinator.sql("SELECT count(DISTINCT event_id >> 12 & 1023) FROM orders",
                                   dbname=coord_db)
    assert machines == 2


@pytest.mark.parametrize("first", ["create", "attach"])
def test_a_tag_created_and_attached_at_once_gets_one_source(make_cluster, first):
    """segment_create in an open transaction that has drawn IDs, and
    segment_attach of the same tag in another session (or the other way
    round): the second waits for the first and is refused, so the tag
    never draws from both its local row and the central one."""
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    central.sql("SELECT segment_create('x', step => 10)", dbname=central_db)
    holder = shard.connect(db, autocommit=False)
    if first == "create":
        holder.execute("SELECT segment_create('x')")
        drawn = [r[0] for r in holder.execute(
            "SELECT segment_nextval('x') FROM generate_series(1, 5)")]
        second = "SELECT segment_attach('x', 'central')"
    else:
        holder.execute("SELECT segment_attach('x', 'central')")
        drawn = []
        second = "SELECT segment_create('x')"
    outcome = {}

    def run_second():
        try:
            shard.sql(second, dbname=db)
            outcome["ok"] = True
        except psycopg.Error as e:
            outcome["error"] = e

    t = threading.Thread(target=run_second)
    t.start()
    t.join(timeout=1.0)
    assert t.is_alive(), f"the second call did not wait for the first: {outcome}"
    holder.commit()
    holder.close()
    t.join(timeout=30)
    assert "error" in outcome, "both a local row and a remote source were made"
    assert outcome["error"].sqlstate == "42710", outcome["error"]
    (local,), = shard.sql("SELECT count(*) FROM id_segment WHERE biz_tag = 'x'", dbname=db)
    (remote,), = shard.sql("SELECT count(*) FROM id_segment_remote WHERE biz_tag = 'x'", dbname=db)
    assert (local, remote) == ((1, 0) if first == "create" else (0, 1))
    ids = drawn + draw_plain(shard, db, "x", 30)
    assert_unique(ids)


def test_long_server_names_and_a_dropped_foreign_table(make_cluster):
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    for tag in ("a", "b"):
        central.sql(f"SELECT segment_create('{tag}', step => 10)", dbname=central_db)
    long_name = "central_" + "x" * 50
    for suffix in ("1", "2"):
        shard.sql(f"CREATE SERVER {long_name}{suffix} FOREIGN DATA WRAPPER postgres_fdw OPTIONS "
                  f"(host '{central.dir}', port '5432', dbname '{central_db}', connect_timeout '2', "
                  f"options '{PINNED}')",
                  dbname=db)
        shard.sql(f"CREATE USER MAPPING FOR CURRENT_USER SERVER {long_name}{suffix} "
                  "OPTIONS (user 'postgres')", dbname=db)
    # Two tags through one long-named server, one through another whose
    # name shares its first 63 bytes.
    shard.sql(f"SELECT segment_attach('a', '{long_name}1')", dbname=db)
    shard.sql(f"SELECT segment_attach('b', '{long_name}1')", dbname=db)
    central.sql("SELECT segment_create('c', step => 10)", dbname=central_db)
    shard.sql(f"SELECT segment_attach('c', '{long_name}2')", dbname=db)
    tables = shard.sql("SELECT count(*) FROM pg_foreign_table", dbname=db)[0][0]
    # Per server (orders' own, and one per long-named one): its id_segment
    # and its id_segment_origin.
    assert tables == 6
    for tag in ("a", "b", "c"):
        ids = draw_plain(shard, db, tag, 50)
        assert_increasing(ids)
        (max_id,), = central.sql("SELECT max_id FROM id_segment WHERE biz_tag = %s", (tag,),
                                 dbname=central_db)
        assert max(ids) <= max_id
    # The foreign table dropped under an attached tag: a clear error.
    (foreign,), = shard.sql("SELECT foreign_table::text FROM id_segment_remote WHERE biz_tag = 'c'",
                            dbname=db)
    shard.sql(f"DROP FOREIGN TABLE {foreign}", dbname=db)
    shard.restart()
    with pytest.raises(psycopg.Error) as caught:
        draw_plain(shard, db, "c", 1)
    assert caught.value.sqlstate == "42P01", caught.value
    assert "foreign table was dropped" in str(caught.value)
    # So is the one over the central server's id_segment_origin (it named
    # the table's OID, with the generic hint, before).
    (origin,), = shard.sql("SELECT origin_table::text FROM id_segment_remote WHERE biz_tag = 'orders'",
                           dbname=db)
    shard.sql(f"DROP FOREIGN TABLE {origin}", dbname=db)
    error = _draw_until_error(shard, db, [], n=10)
    assert error.sqlstate == "42P01", error
    assert 'segment tag "orders" is attached to server "central", but its foreign table was dropped' \
        in str(error), error
    assert "segment_attach" in error.diag.message_hint, error.diag.message_hint


def _draw_until_error(cluster, db, into, n=500, limit=200_000, tag="orders"):
    """Draws `n` at a time into `into` until a draw fails; returns the error."""
    with cluster.connect(db) as conn:
        while len(into) < limit:
            try:
                into += draw(conn, tag, n)
            except psycopg.Error as e:
                return e
    raise AssertionError(f"no error after {len(into)} IDs")


def test_the_server_must_pin_the_central_session_and_a_later_change_stops_refills(make_cluster):
    """segment_attach refuses a server whose options leave the central
    session with its own defaults; a server changed after attaching (or
    attached under 0.2.0) stops refilling with the same error and hint, and
    the hint's ALTER SERVER makes it work again."""
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    # Drawn before the change: the IDs after the fix must all be above them.
    drawn = draw_plain(shard, db, "orders", 100)
    assert len(drawn) == 100
    shard.sql("CREATE SERVER bare FOREIGN DATA WRAPPER postgres_fdw OPTIONS "
              f"(host '{central.dir}', port '5432', dbname '{central_db}', connect_timeout '2')",
              dbname=db)
    shard.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER bare OPTIONS (user 'postgres')", dbname=db)
    central.sql("SELECT segment_create('other')", dbname=central_db)
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        shard.sql("SELECT segment_attach('other', 'bare')", dbname=db)
    assert 'server "bare" does not set synchronous_commit' in str(refused.value)
    hint = refused.value.diag.message_hint
    assert "ALTER SERVER bare OPTIONS (ADD options " in hint, hint
    shard.sql(hint[hint.index("ALTER SERVER"):], dbname=db)
    shard.sql("SELECT segment_attach('other', 'bare')", dbname=db)
    assert len(draw_plain(shard, db, "other", 10)) == 10

    # The attached server loses its pinning: the tag's refills stop.
    shard.sql("ALTER SERVER central OPTIONS (SET options '-c synchronous_commit=off "
              "-c lock_timeout=10ms -c idle_in_transaction_session_timeout=5s')", dbname=db)
    # Whatever the shard had cached goes out; the first refill is refused.
    error = _draw_until_error(shard, db, drawn, n=10)
    assert isinstance(error, psycopg.errors.InvalidParameterValue), error
    assert 'server "central" sets synchronous_commit=off' in str(error)
    hint = error.diag.message_hint
    assert "ALTER SERVER central OPTIONS (SET options " in hint, hint
    shard.sql(hint[hint.index("ALTER SERVER"):], dbname=db)
    more = draw_plain(shard, db, "orders", 1000)
    assert_unique(drawn + more)
    assert min(more) > max(drawn)


def test_a_central_server_with_asynchronous_commit_that_crashes_repeats_nothing(make_cluster):
    """The central server commits asynchronously and flushes its WAL only
    every 10 s; it crashes after one shard drew, and a second shard draws
    after the restart. The server's options pin synchronous_commit on the
    central session, so no range a shard handed out is lost."""
    central = make_cluster(conf=("synchronous_commit = off", "wal_writer_delay = '10s'"))
    central.start()
    central_db = central.new_database()
    central.sql("SELECT segment_create('orders', step => 10)", dbname=central_db)
    central.sql("CHECKPOINT")   # the setup itself is durable; only refills are at stake
    shards = []
    for i in range(2):
        shard = make_cluster(conf=(*SHARD_CONF, f"pg_idgen.machine_id = {i + 1}"))
        shard.start()
        db = shard.new_database()
        attach(shard, db, central, central_db)
        shards.append((shard, db))
    (first, first_db), (second, second_db) = shards
    before = draw_plain(first, first_db, "orders", 30_000)
    central.stop("immediate")
    central.start()
    after = draw_plain(second, second_db, "orders", 30_000)
    assert_unique(before + after)
    assert central_max_id(central, central_db) >= max(before + after)


# A tag's row of id_segment_central: where the central server was at its
# last refill.
CENTRAL_ROW = ("LEFT JOIN id_segment_central c ON c.system_identifier = r.central_system_identifier "
               "AND c.database_oid = r.central_database_oid AND c.table_oid = r.central_table_oid "
               "AND c.timeline = r.central_timeline")


def _wait_until_idle(shard, db):
    """Waits until the shard's worker stopped topping up its caches after
    the last draws: no refill recorded for 2 s."""
    def records():
        return shard.sql(f"SELECT r.biz_tag, c.clock FROM id_segment_remote r {CENTRAL_ROW} ORDER BY 1",
                         dbname=db)

    def idle():
        before = records()
        time.sleep(2)
        return records() == before
    assert wait_for(idle, timeout=120)


def _seen(shard, db):
    (seen,), = shard.sql("SELECT max_id_seen FROM id_segment_remote WHERE biz_tag = 'orders'",
                         dbname=db)
    return seen


def test_a_central_server_restored_from_a_cold_copy_is_refused_until_raised_as_documented(
        make_cluster):
    """Both shards draw, the central server's data directory is copied
    while it is stopped, both draw more, and the copy is put back. Each
    shard has taken ranges above the restored row, so each refuses to
    refill — after a restart too (the mark is in id_segment_remote, not in
    memory) — with an error naming the central server; the README's
    recovery (the row set to the largest max_id_seen) lets both go on with
    no ID repeated."""
    central, central_db, shards = central_and_shards(make_cluster)
    drawn = []
    for shard, db in shards:
        drawn += draw_plain(shard, db, "orders", 5_000)
    copy = os.path.join(central.dir, "cold-copy")
    central.stop()
    subprocess.run(["cp", "-a", central.data, copy], check=True)
    central.start()
    for shard, db in shards:
        drawn += draw_plain(shard, db, "orders", 20_000)
    restored_at = central_max_id(central, central_db)
    _put_back(central, copy)
    assert central_max_id(central, central_db) < restored_at

    marks = []
    for number, (shard, db) in enumerate(shards):
        if number == 0:
            shard.restart()   # its cached ranges and in-memory marks are gone
        error = _draw_until_error(shard, db, drawn)
        # Refused either way: by the fence while the central server's WAL
        # is still behind where the shard saw it, by the shard's own mark
        # once it is not.
        assert isinstance(error, psycopg.errors.DataException), error
        seen = _seen(shard, db)
        if "went back for segment tag" in str(error):
            assert f"this server has already taken IDs up to {seen} from it" in str(error)
            assert f"this server's is {seen}" in error.diag.message_hint
        else:
            _refused_as_moved(error, "its WAL position went back to")
        assert "SELECT segment_central_accept()" in error.diag.message_hint
        marks.append(seen)
    assert_unique(drawn)
    assert max(marks) >= max(drawn)

    central.sql("UPDATE id_segment SET max_id = %s, version = version + 1 WHERE biz_tag = 'orders'",
                (max(marks),), dbname=central_db)
    central.sql("SELECT segment_central_accept()", dbname=central_db)
    for shard, db in shards:
        drawn += draw_plain(shard, db, "orders", 5_000)
    assert_unique(drawn)


def test_a_shard_that_sees_the_central_server_went_back_on_one_tag_refuses_every_tag_of_it(
        make_cluster):
    """Two tags on one central server, both attached on both shards. After
    a cold copy of the central server, shard 1 draws only 'orders' and
    shard 2 only 'b'; the copy is put back. Shard 1's 'orders' record shows
    the WAL went back, and its 'b' — whose own last refill came before the
    copy, and whose mark is below the restored row — is refused as well
    (on the code that fenced each tag by its own record alone, shard 1
    handed out 'b' IDs shard 2 had handed out: 12,010 repeats in an
    attack) — and stays refused once 'orders' is dropped there, by the
    record the drop keeps, also after 'orders' moved to another central
    server. The documented step, every tag's row raised, lets both go
    on."""
    central, central_db, shards = central_and_shards(make_cluster)
    central.sql("SELECT segment_create('b', step => 10)", dbname=central_db)
    for shard, db in shards:
        shard.sql("SELECT segment_attach('b', 'central')", dbname=db)
    (s1, db1), (s2, db2) = shards
    drawn = {"orders": [], "b": []}
    for shard, db in shards:
        drawn["b"] += draw_plain(shard, db, "b", 2_000)
    drawn["orders"] += draw_plain(s1, db1, "orders", 2_000)
    copy = _cold_copy_then_wal_it_lacks(central, central_db)
    drawn["orders"] += draw_plain(s1, db1, "orders", 20_000)
    drawn["b"] += draw_plain(s2, db2, "b", 20_000)
    _put_back(central, copy)

    error = _draw_until_error(s1, db1, drawn["orders"])
    assert isinstance(error, psycopg.errors.DataException), error
    error = _draw_until_error(s1, db1, drawn["b"], n=100, tag="b")
    assert isinstance(error, psycopg.errors.DataException), error
    assert ('central server "central" is not where this server left it for segment tag "b"'
            in str(error)), error
    assert "its WAL position went back to" in str(error), error
    assert "not only this one" in error.diag.message_hint, error.diag.message_hint
    # 'orders' dropped on shard 1: its record stays (id_segment_detached),
    # and still stops 'b'.
    s1.sql("SELECT segment_drop('orders')", dbname=db1)
    error = _draw_until_error(s1, db1, drawn["b"], n=100, tag="b")
    assert isinstance(error, psycopg.errors.DataException), error
    assert "its WAL position went back to" in str(error), error

    # 'orders' moved to another central server, as a DBA would: made there
    # above the mark, attached once segment_central_accept() ran there (the
    # record the drop kept refuses it before). The record of the first
    # central server stays, and still stops 'b' (on the code that deleted
    # it at the attach, 18,690 'b' IDs repeated in an attack).
    other = make_cluster()
    other.start()
    other_db = other.new_database()
    (mark,), = s1.sql("SELECT max(max_id_seen) FROM id_segment_detached WHERE biz_tag = 'orders'",
                      dbname=db1)
    other.sql("SELECT segment_create('orders', start => %s, step => 10)", (mark + 1,), dbname=other_db)
    _add_server(s1, db1, "elsewhere", other, other_db)
    with pytest.raises(psycopg.errors.DataException) as refused:
        s1.sql("SELECT segment_attach('orders', 'elsewhere')", dbname=db1)
    assert "it is another cluster now" in str(refused.value), refused.value
    assert "to another central server on purpose" in refused.value.diag.message_hint
    other.sql("SELECT segment_central_accept()", dbname=other_db)
    s1.sql("SELECT segment_attach('orders', 'elsewhere')", dbname=db1)
    moved = draw_plain(s1, db1, "orders", 1_000)
    assert min(moved) > mark
    error = _draw_until_error(s1, db1, drawn["b"], n=100, tag="b")
    assert isinstance(error, psycopg.errors.DataException), error
    assert "its WAL position went back to" in str(error), error
    for ids in drawn.values():
        assert_unique(ids)

    for tag in drawn:
        marks = [shard.sql("SELECT max(max_id_seen) FROM (SELECT max_id_seen FROM id_segment_remote "
                           "WHERE biz_tag = %s UNION ALL SELECT max_id_seen FROM id_segment_detached "
                           "WHERE biz_tag = %s) m", (tag, tag), dbname=db)[0][0] for shard, db in shards]
        central.sql("UPDATE id_segment SET max_id = greatest(max_id, %s), version = version + 1 "
                    "WHERE biz_tag = %s", (max(marks), tag), dbname=central_db)
    central.sql("SELECT segment_central_accept()", dbname=central_db)
    for shard, db in shards:
        for tag in drawn:
            if (shard, tag) == (s1, "orders"):   # from the other central server now
                moved += draw_plain(shard, db, tag, 3_000)
            else:
                drawn[tag] += draw_plain(shard, db, tag, 3_000)
    for ids in drawn.values():
        assert_unique(ids)
    assert_unique(moved)


@pytest.mark.parametrize("how", ["cold copy", "dump restored under its name"])
def test_another_server_name_for_the_same_central_server_gets_no_ID_past_the_fence(make_cluster, how):
    """Shard B reaches one central database through two postgres_fdw
    servers: 'orders' through 'central', 'b' through 'central_b'. The
    central server goes back (a cold copy put back, or the database
    restored from a dump under its name) after B refilled 'orders' but not
    'b', while shard A took 'b' ranges the restore lost. B's 'b' is refused
    although its own mark sees nothing wrong: after the cold copy, B's
    'orders' record of the same central table shows the move (an attack
    drew 11,070 repeats of 'b'). Then B drops 'orders', renames the server
    and attaches 'orders' through the new name: refused by the record the
    drop kept for that tag — after the dump, B's 'orders' mark is below the
    restored row and nothing else tells (10,640 repeats in an attack). The
    documented step lets everything go on."""
    central, central_db, [(a, a_db), (b, b_db)] = central_and_shards(make_cluster)
    central.sql("SELECT segment_create('b', step => 10)", dbname=central_db)
    a.sql("SELECT segment_attach('b', 'central')", dbname=a_db)
    _add_server(b, b_db, "central_b", central, central_db)
    b.sql("SELECT segment_attach('b', 'central_b')", dbname=b_db)
    drawn = {"orders": draw_plain(b, b_db, "orders", 2_000), "b": draw_plain(b, b_db, "b", 2_000)}
    _wait_until_idle(b, b_db)

    dump = os.path.join(central.dir, "central.dump")
    if how == "cold copy":
        copy = _cold_copy_then_wal_it_lacks(central, central_db)
    else:
        central.client("pg_dump", "-Fc", "-d", central_db, "-f", dump)
    # Ranges the restore loses: after a cold copy B takes 'orders' ones
    # (so that its record shows the WAL went back), after a dump A does
    # (B's 'orders' mark stays below the restored row); A takes 'b' ones.
    orders_taker = (b, b_db) if how == "cold copy" else (a, a_db)
    for tag, (shard, db) in (("orders", orders_taker), ("b", (a, a_db))):
        kept = central_max_id(central, central_db, tag)
        while central_max_id(central, central_db, tag) <= kept:
            drawn[tag] += draw_plain(shard, db, tag, 5_000)
    lost_up_to = central_max_id(central, central_db, "b")
    if how == "cold copy":
        _put_back(central, copy)
        moved = "its WAL position went back to"
    else:
        central.sql(f"DROP DATABASE {central_db} WITH (FORCE)")
        central.sql(f"CREATE DATABASE {central_db}")
        central.client("pg_restore", "-d", central_db, dump)
        moved = "its id_segment is another table now"
    assert central_max_id(central, central_db, "b") < lost_up_to

    error = _draw_until_error(b, b_db, drawn["orders"])
    _refused_as_moved(error, moved)
    error = _draw_until_error(b, b_db, drawn["b"], n=100, tag="b")
    assert isinstance(error, psycopg.errors.DataException), error
    assert ('central server "central_b" is not where this server left it for segment tag "b"'
            in str(error)), error
    assert moved in str(error), error
    (b_mark,), = b.sql("SELECT max_id_seen FROM id_segment_remote WHERE biz_tag = 'b'", dbname=b_db)
    assert b_mark < lost_up_to   # B's own mark of 'b' could not tell

    if how != "cold copy":   # B's 'orders' mark cannot tell either
        assert _seen(b, b_db) <= central_max_id(central, central_db)
    b.sql("SELECT segment_drop('orders')", dbname=b_db)
    b.sql("ALTER SERVER central RENAME TO central_eu", dbname=b_db)
    with pytest.raises(psycopg.errors.DataException) as refused:
        b.sql("SELECT segment_attach('orders', 'central_eu')", dbname=b_db)
    assert ('segment tag "orders" cannot be attached to server "central_eu": the central server is '
            f'not where this database left it: {moved}' in str(refused.value)), refused.value
    for ids in drawn.values():
        assert_unique(ids)

    for tag in drawn:
        marks = [shard.sql("SELECT max(max_id_seen) FROM (SELECT max_id_seen FROM id_segment_remote "
                           "WHERE biz_tag = %s UNION ALL SELECT max_id_seen FROM id_segment_detached "
                           "WHERE biz_tag = %s) m", (tag, tag), dbname=db)[0][0] for shard, db in ((a, a_db), (b, b_db))]
        central.sql("UPDATE id_segment SET max_id = greatest(max_id, %s), version = version + 1 "
                    "WHERE biz_tag = %s", (max(marks), tag), dbname=central_db)
    central.sql("SELECT segment_central_accept()", dbname=central_db)
    b.sql("SELECT segment_attach('orders', 'central_eu')", dbname=b_db)
    for shard, db in ((a, a_db), (b, b_db)):
        for tag in drawn:
            drawn[tag] += draw_plain(shard, db, tag, 3_000)
    for ids in drawn.values():
        assert_unique(ids)


def test_a_copy_of_the_central_server_used_as_a_second_one_is_refused_not_trusted(make_cluster):
    """A second central server made as a cold copy of the first (a
    snapshot started as a new instance): the same system identifier,
    database and table OIDs, at another address. One shard database takes
    'orders' from the first and 'b' (made after the copy) from the second.
    The shard cannot tell the second from the first restored, so once the
    second's WAL is ahead of the first's, 'orders' is refused as gone back
    — never trusted, and no ID repeats (docs: make a second central server
    with initdb instead)."""
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    drawn = {"orders": draw_plain(shard, db, "orders", 2_000), "b": []}
    second = make_cluster()
    central.stop()
    shutil.rmtree(second.data)
    subprocess.run(["cp", "-a", central.data, second.data], check=True)
    central.start()
    second.append_conf(f"unix_socket_directories = '{second.dir}'")
    second.start()
    second.sql("SELECT segment_create('b', step => 10)", dbname=central_db)
    # The second one's WAL well ahead of the first's.
    second.sql("CREATE TABLE wal_ahead AS SELECT g, repeat('x', 100) AS filler "
               "FROM generate_series(1, 200000) g", dbname=central_db)
    _add_server(shard, db, "second", second, central_db)
    shard.sql("SELECT segment_attach('b', 'second')", dbname=db)
    drawn["b"] += draw_plain(shard, db, "b", 3_000)
    _refused_as_moved(_draw_until_error(shard, db, drawn["orders"]), "its WAL position went back to")
    for ids in drawn.values():
        assert_unique(ids)


def test_the_records_of_a_dropped_server_still_fence_another_server_of_the_same_central(
        make_cluster):
    """Shard B takes 'orders' through server 'central' and 'b' through
    'central_b', both to one central database. After a cold copy B draws
    'orders' (its record shows the copy), A draws 'b'; the copy is put
    back, and B drops server 'central' with its foreign tables. The
    'orders' record stays in id_segment_remote and still refuses 'b' (an
    attack drew 1,140 repeats of 'b' once a dropped server's records were
    left out)."""
    central, central_db, [(a, a_db), (b, b_db)] = central_and_shards(make_cluster)
    central.sql("SELECT segment_create('b', step => 10)", dbname=central_db)
    a.sql("SELECT segment_attach('b', 'central')", dbname=a_db)
    _add_server(b, b_db, "central_b", central, central_db)
    b.sql("SELECT segment_attach('b', 'central_b')", dbname=b_db)
    drawn = draw_plain(b, b_db, "b", 2_000)
    _wait_until_idle(b, b_db)
    copy = _cold_copy_then_wal_it_lacks(central, central_db)
    draw_plain(b, b_db, "orders", 20_000)
    kept = central_max_id(central, central_db, "b")
    while central_max_id(central, central_db, "b") <= kept:
        drawn += draw_plain(a, a_db, "b", 5_000)
    _put_back(central, copy)

    b.sql("DROP SERVER central CASCADE", dbname=b_db)
    assert b.sql("SELECT count(*) FROM id_segment_remote WHERE biz_tag = 'orders'", dbname=b_db) == [(1,)]
    error = _draw_until_error(b, b_db, drawn, n=100, tag="b")
    assert isinstance(error, psycopg.errors.DataException), error
    assert "its WAL position went back to" in str(error), error
    assert_unique(drawn)


def _add_server(shard, db, name, central, central_db):
    """A second postgres_fdw server `name` on `shard` to `central_db`."""
    shard.sql(f"CREATE SERVER {name} FOREIGN DATA WRAPPER postgres_fdw OPTIONS "
              f"(host '{central.dir}', port '{central.port}', dbname '{central_db}', connect_timeout '2', "
              f"options '{PINNED}')", dbname=db)
    shard.sql(f"CREATE USER MAPPING FOR CURRENT_USER SERVER {name} OPTIONS (user 'postgres')", dbname=db)


def test_a_cluster_with_two_central_databases_put_back_is_refused_for_both(make_cluster):
    """One central cluster with two central databases: 'orders' in one,
    'y' in the other. Shard 1 draws 'y' before a cold copy of the cluster
    and 'orders' after it; shard 2 draws 'y' after it; the copy is put
    back. Shard 1's 'orders' record shows the cluster's WAL went back, and
    the WAL is the whole cluster's: 'y' is refused too (an attack drew
    1,020 repeats of 'y' when only records of the same database counted)."""
    central, central_db, [(s1, db1), (s2, db2)] = central_and_shards(make_cluster)
    other_db = central.new_database()
    central.sql("SELECT segment_create('y', step => 10)", dbname=other_db)
    for shard, db in ((s1, db1), (s2, db2)):
        _add_server(shard, db, "c2", central, other_db)
        shard.sql("SELECT segment_attach('y', 'c2')", dbname=db)
    drawn = draw_plain(s1, db1, "y", 2_000)
    _wait_until_idle(s1, db1)
    copy = _cold_copy_then_wal_it_lacks(central, central_db)
    draw_plain(s1, db1, "orders", 20_000)
    kept = central_max_id(central, other_db, "y")
    while central_max_id(central, other_db, "y") <= kept:
        drawn += draw_plain(s2, db2, "y", 5_000)
    _put_back(central, copy)

    error = _draw_until_error(s1, db1, drawn, n=100, tag="y")
    assert isinstance(error, psycopg.errors.DataException), error
    assert 'central server "c2" is not where this server left it for segment tag "y"' in str(error), error
    assert "its WAL position went back to" in str(error), error
    assert_unique(drawn)


def test_a_server_name_reused_for_another_central_server_is_not_taken_for_the_old_one(make_cluster):
    """The DBA renames server 'central' (and its foreign tables) to
    'p_old' and makes a new 'central' for another central cluster. The
    tag still attached through 'p_old' keeps its registered name
    'central', but its records are not the new server's: both go on, with
    no refusal (before, each refill from the old server renewed a record
    that refused the new one, and no accept lasted)."""
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    drawn = {"orders": draw_plain(shard, db, "orders", 2_000), "z": []}
    other = make_cluster()
    other.start()
    other_db = other.new_database()
    other.sql("SELECT segment_create('z', step => 10)", dbname=other_db)
    shard.sql("ALTER SERVER central RENAME TO p_old", dbname=db)
    for (relname,) in shard.sql("SELECT c.relname FROM pg_class c JOIN pg_foreign_table ft "
                                "ON ft.ftrelid = c.oid", dbname=db):
        shard.sql(f'ALTER FOREIGN TABLE "{relname}" RENAME TO "{relname.replace("@central", "@p_old")}"',
                  dbname=db)
    _add_server(shard, db, "central", other, other_db)
    shard.sql("SELECT segment_attach('z', 'central')", dbname=db)
    for _ in range(3):
        for tag in drawn:
            drawn[tag] += draw_plain(shard, db, tag, 3_000)
    for ids in drawn.values():
        assert_unique(ids)


def _cold_copy_then_wal_it_lacks(central, central_db):
    """A cold copy of the central server's data directory (returns its
    path), then WAL the copy will not have: put back, the copy stays
    behind every record the shards make from here on for the whole test
    (a restored copy that writes past a shard's record leaves that shard
    nothing to see: "What a shard cannot see")."""
    copy = os.path.join(central.dir, "cold-copy")
    central.stop()
    subprocess.run(["cp", "-a", central.data, copy], check=True)
    central.start()
    central.sql("CREATE TABLE wal_the_copy_lacks AS "
                "SELECT g, repeat('x', 100) AS filler FROM generate_series(1, 200000) g",
                dbname=central_db)
    return copy


def _put_back(central, copy):
    """Puts the cold copy `copy` back as the central server's data
    directory, and starts it."""
    central.stop()
    shutil.rmtree(central.data)
    subprocess.run(["cp", "-a", copy, central.data], check=True)
    central.start()


def _refused_as_moved(error, what):
    """`error` is the fence's refusal for 'orders', naming `what` moved."""
    assert isinstance(error, psycopg.errors.DataException), error
    assert ('central server "central" is not where this server left it for segment tag "orders"'
            in str(error)), error
    assert what in str(error), error
    assert "SELECT segment_central_accept()" in error.diag.message_hint
    assert "UPDATE id_segment SET max_id = " in error.diag.message_hint


@pytest.mark.parametrize("how", ["failover", "pitr"])
def test_a_central_server_that_lost_other_shards_ranges_is_refused_by_a_shard_that_took_none(
        make_cluster, how):
    """Shard B draws, then the central server's later history is lost in
    one of two ways: a failover to an asynchronous standby stopped before
    shard A's refills, or a point-in-time recovery of a base backup to a
    moment before them. B took nothing after that moment, so its own mark
    is below the central row and only the central server's timeline can
    tell B that A's ranges are gone: B refuses (so does A), naming the new
    timeline. The recovery — the row raised to the largest mark, then
    segment_central_accept() — lets both go on, with no ID repeated."""
    central, central_db, [(a, a_db), (b, b_db)] = central_and_shards(make_cluster)
    if how == "pitr":
        archive = os.path.join(central.dir, "archive")
        os.makedirs(archive)
        subprocess.run(["chown", "postgres:postgres", archive], check=True)
        central.append_conf("archive_mode = on", f"archive_command = 'cp %p {archive}/%f'")
        central.restart()
    drawn = draw_plain(a, a_db, "orders", 3_000) + draw_plain(b, b_db, "orders", 3_000)
    successor = make_cluster()
    shutil.rmtree(successor.data)
    if how == "failover":
        central.client("pg_basebackup", "-c", "fast", "-D", successor.data, "-R", "-X", "stream")
    else:
        central.client("pg_basebackup", "-c", "fast", "-D", successor.data, "-X", "stream")
    subprocess.run(["chown", "-R", "postgres:postgres", successor.data], check=True)
    successor.append_conf(f"unix_socket_directories = '{successor.dir}'")
    if how == "failover":
        successor.start()
        assert replayed(central, successor)
        successor.stop()   # misses everything from here on
    else:
        (target,), = central.sql("SELECT pg_current_wal_lsn()::text")
    # A draws until it has taken ranges the successor will not have (its
    # cache alone could serve the first draws).
    kept = central_max_id(central, central_db)
    while central_max_id(central, central_db) <= kept:
        drawn += draw_plain(a, a_db, "orders", 5_000)
    lost_up_to = central_max_id(central, central_db)
    if how == "pitr":
        assert archived(central)
        successor.append_conf(f"restore_command = 'cp {archive}/%f %p'",
                              f"recovery_target_lsn = '{target}'",
                              "recovery_target_action = 'promote'")
        open(os.path.join(successor.data, "recovery.signal"), "w").close()
    central.stop("immediate")
    successor.start()
    if how == "failover":
        promote(successor)
    else:
        assert wait_for(lambda: successor.sql("SELECT pg_is_in_recovery()") == [(False,)],
                        timeout=60)
    assert central_max_id(successor, central_db) < lost_up_to
    for shard, db in ((a, a_db), (b, b_db)):
        shard.sql(f"ALTER SERVER central OPTIONS (SET host '{successor.dir}')", dbname=db)

    (timeline,), = successor.sql("SELECT timeline FROM id_segment_origin", dbname=central_db)
    assert timeline == 2
    marks = []
    for shard, db in ((b, b_db), (a, a_db)):
        error = _draw_until_error(shard, db, drawn)
        _refused_as_moved(error, "it is on WAL timeline 2 now, was 1")
        marks.append(_seen(shard, db))
    assert_unique(drawn)
    assert marks[0] < lost_up_to <= marks[1]   # B's own mark could not tell

    # Raising the row alone is not enough: the shards cannot tell that it
    # was raised far enough.
    successor.sql("UPDATE id_segment SET max_id = %s, version = version + 1 WHERE biz_tag = 'orders'",
                  (max(marks),), dbname=central_db)
    _refused_as_moved(_draw_until_error(b, b_db, drawn, n=100), "it is on WAL timeline 2 now, was 1")
    successor.sql("SELECT segment_central_accept()", dbname=central_db)
    for shard, db in ((a, a_db), (b, b_db)):
        drawn += draw_plain(shard, db, "orders", 5_000)
    assert_unique(drawn)


def _copy_database(cluster, source, copy, attempts=50):
    """CREATE DATABASE `copy` TEMPLATE `source`: a copy that keeps the
    OIDs of every table. The template must have no other session, and the
    shards' workers reconnect to it, so their sessions are ended first."""
    for _ in range(attempts):
        cluster.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()", (source,))
        try:
            cluster.sql(f"CREATE DATABASE {copy} TEMPLATE {source}")
            return
        except psycopg.errors.ObjectInUse:
            time.sleep(0.1)
    raise AssertionError(f"{source} never had no session for {attempts} tries")


@pytest.mark.parametrize("how", ["dump restored under its name", "server pointed at a copy"])
def test_a_central_database_gone_back_in_the_same_cluster_is_refused_also_after_drop_and_attach(
        make_cluster, how):
    """The central database goes back while its cluster does not: it is
    dropped and restored from an older dump under its name, or the shards'
    server is pointed at an older copy of it (CREATE DATABASE ... TEMPLATE:
    the same table OIDs). Same system identifier, same timeline, WAL only
    forward — only the central database's and id_segment's OIDs tell.

    Shard B took nothing after the dump (its mark is below the row, and it
    refilled before the last segment_central_accept(), which the dump
    carries); shard A took ranges the dump lost. Both refuse, naming the
    other table (on the code without the OIDs B handed out A's IDs: 6,070
    repeats in an attack). B's segment_drop + segment_attach is refused
    too (the dropped tag keeps its record; the attack's 10,640 repeats).
    The documented step — the row raised, then segment_central_accept() —
    lets both go on, and B attach again, with no ID repeated."""
    central, central_db, [(a, a_db), (b, b_db)] = central_and_shards(make_cluster)
    drawn = draw_plain(b, b_db, "orders", 3_000) + draw_plain(a, a_db, "orders", 3_000)

    def b_recorded():
        (clock,), = b.sql(f"SELECT c.clock FROM id_segment_remote r {CENTRAL_ROW} WHERE r.biz_tag = 'orders'",
                          dbname=b_db)
        return clock
    # The accept below comes after B's last refill.
    _wait_until_idle(b, b_db)
    (accepted_at,), = central.sql("SELECT segment_central_accept()", dbname=central_db)
    assert accepted_at > b_recorded()
    b_mark_before_the_dump = _seen(b, b_db)

    if how == "dump restored under its name":
        dump = os.path.join(central.dir, "central.dump")
        central.client("pg_dump", "-Fc", "-d", central_db, "-f", dump)
    else:
        _copy_database(central, central_db, "older_copy")
    kept = central_max_id(central, central_db)
    while central_max_id(central, central_db) <= kept:
        drawn += draw_plain(a, a_db, "orders", 5_000)
    lost_up_to = central_max_id(central, central_db)
    if how == "dump restored under its name":
        central.sql(f"DROP DATABASE {central_db} WITH (FORCE)")
        central.sql(f"CREATE DATABASE {central_db}")
        central.client("pg_restore", "-d", central_db, dump)
        now_db = central_db
    else:
        for shard, db in ((a, a_db), (b, b_db)):
            shard.sql("ALTER SERVER central OPTIONS (SET dbname 'older_copy')", dbname=db)
        now_db = "older_copy"
    assert central_max_id(central, now_db) < lost_up_to
    # The dump (or copy) brought the acceptance back with it.
    assert central.sql("SELECT count(*) FROM id_segment_origin_accepted", dbname=now_db) == [(1,)]

    marks = []
    for shard, db in ((b, b_db), (a, a_db)):
        error = _draw_until_error(shard, db, drawn)
        _refused_as_moved(error, "its id_segment is another table now")
        marks.append(_seen(shard, db))
    assert_unique(drawn)
    assert marks[0] == b_mark_before_the_dump   # B took nothing since
    assert marks[0] < lost_up_to <= marks[1]   # B's own mark could not tell

    b.sql("SELECT segment_drop('orders')", dbname=b_db)
    with pytest.raises(psycopg.errors.DataException) as refused:
        b.sql("SELECT segment_attach('orders', 'central')", dbname=b_db)
    assert ('segment tag "orders" cannot be attached to server "central": the central server is '
            'not where this database left it: its id_segment is another table now'
            in str(refused.value)), refused.value
    assert "SELECT segment_central_accept()" in refused.value.diag.message_hint
    assert b.sql("SELECT count(*) FROM id_segment_remote", dbname=b_db) == [(0,)]
    (b_mark,), = b.sql("SELECT max_id_seen FROM id_segment_detached WHERE biz_tag = 'orders'",
                       dbname=b_db)
    assert b_mark == marks[0]

    central.sql("UPDATE id_segment SET max_id = greatest(max_id, %s), version = version + 1 "
                "WHERE biz_tag = 'orders'", (max(marks),), dbname=now_db)
    central.sql("SELECT segment_central_accept()", dbname=now_db)
    b.sql("SELECT segment_attach('orders', 'central')", dbname=b_db)
    for shard, db in ((a, a_db), (b, b_db)):
        drawn += draw_plain(shard, db, "orders", 5_000)
    assert_unique(drawn)


def _hand_made_central_and_shard(make_cluster):
    """A central server whose id_segment is made by hand (no pg_idgen, so
    no guard trigger: its row can be lowered or deleted), with 'orders' at
    0, step 10, attached to one shard."""
    central = make_cluster(preload=False)
    central.start()
    central_db = central.new_database(extension=False)
    hand_made_central_table(central, central_db)
    shard = make_cluster(conf=(*SHARD_CONF, "pg_idgen.machine_id = 1"))
    shard.start()
    db = shard.new_database()
    attach(shard, db, central, central_db)
    return central, central_db, shard, db


def _orders_row_on(make_cluster, where):
    """A shard drawing 'orders' (step 10), and the server and database of
    the row its ranges come from: its own (`local`) or a central one."""
    if where == "central":
        central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1, step=10)
        return shard, db, central, central_db
    shard = make_cluster(conf=SHARD_CONF)
    shard.start()
    db = shard.new_database()
    shard.sql("SELECT segment_create('orders', step => 10)", dbname=db)
    return shard, db, shard, db


def test_a_central_row_lowered_or_made_anew_is_refused_and_the_hints_name_a_safe_start(make_cluster):
    """A hand-made central table (no guard trigger) lowered by hand, then
    the row dropped and created again: the shard refuses both, after a
    restart too, and the missing row's hint names a start above every ID
    the shard took — never 1 — and the row's step."""
    central, central_db, shard, db = _hand_made_central_and_shard(make_cluster)
    drawn = draw_plain(shard, db, "orders", 20_000)
    central.sql("UPDATE id_segment SET max_id = 100 WHERE biz_tag = 'orders'", dbname=central_db)
    shard.restart()
    error = _draw_until_error(shard, db, drawn)
    assert isinstance(error, psycopg.errors.DataException), error
    assert "went back" in str(error)

    central.sql("DELETE FROM id_segment", dbname=central_db)
    shard.restart()
    error = _draw_until_error(shard, db, drawn)
    assert isinstance(error, psycopg.errors.UndefinedObject), error
    seen = _seen(shard, db)
    assert seen >= max(drawn)
    hint = error.diag.message_hint
    # The step, as the last refill read it: unknown since the restart.
    assert f"start => {seen + 1}, step => <the step it had>)" in hint, hint
    # Following the hint (a hand-made table: the row segment_create makes).
    central.sql("INSERT INTO id_segment (biz_tag, max_id, step) VALUES ('orders', %s, 10)",
                (seen,), dbname=central_db)
    drawn += draw_plain(shard, db, "orders", 2_000)
    assert_unique(drawn)


def test_a_tag_dropped_and_attached_again_keeps_its_mark(make_cluster):
    """The central row goes back below what the shard took; the shard
    refuses, and its user drops the tag and attaches it again (the
    missing-row hint offers segment_drop). The drop keeps the mark in
    id_segment_detached: the attach is refused (22000) while the central
    row is below it, and once raised the tag goes on above every ID it
    handed out — the mark restored, not reset to the central row."""
    central, central_db, shard, db = _hand_made_central_and_shard(make_cluster)
    drawn = draw_plain(shard, db, "orders", 20_000)
    central.sql("UPDATE id_segment SET max_id = 100 WHERE biz_tag = 'orders'", dbname=central_db)
    error = _draw_until_error(shard, db, drawn)
    assert isinstance(error, psycopg.errors.DataException), error
    mark = _seen(shard, db)
    assert mark >= max(drawn)

    shard.sql("SELECT segment_drop('orders')", dbname=db)
    assert shard.sql("SELECT max_id_seen FROM id_segment_detached WHERE biz_tag = 'orders'",
                     dbname=db) == [(mark,)]
    with pytest.raises(psycopg.errors.DataException) as refused:
        shard.sql("SELECT segment_attach('orders', 'central')", dbname=db)
    assert f"already handed out the tag's IDs up to {mark}" in str(refused.value), refused.value
    assert "UPDATE id_segment SET max_id = " in refused.value.diag.message_hint
    assert shard.sql("SELECT count(*) FROM id_segment_detached", dbname=db) == [(1,)]

    central.sql("UPDATE id_segment SET max_id = %s WHERE biz_tag = 'orders'", (mark,),
                dbname=central_db)
    shard.sql("SELECT segment_attach('orders', 'central')", dbname=db)
    assert _seen(shard, db) == mark
    assert shard.sql("SELECT count(*) FROM id_segment_detached", dbname=db) == [(0,)]
    drawn += draw_plain(shard, db, "orders", 2_000)
    assert_unique(drawn)


@pytest.mark.parametrize("detach", [
    ["SELECT segment_drop('orders')"],
    ["DELETE FROM id_segment_remote WHERE biz_tag = 'orders'"],
    ["ALTER TABLE id_segment_remote RENAME TO remote_old"],
    ["ALTER TABLE id_segment_remote RENAME TO remote_old",
     "CREATE TABLE id_segment_remote (LIKE remote_old INCLUDING ALL)"],
    ["CREATE SCHEMA aside", "ALTER TABLE id_segment_remote SET SCHEMA aside"],
], ids=["segment_drop", "delete", "renamed", "replaced", "set schema"])
def test_a_tag_created_in_the_transaction_that_detached_it_hands_out_nothing(make_cluster, detach):
    """Found by two attack reviews: BEGIN; detach an attached tag (or move
    id_segment_remote out of the way); create it
    locally above the central max_id; draw; ROLLBACK brought the attachment
    back, and the central row, below the IDs drawn, handed them out again.
    The draw is refused (55000); rolled back, the tag goes on from the
    central server above every ID it gave."""
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    before = draw_plain(shard, db, "orders", 50)
    top = central_max_id(central, central_db)
    with session(shard, db) as conn:
        conn.execute("BEGIN")
        for statement in detach:
            conn.execute(statement)
        conn.execute(f"SELECT segment_create('orders', start => {top + 1})")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            conn.execute("SELECT segment_nextval('orders')")
        assert "detached" in refused.value.diag.message_primary
        conn.execute("ROLLBACK")
    after = draw_plain(shard, db, "orders", 50)
    assert_unique(before + after)
    assert min(after) > max(before)
    assert shard.sql("SELECT count(*) FROM id_segment WHERE biz_tag = 'orders'", dbname=db) == [(0,)]


@pytest.mark.parametrize("where", ["local", "central"])
def test_a_trigger_capping_each_update_to_one_step_never_shares_an_id(make_cluster, where):
    """A BEFORE UPDATE trigger that lets max_id move one step at a time
    (the classic protocol's rule), while a classic client runs its own CAS
    on the row: the worker asks for many steps at once, gets one, and hands
    out only that one — above the max_id it read — and logs a WARNING that
    its ranges come back short (once while it lasts)."""
    shard, db, row_server, row_db = _orders_row_on(make_cluster, where)
    row_server.sql(
        "CREATE FUNCTION one_step() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN "
        "NEW.max_id := least(NEW.max_id, OLD.max_id + OLD.step); RETURN NEW; END$$", dbname=row_db)
    row_server.sql("CREATE TRIGGER one_step BEFORE UPDATE ON id_segment FOR EACH ROW "
                   "EXECUTE FUNCTION one_step()", dbname=row_db)
    stop = threading.Event()
    client_ranges = []

    def classic_client():
        with row_server.connect(row_db) as conn:
            while not stop.is_set():
                (version, step), = conn.execute(
                    "SELECT version, step FROM id_segment WHERE biz_tag = 'orders'").fetchall()
                won = conn.execute(
                    "UPDATE id_segment SET max_id = max_id + step, version = version + 1 "
                    "WHERE biz_tag = 'orders' AND version = %s RETURNING max_id", (version,)).fetchall()
                if won:
                    client_ranges.append(range(won[0][0] - step + 1, won[0][0] + 1))
                time.sleep(0.002)   # a client, not a storm: the worker must win too

    client = threading.Thread(target=classic_client)
    client.start()
    try:
        drawn = draw_plain(shard, db, "orders", 5_000)
    finally:
        stop.set()
        client.join()
    assert client_ranges
    assert_unique(drawn + [i for r in client_ranges for i in r])
    shortened = [line for line in shard.log().splitlines() if "its update raised max_id by" in line]
    assert shortened, "the shortened ranges were never logged"
    assert len(shortened) < 20, f"logged {len(shortened)} times, not once while it lasts"


@pytest.mark.parametrize("where", ["local", "central"])
def test_a_trigger_skipping_the_update_is_named_not_blamed_on_contention(make_cluster, where):
    """A BEFORE UPDATE trigger that returns NULL: the CAS matches nothing
    although nobody moved the row. The refill fails with 09000 naming a
    trigger on id_segment (it was reported as 100 lost version checks);
    once the trigger is gone the tag draws above every ID it handed out."""
    shard, db, row_server, row_db = _orders_row_on(make_cluster, where)
    drawn = draw_plain(shard, db, "orders", 100)
    row_server.sql(
        "CREATE FUNCTION skip_update() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN "
        "RETURN NULL; END$$", dbname=row_db)
    row_server.sql("CREATE TRIGGER skip_update BEFORE UPDATE ON id_segment FOR EACH ROW "
                   "EXECUTE FUNCTION skip_update()", dbname=row_db)
    error = _draw_until_error(shard, db, drawn, n=100)
    assert error.sqlstate == "09000", error
    assert "changed or skipped what the version-CAS wrote" in error.diag.message_hint, error
    row_server.sql("DROP TRIGGER skip_update ON id_segment", dbname=row_db)
    drawn += draw_plain(shard, db, "orders", 1000)
    assert_unique(drawn)


def test_a_locked_central_row_delays_no_local_tag(make_cluster):
    """A session on the central server holds the tag's row lock while the
    shard's callers want the remote tag and a local one. The central
    session's lock_timeout (pinned by the server's options) makes each
    remote try give up after 10 ms, as a local one does, so the worker
    keeps the local tag supplied: it never errs, while the remote tag's
    callers get 55P03 once their cache is gone."""
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    shard.sql("SELECT segment_create('local', step => 100)", dbname=db)
    assert draw_plain(shard, db, "orders", 10)
    remote_errors, stop = [], threading.Event()

    def want_the_remote_tag():
        with shard.connect(db) as conn:
            while not stop.is_set():
                try:
                    draw(conn, "orders", 100)
                except psycopg.Error as e:
                    remote_errors.append(e)

    with row_locked(central, central_db, "orders"):
        wanting = threading.Thread(target=want_the_remote_tag)
        wanting.start()
        try:
            assert wait_for(lambda: remote_errors, timeout=120), "the remote tag never ran dry"
            local = draw_plain(shard, db, "local", 200_000)
        finally:
            stop.set()
            wanting.join()
    assert_unique(local)
    assert all(isinstance(e, psycopg.errors.LockNotAvailable) for e in remote_errors), remote_errors[:3]


def test_attach_refuses_a_mapped_user_that_can_read_the_central_row_but_not_update_it(make_cluster):
    """A user mapping whose central user may SELECT id_segment but not
    UPDATE it: segment_attach fails at once with the central server's 42501
    (it reads the row FOR UPDATE) and leaves nothing behind, instead of an
    attached tag whose every refill fails; with UPDATE granted the same
    attach works."""
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    central.sql("SELECT segment_create('other')", dbname=central_db)
    schema = _central_schema(central, central_db)
    for statement in ["CREATE ROLE reader LOGIN",
                      f"GRANT USAGE ON SCHEMA {schema} TO reader",
                      f"GRANT SELECT ON {schema}.id_segment TO reader"]:
        central.sql(statement, dbname=central_db)
    shard.sql("CREATE SERVER ro FOREIGN DATA WRAPPER postgres_fdw OPTIONS "
              f"(host '{central.dir}', port '5432', dbname '{central_db}', connect_timeout '2', "
              f"options '{PINNED}')", dbname=db)
    shard.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER ro OPTIONS (user 'reader')", dbname=db)
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        shard.sql("SELECT segment_attach('other', 'ro')", dbname=db)
    assert "id_segment" in str(refused.value), refused.value
    assert shard.sql("SELECT count(*) FROM id_segment_remote WHERE biz_tag = 'other'",
                     dbname=db) == [(0,)]
    assert shard.sql("SELECT count(*) FROM pg_class WHERE relname LIKE '%id_segment@ro'",
                     dbname=db) == [(0,)]
    central.sql(f"GRANT UPDATE ON {schema}.id_segment TO reader", dbname=central_db)
    shard.sql("SELECT segment_attach('other', 'ro')", dbname=db)
    ids = draw_plain(shard, db, "other", 50)
    assert_unique(ids)
    assert len(ids) == 50


def test_a_tag_attached_and_drawn_in_one_transaction_is_told_to_commit_the_attach(make_cluster):
    """segment_nextval of a tag the same transaction attached: the worker
    cannot see the attachment yet, so the call fails with 55000 and a
    message about attaching (not one about a changed id_segment row); once
    the attach commits, the tag draws."""
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    central.sql("SELECT segment_create('other')", dbname=central_db)
    with shard.connect(db) as conn:
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            with conn.transaction():
                conn.execute("SELECT segment_attach('other', 'central')")
                conn.execute("SELECT segment_nextval('other')")
    assert 'segment tag "other" was attached to its central server by this transaction' in str(
        refused.value), refused.value
    assert "commit first" in refused.value.diag.message_hint
    shard.sql("SELECT segment_attach('other', 'central')", dbname=db)
    ids = draw_plain(shard, db, "other", 30)
    assert len(ids) == 30
    assert_unique(ids)


def test_a_shard_frozen_while_it_holds_the_central_row_stalls_the_others_only_seconds(make_cluster):
    """Shard A's worker stops between its CAS on the central row and its
    commit (a failpoint; its own remote_timeout set far off, so nothing on
    the shard ends the wait: from the central server's side, a link that
    froze while the row was locked). The central session's pinned
    idle_in_transaction_session_timeout (5 s) ends A's remote transaction,
    so shard B gets ranges again while A is still stopped; when A goes on,
    its commit fails and leaves a gap, never a repeat."""
    central, central_db, [(a, a_db), (b, b_db)] = central_and_shards(
        make_cluster, shards=2, conf=(*SHARD_CONF, "pg_idgen.remote_timeout = '10min'"))
    drawn = {"a": draw_plain(a, a_db, "orders", 100), "b": draw_plain(b, b_db, "orders", 100)}
    stop = threading.Event()
    # A's callers: errors while A's worker is stopped are expected.
    drawer = threading.Thread(target=_keep_drawing, args=(a, a_db, drawn["a"], stop))

    def start_drawer():
        if drawer.ident is None:
            drawer.start()

    # A's central session, idle in its transaction for over a second (B's
    # refills pass through that state for milliseconds).
    frozen = lambda: central.sql(  # noqa: E731
        "SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction' "
        "AND state_change < now() - interval '1 second' "
        "AND datname = current_database()", dbname=central_db)
    try:
        with paused(a, "worker-remote-before-commit", trigger=start_drawer):
            assert wait_for(frozen, timeout=60), "shard A's central session is not idle in it"
            [(frozen_pid,)] = frozen()
            # B draws until it has taken a range from the central row
            # (its cache alone could serve the first draws).
            row_at_freeze = central_max_id(central, central_db)
            after = []
            assert wait_for(lambda: _drew(b, b_db, after, n=2000)
                            and central_max_id(central, central_db) > row_at_freeze,
                            timeout=120, interval=0.5), (
                "shard B got no range while shard A's stopped session held the central row")
            drawn["b"] += after
            assert central.sql("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                               (frozen_pid,), dbname=central_db) == [(0,)]
            assert "idle-in-transaction timeout" in central.log()
        assert wait_for(lambda: _drew(a, a_db, drawn["a"], n=2000), timeout=120, interval=0.5)
    finally:
        stop.set()
        if drawer.ident is not None:
            drawer.join()
    assert_unique(drawn["a"] + drawn["b"])
    assert max(drawn["a"] + drawn["b"]) <= central_max_id(central, central_db)


# Moments of a remote refill at which the proxy freezes shard A's link:
# (the client frames to find, in order; how the link freezes there; whether
# the central session is then left in its transaction, holding the row).
FROZEN_LINK_MOMENTS = {
    "the row's FETCH sent, its reply held": ((b"FOR UPDATE", b"FETCH"), "request", True),
    "the row's FETCH answered, the UPDATE held": ((b"FOR UPDATE", b"FETCH"), "reply", True),
    "the COMMIT held": ((b"FOR UPDATE", b"COMMIT TRANSACTION"), "hold", True),
    "the COMMIT sent, its reply held": ((b"FOR UPDATE", b"COMMIT TRANSACTION"), "request", False),
}


@pytest.mark.parametrize("moment", FROZEN_LINK_MOMENTS)
def test_a_link_frozen_mid_refill_stalls_the_other_shard_seconds_and_repeats_nothing(
        make_cluster, moment):
    """Shard A reaches the central server (on 127.0.0.1) through a proxy that
    freezes the link at one moment of a refill — nothing passes either way
    afterwards, as on a network that stopped — while shard B reaches it
    directly. Where the central session is left in its transaction holding
    the row, its pinned idle_in_transaction_session_timeout ends it, so B
    gets ranges above everything granted before the freeze; once the link
    is cut, A draws again; no ID of either repeats."""
    patterns, how, holds_row = FROZEN_LINK_MOMENTS[moment]
    central, central_db, proxy = central_behind_a_proxy(make_cluster)
    shards = []
    for i, via in enumerate([proxy, None]):
        shard = make_cluster(conf=(*SHARD_CONF, f"pg_idgen.machine_id = {i + 1}"))
        shard.start()
        db = shard.new_database()
        attach(shard, db, central, central_db, via=via)
        shards.append((shard, db))
    [(a, a_db), (b, b_db)] = shards
    drawn = {"a": draw_plain(a, a_db, "orders", 100), "b": draw_plain(b, b_db, "orders", 100)}
    stop = threading.Event()
    # A's callers: errors while its link is frozen are expected.
    drawer = threading.Thread(target=_keep_drawing, args=(a, a_db, drawn["a"], stop))
    try:
        proxy.freeze_after(*patterns, moment=how)
        drawer.start()
        assert proxy.fired.wait(120), "shard A's refill never reached the moment"
        at_freeze = central_max_id(central, central_db)
        if holds_row:
            assert wait_for(lambda: "idle-in-transaction timeout" in central.log(), timeout=60), (
                "the central session of the frozen link was not ended")
        after = []
        assert wait_for(lambda: _drew(b, b_db, after) and max(after) > at_freeze,
                        timeout=120, interval=0.2), (
            "shard B got no range from the central server after A's link froze")
        drawn["b"] += after
        proxy.release()
        again = []
        assert wait_for(lambda: _drew(a, a_db, again) and max(again) > at_freeze,
                        timeout=120, interval=0.2), "shard A drew nothing after its link was cut"
        drawn["a"] += again
    finally:
        stop.set()
        proxy.close()
        if drawer.ident is not None:
            drawer.join()
    assert_unique(drawn["a"] + drawn["b"])
    assert max(drawn["a"] + drawn["b"]) <= central_max_id(central, central_db)


def _central_schema(central, central_db):
    (schema,), = central.sql(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'pg_idgen'", dbname=central_db)
    return schema


# How a central server breaks after the attach, how it is mended, the
# SQLSTATE the shard's callers get and a word of the hint's fix.
CENTRAL_BREAKS = {
    "update revoked": (
        "REVOKE UPDATE ON {schema}.id_segment FROM mapped",
        "GRANT UPDATE ON {schema}.id_segment TO mapped", "42501", "GRANT SELECT, UPDATE"),
    "read-only sessions": (
        "ALTER ROLE mapped SET default_transaction_read_only = on",
        "ALTER ROLE mapped RESET default_transaction_read_only", "25006", "primary"),
    "table renamed away": (
        "ALTER TABLE {schema}.id_segment RENAME TO id_segment_away",
        "ALTER TABLE {schema}.id_segment_away RENAME TO id_segment", "42P01", "table_name"),
}


@pytest.mark.parametrize("breaks", CENTRAL_BREAKS)
def test_a_refill_failing_on_the_central_server_names_it_and_the_fix(make_cluster, breaks):
    """The central server refuses the refill (for the mapped user: no
    UPDATE, a read-only session, no table): the shard's callers get the
    central server's SQLSTATE, a message naming the central server and its
    cause, and a hint with the fix for that cause; once mended, it draws."""
    broken, mended, sqlstate, fix = CENTRAL_BREAKS[breaks]
    central = make_cluster()
    central.start()
    central_db = central.new_database()
    central.sql("SELECT segment_create('orders', step => 10)", dbname=central_db)
    schema = _central_schema(central, central_db)
    for statement in ["CREATE ROLE mapped LOGIN", f"GRANT USAGE ON SCHEMA {schema} TO mapped",
                      f"GRANT SELECT, UPDATE ON {schema}.id_segment TO mapped"]:
        central.sql(statement, dbname=central_db)
    shard = make_cluster(conf=(*SHARD_CONF, "pg_idgen.machine_id = 1"))
    shard.start()
    db = shard.new_database()
    shard.sql("CREATE EXTENSION postgres_fdw", dbname=db)
    shard.sql(f"CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{central.dir}', "
              f"port '{central.port}', dbname '{central_db}', connect_timeout '2', options '{PINNED}')",
              dbname=db)
    shard.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER central OPTIONS (user 'mapped')", dbname=db)
    shard.sql("SELECT segment_attach('orders', 'central')", dbname=db)
    drawn = draw_plain(shard, db, "orders", 100)
    central.sql(broken.format(schema=schema), dbname=central_db)
    # A new central session sees the change (postgres_fdw keeps its own).
    central.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'mapped'",
                dbname=central_db)
    error = _draw_until_error(shard, db, drawn)
    assert error.sqlstate == sqlstate, (error.sqlstate, str(error))
    assert 'central server "central"' in str(error), str(error)
    assert fix in (error.diag.message_hint or ""), error.diag.message_hint
    central.sql(mended.format(schema=schema), dbname=central_db)
    central.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'mapped'",
                dbname=central_db)
    assert wait_for(lambda: _drew(shard, db, drawn), timeout=60, interval=0.5)
    assert_unique(drawn)


def test_a_frozen_central_server_delays_no_local_tag_and_no_other_central_servers_tags(make_cluster):
    """One shard database draws three tags: a local one, 'orders' from
    central server A (reached on 127.0.0.1 through a proxy) and 'parts'
    from central server B. A's link freezes mid-refill (the row's FETCH
    sent, nothing back) and every new connection to A is held: the refills
    of 'orders' hang until their timeout, and postgres_fdw's cancel then
    hangs too. Each central server has its own refill worker, so the local
    tag and 'parts' keep getting ranges — many refills' worth, no error —
    while 'orders' fails; once A's link is cut, 'orders' draws again."""
    central_a, a_db, proxy = central_behind_a_proxy(make_cluster)
    central_b = make_cluster()
    central_b.start()
    b_db = central_b.new_database()
    central_b.sql("SELECT segment_create('parts', step => 10)", dbname=b_db)
    shard = make_cluster(conf=(*SHARD_CONF, "pg_idgen.machine_id = 1"))
    shard.start()
    db = shard.new_database()
    shard.sql("SELECT segment_create('local', step => 10)", dbname=db)
    attach(shard, db, central_a, a_db, via=proxy)
    for statement in [
        f"CREATE SERVER central_b FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{central_b.dir}', "
        f"port '{central_b.port}', dbname '{b_db}', connect_timeout '2', options '{PINNED}')",
        "CREATE USER MAPPING FOR CURRENT_USER SERVER central_b OPTIONS (user 'postgres')",
        "SELECT segment_attach('parts', 'central_b')",
    ]:
        shard.sql(statement, dbname=db)
    drawn = {tag: draw_plain(shard, db, tag, 100) for tag in ("local", "orders", "parts")}
    orders_errors, stop = [], threading.Event()

    def want_orders():
        with shard.connect(db) as conn:
            while not stop.is_set():
                try:
                    drawn["orders"] += draw(conn, "orders", 100)
                except psycopg.Error as e:
                    orders_errors.append(e)
                    time.sleep(0.05)

    wanting = threading.Thread(target=want_orders)
    try:
        proxy.freeze_after(b"FOR UPDATE", b"FETCH", moment="request")
        wanting.start()
        assert proxy.fired.wait(120), "no refill of 'orders' reached the central row"
        proxy.dead_network()
        assert wait_for(lambda: orders_errors, timeout=120), "'orders' never ran dry"
        # At step 10 and with at most 20,000 IDs cached, each of these
        # takes many refills while A's worker is stuck.
        for tag in ("local", "parts"):
            drawn[tag] += draw_plain(shard, db, tag, 100_000)
        # Three workers serve the database: the local one and one per
        # central server.
        workers = shard.sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                            "'pg_idgen refill worker' AND datname = current_database()", dbname=db)
        assert workers == [(3,)], workers
        proxy.release()
        again = []
        assert wait_for(lambda: _drew(shard, db, again), timeout=120, interval=0.2), (
            "'orders' drew nothing after its link was cut")
        drawn["orders"] += again
    finally:
        stop.set()
        proxy.close()
        if wanting.ident is not None:
            wanting.join()
    for ids in drawn.values():
        assert_unique(ids)
    assert max(drawn["orders"]) <= central_max_id(central_a, a_db)


def test_a_hand_over_to_the_central_servers_worker_leaves_a_slot_reused_meanwhile_alone(make_cluster):
    """The database's local worker finds 'orders' attached and is stopped
    just before it hands the slot to the central server's worker
    (worker-before-publish). Meanwhile 'orders' is dropped and a local tag
    takes the freed slot. Released, the local worker sees the slot's
    generation changed and hands nothing over: the local tag is served by
    the local worker alone — no worker for the central server starts
    (before, the new tag was moved to the central server's lane and such a
    worker started, to hand it back)."""
    central, central_db, [(shard, db)] = central_and_shards(make_cluster, shards=1)
    fp = Failpoint(shard, "worker-before-publish")
    fp.arm("pause")
    try:
        orders, orders_result = in_thread(lambda: draw_plain(shard, db, "orders", 10))
        fp.wait_reached()
        shard.sql("SELECT segment_drop('orders')", dbname=db)
        assert "error" in joined(orders, orders_result)   # its tag is gone
        shard.sql("SELECT segment_create('local1', step => 10)", dbname=db)
        local, local_result = in_thread(lambda: draw_plain(shard, db, "local1", 100))
        # Its first call took the freed slot (the only slot used so far).
        assert wait_for(lambda: shard.sql(
            "SELECT 1 FROM segment_status() WHERE tag = 'local1' AND database = current_database()",
            dbname=db), timeout=REACH_TIMEOUT)
    finally:
        fp.release()
    result = joined(local, local_result)
    assert "error" not in result, result.get("error")
    assert_unique(result["value"] + draw_plain(shard, db, "local1", 1000))
    workers = shard.sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                        "'pg_idgen refill worker' AND datname = current_database()", dbname=db)
    assert workers == [(1,)], workers
