"""Updating in place: a database created under release 0.1.0 (its install
script, frozen in tests/upgrade/ from tag v0.1.0) keeps working on the new
library, updates with ALTER EXTENSION pg_idgen UPDATE, and repeats no ID;
a pg_dump taken under 0.1.0 restores under 0.2.0 and continues above it."""

import os
import shutil
import subprocess

import pytest

from conftest import assert_increasing, assert_unique

HERE = os.path.dirname(__file__)
FROZEN = os.path.join(HERE, "..", "upgrade", "pg_idgen--0.1.0.sql")
PG_CONFIG = os.path.join(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"), "pg_config")


@pytest.fixture(scope="module")
def old_script():
    """Puts the 0.1.0 install script beside the installed extension."""
    sharedir = subprocess.run([PG_CONFIG, "--sharedir"], check=True, capture_output=True,
                              text=True).stdout.strip()
    shutil.copy(FROZEN, os.path.join(sharedir, "extension"))


def draw(cluster, db, tag, n):
    return [r[0] for r in cluster.sql(
        f"SELECT segment_nextval('{tag}') FROM generate_series(1, {n})", dbname=db)]


def snowflakes(cluster, db, n):
    return [r[0] for r in cluster.sql(
        f"SELECT snowflake_nextval() FROM generate_series(1, {n})", dbname=db)]


def test_a_0_1_0_database_updates_in_place_and_repeats_nothing(make_cluster, old_script):
    c = make_cluster()
    c.start()
    db = c.new_database(extension=False)
    c.sql("CREATE EXTENSION pg_idgen VERSION '0.1.0'", dbname=db)
    c.sql("SELECT segment_create('orders', step => 10)", dbname=db)
    ids = draw(c, db, "orders", 500)
    flakes = snowflakes(c, db, 200)
    # The old SQL keeps working on the new library across a restart.
    c.restart()
    assert c.sql("SELECT extversion FROM pg_extension WHERE extname = 'pg_idgen'",
                 dbname=db) == [("0.1.0",)]
    ids += draw(c, db, "orders", 500)
    flakes += snowflakes(c, db, 200)
    c.sql("ALTER EXTENSION pg_idgen UPDATE", dbname=db)
    assert c.sql("SELECT extversion FROM pg_extension WHERE extname = 'pg_idgen'",
                 dbname=db) == [("0.2.0",)]
    # What 0.2.0 added is there: max_id can no longer move back.
    with pytest.raises(Exception) as refused:
        c.sql("UPDATE id_segment SET max_id = 0 WHERE biz_tag = 'orders'", dbname=db)
    assert getattr(refused.value, "sqlstate", None) == "23514"
    ids += draw(c, db, "orders", 500)
    flakes += snowflakes(c, db, 200)
    assert len(ids) == 1500
    assert_unique(ids)
    assert_unique(flakes)
    assert_increasing(flakes)
    # The updated database has exactly what a fresh 0.2.0 one has.
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
    triggers = "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1"
    assert c.sql(triggers, dbname=db) == c.sql(triggers, dbname=fresh)


def test_a_dump_taken_under_0_1_0_restores_under_0_2_0_above_every_id(make_cluster, old_script,
                                                                      tmp_path):
    c = make_cluster()
    c.start()
    db = c.new_database(extension=False)
    c.sql("CREATE EXTENSION pg_idgen VERSION '0.1.0'", dbname=db)
    c.sql("SELECT segment_create('orders', step => 100)", dbname=db)
    c.sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'), v int)",
          dbname=db)
    c.sql("INSERT INTO orders (v) SELECT g FROM generate_series(1, 1000) g", dbname=db)
    before = draw(c, db, "orders", 300)
    dump = tmp_path / "dump.sql"
    c.client("pg_dump", "-d", db, "-f", str(dump))
    restored = c.new_database(extension=False)
    c.client("psql", "-v", "ON_ERROR_STOP=1", "-q", "-d", restored, "-f", str(dump))
    assert c.sql("SELECT extversion FROM pg_extension WHERE extname = 'pg_idgen'",
                 dbname=restored) == [("0.2.0",)]
    (top,), = c.sql("SELECT max(id) FROM orders", dbname=db)
    after = [r[0] for r in c.sql(
        "INSERT INTO orders (v) SELECT g FROM generate_series(1, 500) g RETURNING id",
        dbname=restored)]
    assert min(after) > max(before + [top])
    assert_unique(after)
