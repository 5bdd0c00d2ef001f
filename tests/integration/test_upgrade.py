"""Updating in place from releases 0.1.0, 0.2.0 and 0.3.0, on their real
libraries.

The fixtures build 0.1.0 (commit 8c4bf95), 0.2.0 (commit 0a85b84) and 0.3.0
(commit c70e8f9) from this repository's history for the PostgreSQL under
test, with the same target directory as the suite so that they reuse the
compiled dependencies (about 30 s each). A test then starts a server on an
old library, creates the extension at its version and draws IDs; puts the
current library in place the way a package manager does (a new file
renamed over the old one: a running server keeps the file it mapped);
restarts; draws with the old SQL; runs ALTER EXTENSION pg_idgen UPDATE
(0.1.0 -> 0.2.0 -> 0.3.0 -> 0.4.0) and draws again. Nothing may repeat —
also after a crash and a failover to a standby on the updated 0.2.0
server. A pg_dump taken under 0.1.0 restores under the current version and
continues above every ID drawn before. A 0.3.0 shard's records of its
central server still fence it, before and after the update.

tests/lib/releases.py records the releases and builds them."""

import os
import shutil
import subprocess
import tempfile

import psycopg
import pytest

from cluster import PG_BIN
from releases import build_release, pg_config_value
from helpers import (BURST_LAYOUT, PINNED, assert_increasing, assert_unique, draw, draw_plain, draw_snowflakes,
                     promote, replayed, standby_of)

CURRENT = "0.4.0"
PG_CONFIG = os.path.join(PG_BIN, "pg_config")
# Settings that tell which library runs: each the first release that
# registers it.
SETTING_SINCE = {"0.2.0": "pg_idgen.allow_max_id_decrease", "0.3.0": "pg_idgen.snowflake_database",
                 CURRENT: "pg_idgen.max_tags_per_database"}


def pg_config(flag):
    return pg_config_value(PG_CONFIG, flag)


class Libraries:
    """Puts an old release's or the current library at $libdir/pg_idgen.so,
    each time by renaming a complete copy over it (never writing in place)."""

    def __init__(self, old_library, work):
        self.installed = os.path.join(pg_config("--pkglibdir"), "pg_idgen.so")
        self.old = old_library
        self.new = os.path.join(work, "pg_idgen.so.current")
        shutil.copy2(self.installed, self.new)

    def _put(self, library):
        staged = self.installed + ".upgrade-test"
        shutil.copy2(library, staged)
        os.rename(staged, self.installed)

    def use_old(self):
        self._put(self.old)

    def use_new(self):
        self._put(self.new)


def release_libraries(version):
    work = tempfile.mkdtemp(prefix=f"pg_idgen-{version}.")
    try:
        old_library, old_script = build_release(version, work, PG_CONFIG)
        shutil.copy(old_script, os.path.join(pg_config("--sharedir"), "extension",
                                             f"pg_idgen--{version}.sql"))
        libs = Libraries(old_library, work)
        try:
            yield libs
        finally:
            libs.use_new()
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def libraries():
    yield from release_libraries("0.1.0")


@pytest.fixture(scope="module")
def libraries_0_2_0():
    yield from release_libraries("0.2.0")


@pytest.fixture(scope="module")
def libraries_0_3_0():
    yield from release_libraries("0.3.0")


def running_library(cluster, db="postgres"):
    """Which library the server runs: "0.1.0", "0.2.0" or "current"."""
    version = "0.1.0"
    for since, setting in SETTING_SINCE.items():
        (value,), = cluster.sql(f"SELECT current_setting('{setting}', true)", dbname=db)
        if value is not None:
            version = since
    return "current" if version == CURRENT else version


def extversion(cluster, db):
    return cluster.sql("SELECT extversion FROM pg_extension WHERE extname = 'pg_idgen'",
                       dbname=db)


def test_a_0_1_0_database_updates_in_place_and_repeats_nothing(make_cluster, libraries):
    libraries.use_old()
    c = make_cluster()
    c.start()
    libraries.use_new()  # the package manager runs while 0.1.0 serves
    db = c.new_database(extension=False)
    c.sql("CREATE EXTENSION pg_idgen VERSION '0.1.0'", dbname=db)
    assert running_library(c, db) == "0.1.0"
    c.sql("SELECT segment_create('orders', step => 10)", dbname=db)
    ids = draw_plain(c, db, "orders", 500)
    flakes = draw_snowflakes(c, 200, dbname=db)
    # A crash on 0.1.0, then the current library: it reads what 0.1.0 left
    # (its snowflake state file, the id_segment rows) and the old SQL keeps
    # working until ALTER EXTENSION runs.
    c.restart(mode="immediate")
    assert running_library(c, db) == "current"
    assert extversion(c, db) == [("0.1.0",)]
    ids += draw_plain(c, db, "orders", 500)
    # 0.1.0's segment_drop (one argument) works on this library: it failed
    # with XX000 (found by an attack review).
    c.sql("SELECT segment_create('short_lived')", dbname=db)
    c.sql("SELECT segment_drop('short_lived')", dbname=db)
    assert c.sql("SELECT count(*) FROM id_segment WHERE biz_tag = 'short_lived'", dbname=db) == [(0,)]
    # 0.1.0's segment_status declares its columns in another order than
    # this library fills them (a float8 where it declares text crashed the
    # server, found by an attack review): refused until the update.
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
        c.sql("SELECT * FROM segment_status", dbname=db)
    assert refused.value.diag.message_hint == "Run ALTER EXTENSION pg_idgen UPDATE in this database."
    # Snowflake IDs wait for the WAL-logged mark, which needs pg_idgen in
    # pg_idgen.snowflake_database (postgres): the error names the command.
    with pytest.raises(Exception) as refused:
        draw_snowflakes(c, 1, dbname=db)
    assert getattr(refused.value, "sqlstate", None) == "55000"
    assert "CREATE EXTENSION pg_idgen" in str(refused.value)
    c.sql("CREATE EXTENSION pg_idgen")
    flakes += draw_snowflakes(c, 200, dbname=db)
    c.sql("ALTER EXTENSION pg_idgen UPDATE TO '0.2.0'", dbname=db)
    assert extversion(c, db) == [("0.2.0",)]
    # 0.2.0's columns are a prefix of this library's: it reads.
    assert ("orders",) in c.sql("SELECT tag FROM segment_status", dbname=db)
    ids += draw_plain(c, db, "orders", 500)
    flakes += draw_snowflakes(c, 200, dbname=db)
    c.sql("ALTER EXTENSION pg_idgen UPDATE TO '0.3.0'", dbname=db)
    assert extversion(c, db) == [("0.3.0",)]
    ids += draw_plain(c, db, "orders", 500)
    c.sql("ALTER EXTENSION pg_idgen UPDATE", dbname=db)
    assert extversion(c, db) == [(CURRENT,)]
    # What 0.2.0 added is there: max_id can no longer move back.
    with pytest.raises(Exception) as refused:
        c.sql("UPDATE id_segment SET max_id = 0 WHERE biz_tag = 'orders'", dbname=db)
    assert getattr(refused.value, "sqlstate", None) == "23514"
    ids += draw_plain(c, db, "orders", 500)
    flakes += draw_snowflakes(c, 200, dbname=db)
    assert len(ids) == 2500
    assert_unique(ids)
    assert_unique(flakes)
    assert_increasing(flakes)
    # The updated database has exactly what a fresh one has.
    fresh = c.new_database()
    objects = ("SELECT pg_describe_object(classid, objid, 0) FROM pg_depend "
               "WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idgen') "
               "AND deptype = 'e' ORDER BY 1")
    assert c.sql(objects, dbname=db) == c.sql(objects, dbname=fresh)
    # ... with the same signatures, result types, volatility and privileges.
    functions = ("SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), "
                 "p.provolatile, p.proparallel, p.proisstrict, p.prosrc, coalesce(p.proacl::text, '') "
                 "FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass "
                 "WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idgen') "
                 "AND d.deptype = 'e' ORDER BY 1, 2")
    assert c.sql(functions, dbname=db) == c.sql(functions, dbname=fresh)
    views = ("SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), "
             "coalesce(c.relacl::text, '') FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
             "WHERE c.relname IN ('segment_status', 'snowflake_status') AND a.attnum > 0 ORDER BY 1, a.attnum")
    assert c.sql(views, dbname=db) == c.sql(views, dbname=fresh)
    triggers = "SELECT tgname, pg_get_triggerdef(oid), tgenabled FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1"
    assert c.sql(triggers, dbname=db) == c.sql(triggers, dbname=fresh)
    # ... and the same descriptions (COMMENTs), columns included.
    comments = ("SELECT pg_describe_object(classoid, objoid, objsubid), description FROM pg_description "
                "WHERE description LIKE 'pg_idgen%' OR objoid IN (SELECT objid FROM pg_depend WHERE "
                "refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idgen') AND deptype = 'e') "
                "ORDER BY 1")
    assert c.sql(comments, dbname=db) == c.sql(comments, dbname=fresh)


def test_a_dump_taken_under_0_1_0_restores_under_the_current_version_above_every_id(
        make_cluster, libraries, tmp_path):
    libraries.use_old()
    c = make_cluster()
    c.start()
    libraries.use_new()
    db = c.new_database(extension=False)
    c.sql("CREATE EXTENSION pg_idgen VERSION '0.1.0'", dbname=db)
    assert running_library(c, db) == "0.1.0"
    c.sql("SELECT segment_create('orders', step => 100)", dbname=db)
    c.sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'), v int)",
          dbname=db)
    c.sql("INSERT INTO orders (v) SELECT g FROM generate_series(1, 1000) g", dbname=db)
    before = draw_plain(c, db, "orders", 300)
    dump = tmp_path / "dump.sql"
    c.client("pg_dump", "-d", db, "-f", str(dump))
    c.restart()
    assert running_library(c, db) == "current"
    restored = c.new_database(extension=False)
    c.client("psql", "-v", "ON_ERROR_STOP=1", "-q", "-d", restored, "-f", str(dump))
    assert extversion(c, restored) == [(CURRENT,)]
    (top,), = c.sql("SELECT max(id) FROM orders", dbname=db)
    after = [r[0] for r in c.sql(
        "INSERT INTO orders (v) SELECT g FROM generate_series(1, 500) g RETURNING id",
        dbname=restored)]
    assert min(after) > max(before + [top])
    assert_unique(after)


# Bursts put snowflake time well ahead of the clock (helpers.BURST_LAYOUT).
NARROW = [*BURST_LAYOUT, "wal_level = replica"]


def burst(server, kind):
    with server.connect() as conn:
        conn.execute(f"INSERT INTO events SELECT snowflake_nextval(), '{kind}' FROM generate_series(1, 200000)")
        conn.execute("INSERT INTO orders SELECT FROM generate_series(1, 20000)")


def test_a_0_2_0_server_updates_in_place_then_crashes_and_fails_over_repeating_nothing(
        make_cluster, libraries_0_2_0):
    libraries_0_2_0.use_old()
    primary = make_cluster(conf=NARROW)
    primary.start()
    libraries_0_2_0.use_new()  # the package manager runs while 0.2.0 serves
    assert running_library(primary) == "0.2.0"
    primary.sql("CREATE EXTENSION pg_idgen VERSION '0.2.0'")
    primary.sql("CREATE TABLE events (id bigint PRIMARY KEY, kind text NOT NULL)")
    primary.sql("SELECT segment_create('orders', step => 100)")
    primary.sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'))")
    burst(primary, "0.2.0")
    # A crash on 0.2.0 (its state file is all that records the mark), and
    # the new library at the restart.
    primary.stop("immediate")
    primary.start()
    assert running_library(primary) == "current"
    assert extversion(primary, "postgres") == [("0.2.0",)]
    old_events = [r[0] for r in primary.sql("SELECT id FROM events")]
    old_orders = [r[0] for r in primary.sql("SELECT id FROM orders")]
    # Segment IDs go on with the old SQL; snowflake IDs wait for the update,
    # and the error says which command to run.
    primary.sql("INSERT INTO orders SELECT FROM generate_series(1, 1000)")
    with pytest.raises(Exception) as refused:
        primary.sql("SELECT snowflake_nextval()")
    assert getattr(refused.value, "sqlstate", None) == "55000"
    assert "ALTER EXTENSION pg_idgen UPDATE" in str(refused.value)
    primary.sql("ALTER EXTENSION pg_idgen UPDATE")
    assert extversion(primary, "postgres") == [(CURRENT,)]
    burst(primary, "0.3.0")
    # Above every ID of 0.2.0: the state file it left was read.
    new_events = [r[0] for r in primary.sql("SELECT id FROM events WHERE kind = '0.3.0'")]
    assert min(new_events) > max(old_events)
    # Then a standby, more bursts, a crash of the primary and a failover.
    standby = standby_of(primary, make_cluster, conf=NARROW)
    burst(primary, "before failover")
    assert replayed(primary, standby)
    primary.stop("immediate")
    promote(standby)
    replicated_events = [r[0] for r in standby.sql("SELECT id FROM events")]
    replicated_orders = [r[0] for r in standby.sql("SELECT id FROM orders")]
    burst(standby, "after failover")  # a repeat fails the primary key
    after = [r[0] for r in standby.sql("SELECT id FROM events WHERE kind = 'after failover'")]
    after_orders = sorted(set(r[0] for r in standby.sql("SELECT id FROM orders")) - set(replicated_orders))
    assert min(after) > max(replicated_events)
    assert min(after_orders) > max(replicated_orders)
    # The standby's table holds every event (0.2.0's included): none twice.
    assert set(old_events) <= set(replicated_events)
    assert_unique(replicated_events + after)
    assert max(old_orders) < min(after_orders)


def test_a_tag_attached_under_0_2_0_is_fenced_once_both_servers_update(make_cluster, libraries_0_2_0):
    """A shard and its central server on 0.2.0, a tag attached there. The
    shard updates first: its update gives the attachment the foreign table
    over the central server's id_segment_origin, whose refills then fail
    with 55000 naming the view until the central server updates too; then
    each refill records where the central server is. No ID repeats."""
    libraries_0_2_0.use_old()
    central = make_cluster()
    central.start()
    shard = make_cluster(conf=("pg_idgen.machine_id = 1", "pg_idgen.refill_timeout = '2s'",
                               "pg_idgen.remote_cache_ahead = '1s'", "pg_idgen.max_ids_ahead = 2000"))
    shard.start()
    libraries_0_2_0.use_new()
    assert running_library(central) == running_library(shard) == "0.2.0"
    central_db = central.new_database(extension=False)
    central.sql("CREATE EXTENSION pg_idgen VERSION '0.2.0'", dbname=central_db)
    for tag in ("orders", "parts", "more"):
        central.sql(f"SELECT segment_create('{tag}', step => 10)", dbname=central_db)
    db = shard.new_database(extension=False)
    # A second server whose origin foreign table's name is cut and hashed.
    long_name = "central_" + "x" * 50
    server_options = (f"OPTIONS (host '{central.dir}', port '{central.port}', dbname '{central_db}', "
                      f"connect_timeout '2', options '{PINNED}')")
    for statement in [
        "CREATE EXTENSION pg_idgen VERSION '0.2.0'",
        "CREATE EXTENSION postgres_fdw",
        f"CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw {server_options}",
        "CREATE USER MAPPING FOR CURRENT_USER SERVER central OPTIONS (user 'postgres')",
        "SELECT segment_attach('orders', 'central')",
        f"CREATE SERVER {long_name} FOREIGN DATA WRAPPER postgres_fdw {server_options}",
        f"CREATE USER MAPPING FOR CURRENT_USER SERVER {long_name} OPTIONS (user 'postgres')",
        f"SELECT segment_attach('parts', '{long_name}')",
    ]:
        shard.sql(statement, dbname=db)
    ids = draw_plain(shard, db, "orders", 1000)
    central.restart()
    shard.restart()
    assert running_library(central) == running_library(shard) == "current"
    ids += draw_plain(shard, db, "orders", 1000)   # the 0.2.0 SQL on both

    shard.sql("ALTER EXTENSION pg_idgen UPDATE", dbname=db)
    (origin,), = shard.sql("SELECT origin_table::text FROM id_segment_remote WHERE biz_tag = 'orders'",
                           dbname=db)
    assert origin == '"public.id_segment_origin@central"'
    # Made as segment_attach makes it: not a member of the extension, so
    # pg_dump dumps it (and the origin_table value that names it).
    assert shard.sql("SELECT count(*) FROM pg_depend WHERE objid = %s::regclass AND deptype = 'e'",
                     (origin,), dbname=db) == [(0,)]
    dumped = shard.client("pg_dump", "-d", db).stdout
    assert 'CREATE FOREIGN TABLE public."public.id_segment_origin@central"' in dumped
    with shard.connect(db) as conn:
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            for _ in range(100):
                ids += [r[0] for r in conn.execute(
                    "SELECT segment_nextval('orders') FROM generate_series(1, 500)")]
    assert 'server "central" has no view id_segment_origin' in str(refused.value)
    assert "ALTER EXTENSION pg_idgen UPDATE" in refused.value.diag.message_hint

    central.sql("ALTER EXTENSION pg_idgen UPDATE", dbname=central_db)
    ids += draw_plain(shard, db, "orders", 5000)
    # The update named the long server's origin table as segment_attach
    # does: attaching another tag through it reuses it.
    shard.sql(f"SELECT segment_attach('more', '{long_name}')", dbname=db)
    origins = shard.sql("SELECT count(*) FROM pg_foreign_table ft JOIN pg_foreign_server s "
                        "ON s.oid = ft.ftserver WHERE s.srvname = %s "
                        "AND 'table_name=id_segment_origin' = ANY (ft.ftoptions)", (long_name,), dbname=db)
    assert origins == [(1,)], origins
    for tag in ("parts", "more"):
        assert_unique(draw_plain(shard, db, tag, 1000))
    (identifier,), = central.sql("SELECT system_identifier FROM pg_control_system()")
    assert shard.sql("SELECT DISTINCT central_system_identifier, central_timeline FROM id_segment_remote",
                     dbname=db) == [(identifier, 1)]
    assert_unique(ids)


def _refused(cluster, db, tag, drawn):
    """Draws `tag` into `drawn` until a draw fails; returns the error."""
    with cluster.connect(db) as conn:
        while len(drawn) < 200_000:
            try:
                drawn += draw(conn, tag, 500)
            except psycopg.Error as e:
                return e
    raise AssertionError(f"no error after {len(drawn)} IDs")


def test_a_0_3_0_shards_records_are_carried_over_and_still_fence(make_cluster, libraries_0_3_0):
    """A shard on 0.3.0 takes 'orders' and 'b' from a central server and
    drops 'b'; a cold copy of the central server is taken, the shard draws
    more 'orders' (its record now past the copy), and the copy is put back.
    On the current library the shard refuses 'orders' as gone back, first
    under 0.3.0's SQL (each tag's row kept a copy of the position) and then
    after the update, which carries the records into id_segment_central (a
    row per central table and timeline, the latest position of its tags)
    and leaves each tag its central identity only. The attach of 'b' is
    refused too; the documented step lets both go on, with no repeat."""
    libraries_0_3_0.use_old()
    central = make_cluster()
    central.start()
    shard = make_cluster(conf=("pg_idgen.machine_id = 1", "pg_idgen.refill_timeout = '2s'",
                               "pg_idgen.remote_cache_ahead = '1s'", "pg_idgen.max_ids_ahead = 2000"))
    shard.start()
    libraries_0_3_0.use_new()
    assert running_library(central) == running_library(shard) == "0.3.0"
    central_db = central.new_database(extension=False)
    central.sql("CREATE EXTENSION pg_idgen VERSION '0.3.0'", dbname=central_db)
    for tag in ("orders", "b"):
        central.sql(f"SELECT segment_create('{tag}', step => 10)", dbname=central_db)
    db = shard.new_database(extension=False)
    for statement in [
        "CREATE EXTENSION pg_idgen VERSION '0.3.0'",
        "CREATE EXTENSION postgres_fdw",
        f"CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{central.dir}', "
        f"port '{central.port}', dbname '{central_db}', connect_timeout '2', options '{PINNED}')",
        "CREATE USER MAPPING FOR CURRENT_USER SERVER central OPTIONS (user 'postgres')",
        "SELECT segment_attach('orders', 'central')",
        "SELECT segment_attach('b', 'central')",
    ]:
        shard.sql(statement, dbname=db)
    drawn = {"orders": draw_plain(shard, db, "orders", 1000), "b": draw_plain(shard, db, "b", 1000)}
    shard.sql("SELECT segment_drop('b')", dbname=db)
    copy = os.path.join(central.dir, "cold-copy")
    central.stop()
    subprocess.run(["cp", "-a", central.data, copy], check=True)
    central.start()
    central.sql("CREATE TABLE wal_the_copy_lacks AS SELECT g, repeat('x', 100) AS filler "
                "FROM generate_series(1, 200000) g", dbname=central_db)
    drawn["orders"] += draw_plain(shard, db, "orders", 20_000)
    identity = ("central_system_identifier, central_database_oid, central_table_oid, "
                "central_timeline")
    records = shard.sql(f"SELECT {identity}, central_wal_lsn, central_clock FROM id_segment_remote "
                        f"UNION ALL SELECT {identity}, central_wal_lsn, central_clock FROM id_segment_detached "
                        "ORDER BY central_clock DESC", dbname=db)
    assert len(records) == 2 and len({r[:4] for r in records}) == 1, records
    tags = (f"SELECT 'remote', biz_tag, {identity} FROM id_segment_remote "
            f"UNION ALL SELECT 'detached', biz_tag, {identity} FROM id_segment_detached ORDER BY 1, 2")
    kept = shard.sql(tags, dbname=db)

    central.stop()
    shutil.rmtree(central.data)
    subprocess.run(["cp", "-a", copy, central.data], check=True)
    central.start()
    shard.restart()
    assert running_library(shard) == "current"
    # 0.3.0's SQL: the positions the tags kept are read as they are.
    error = _refused(shard, db, "orders", drawn["orders"])
    assert isinstance(error, psycopg.errors.DataException), error
    assert "its WAL position went back to" in str(error), error

    shard.sql("ALTER EXTENSION pg_idgen UPDATE", dbname=db)
    assert extversion(shard, db) == [(CURRENT,)]
    assert shard.sql("SELECT system_identifier, database_oid, table_oid, timeline, wal_lsn, clock "
                     "FROM id_segment_central", dbname=db) == [records[0]]
    assert shard.sql(tags, dbname=db) == kept
    assert shard.sql("SELECT count(*) FROM pg_attribute WHERE attrelid IN "
                     "('id_segment_remote'::regclass, 'id_segment_detached'::regclass) "
                     "AND attname IN ('central_wal_lsn', 'central_clock') AND NOT attisdropped",
                     dbname=db) == [(0,)]
    error = _refused(shard, db, "orders", drawn["orders"])
    assert isinstance(error, psycopg.errors.DataException), error
    assert "its WAL position went back to" in str(error), error
    with pytest.raises(psycopg.errors.DataException) as refused:
        shard.sql("SELECT segment_attach('b', 'central')", dbname=db)
    assert "its WAL position went back to" in str(refused.value), refused.value

    for tag in drawn:
        (mark,), = shard.sql("SELECT max(max_id_seen) FROM (SELECT max_id_seen FROM id_segment_remote "
                             "WHERE biz_tag = %s UNION ALL SELECT max_id_seen FROM id_segment_detached "
                             "WHERE biz_tag = %s) m", (tag, tag), dbname=db)
        central.sql("UPDATE id_segment SET max_id = greatest(max_id, %s), version = version + 1 "
                    "WHERE biz_tag = %s", (mark, tag), dbname=central_db)
    central.sql("SELECT segment_central_accept()", dbname=central_db)
    shard.sql("SELECT segment_attach('b', 'central')", dbname=db)
    for tag in drawn:
        drawn[tag] += draw_plain(shard, db, tag, 2000)
        assert_unique(drawn[tag])


def test_the_0_4_0_update_keeps_grants_and_refuses_first_when_a_view_needs_what_it_remakes(
        make_cluster, libraries_0_3_0):
    """0.4.0 makes segment_create, segment_status and snowflake_status anew
    (their shapes changed). A DBA's grants on them survive the update; a
    view of the database's own over segment_status stops it before it
    changes anything, naming the view, and the hint's steps work."""
    libraries_0_3_0.use_old()
    c = make_cluster()
    c.start()
    libraries_0_3_0.use_new()
    db = c.new_database(extension=False)
    for statement in [
        "CREATE EXTENSION pg_idgen VERSION '0.3.0'",
        "CREATE ROLE tag_admin", "CREATE ROLE dashboard",
        "GRANT EXECUTE ON FUNCTION segment_create(text, bigint, int) TO tag_admin WITH GRANT OPTION",
        "GRANT SELECT ON segment_status TO dashboard",
        "GRANT EXECUTE ON FUNCTION snowflake_status() TO dashboard",
        "CREATE VIEW tags_low AS SELECT tag, remaining_in_range FROM segment_status",
        # On the view's row type, not on the view itself.
        "CREATE FUNCTION my_status() RETURNS SETOF segment_status LANGUAGE sql AS 'SELECT * FROM segment_status'",
        "CREATE ROLE carol",
        "GRANT SELECT (tag, remaining_in_range) ON segment_status TO carol",
        # A grant by a role holding the grant option, not by the owner.
        "CREATE ROLE ops_lead", "CREATE ROLE ops",
        "GRANT SELECT ON snowflake_status TO ops_lead WITH GRANT OPTION",
        "SET ROLE ops_lead; GRANT SELECT ON snowflake_status TO ops; RESET ROLE",
    ]:
        c.sql(statement, dbname=db)
    c.restart()  # the current library, which the 0.4.0 functions need
    assert running_library(c, db) == "current"
    # Until the update, the database's 0.3.0 declaration of segment_create
    # (three arguments) works on this library: it failed with XX000.
    c.sql("SELECT segment_create('made_before_update', 5, 10)", dbname=db)
    c.sql("SELECT segment_create('made_before_update_too')", dbname=db)
    assert c.sql("SELECT segment_nextval('made_before_update')", dbname=db) == [(5,)]
    with pytest.raises(psycopg.Error) as exists:
        c.sql("SELECT segment_create('made_before_update')", dbname=db)
    assert exists.value.sqlstate == "42710", exists.value
    with pytest.raises(psycopg.errors.DependentObjectsStillExist) as refused:
        c.sql("ALTER EXTENSION pg_idgen UPDATE", dbname=db)
    assert "view tags_low" in str(refused.value), refused.value
    assert "function my_status()" in str(refused.value), refused.value
    assert "drop it, run ALTER EXTENSION pg_idgen UPDATE again" in refused.value.diag.message_hint
    assert extversion(c, db) == [("0.3.0",)]
    (definition,), = c.sql("SELECT pg_get_viewdef('tags_low')", dbname=db)
    c.sql("DROP VIEW tags_low", dbname=db)
    c.sql("DROP FUNCTION my_status()", dbname=db)
    c.sql("ALTER EXTENSION pg_idgen UPDATE", dbname=db)
    assert extversion(c, db) == [(CURRENT,)]
    assert c.sql("SELECT segment_nextval('made_before_update'), segment_nextval('made_before_update_too')",
                 dbname=db) == [(6, 1)]
    c.sql(f"CREATE VIEW tags_low AS {definition}", dbname=db)
    assert c.sql(
        "SELECT has_function_privilege('tag_admin', 'segment_create(text, bigint, int, boolean)', "
        "'EXECUTE WITH GRANT OPTION'), "
        "has_table_privilege('dashboard', 'segment_status', 'SELECT'), "
        "has_function_privilege('dashboard', 'snowflake_status()', 'EXECUTE'), "
        "has_table_privilege('dashboard', 'snowflake_status', 'SELECT'), "
        "has_function_privilege('dashboard', 'segment_create(text, bigint, int, boolean)', 'EXECUTE')",
        dbname=db) == [(True, True, True, False, False)]
    assert c.sql(
        "SELECT has_column_privilege('carol', 'segment_status', 'remaining_in_range', 'SELECT'), "
        "has_column_privilege('carol', 'segment_status', 'next_id', 'SELECT')",
        dbname=db) == [(True, False)]
    # Each grant by its grantor: revoking ops_lead's option takes ops's away.
    assert c.sql("SELECT a.grantor::regrole::text FROM pg_class c, aclexplode(c.relacl) a "
                 "WHERE c.oid = 'snowflake_status'::regclass AND a.grantee = 'ops'::regrole",
                 dbname=db) == [("ops_lead",)]
    c.sql("REVOKE GRANT OPTION FOR SELECT ON snowflake_status FROM ops_lead CASCADE", dbname=db)
    assert c.sql("SELECT has_table_privilege('ops', 'snowflake_status', 'SELECT'), "
                 "has_table_privilege('ops_lead', 'snowflake_status', 'SELECT')", dbname=db) == [(False, True)]
    # The update leaves nothing of its own behind.
    assert c.sql("SELECT count(*) FROM pg_class WHERE relname = 'pg_idgen_update_grants'",
                 dbname=db) == [(0,)]
