"""Day-two operations work the first time (issue 38, items 6, 7 and 9):
every hint followed literally is safe and works, the status views tell
the truth, a tag can be renamed with its defaults, and dropping the
extension where the snowflake mark lives is told. Each on a real server;
the hints are run as written."""

import subprocess

import psycopg
import pytest
from psycopg import errors

from cluster import Cluster
from helpers import promote, row_locked, standby_of, wait_for


def test_after_a_forced_drop_the_hint_recreates_the_tag_above_the_column(lc):
    """Item 6: segment_create('coupons') alone, which the old hint said,
    restarts at 1 and the next INSERT fails with 23505. The hint now names
    the column, and run as written the INSERTs go on."""
    db = lc.new_database()
    lc.sql("SELECT segment_create('coupons', step => 10)", dbname=db)
    lc.sql("CREATE TABLE coupon (id bigint PRIMARY KEY DEFAULT segment_nextval('coupons'), code text)", dbname=db)
    lc.sql("INSERT INTO coupon (code) SELECT 'c' FROM generate_series(1, 100)", dbname=db)
    lc.sql("SELECT segment_drop('coupons', force => true)", dbname=db)
    with pytest.raises(errors.UndefinedObject) as missing:
        lc.sql("INSERT INTO coupon (code) VALUES ('x')", dbname=db)
    hint = missing.value.diag.message_hint
    assert "column \"id\" of table coupon" in str(missing.value), missing.value
    statement = hint[hint.index("SELECT segment_create"):hint.index("; —") + 1]
    lc.sql(statement, dbname=db)
    lc.sql("INSERT INTO coupon (code) SELECT 'after' FROM generate_series(1, 100)", dbname=db)
    assert lc.sql("SELECT count(*), count(DISTINCT id) FROM coupon", dbname=db) == [(200, 200)]


def test_a_tag_renamed_keeps_its_position_and_its_defaults(lc):
    db = lc.new_database()
    lc.sql("SELECT segment_create('old_name', step => 10)", dbname=db)
    lc.sql("CREATE DOMAIN order_id AS bigint DEFAULT segment_nextval('old_name')", dbname=db)
    lc.sql("CREATE TABLE a (id bigint PRIMARY KEY DEFAULT segment_nextval('old_name'))", dbname=db)
    lc.sql("CREATE TABLE b (id order_id PRIMARY KEY)", dbname=db)
    before = [r[0] for r in lc.sql("INSERT INTO a SELECT FROM generate_series(1, 50) RETURNING id", dbname=db)]
    before += [r[0] for r in lc.sql("INSERT INTO b SELECT FROM generate_series(1, 50) RETURNING id", dbname=db)]
    lc.sql("SELECT segment_rename('old_name', 'new_name')", dbname=db)
    after = [r[0] for r in lc.sql("INSERT INTO a SELECT FROM generate_series(1, 50) RETURNING id", dbname=db)]
    after += [r[0] for r in lc.sql("INSERT INTO b SELECT FROM generate_series(1, 50) RETURNING id", dbname=db)]
    assert min(after) > max(before)
    assert lc.sql("SELECT biz_tag FROM id_segment", dbname=db) == [("new_name",)]
    defaults = [r[0] for r in lc.sql(
        "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'a'::regclass "
        "UNION ALL SELECT typdefault FROM pg_type WHERE typname = 'order_id'", dbname=db)]
    assert all("new_name" in d for d in defaults), defaults
    # segment_drop sees the renamed tag's users.
    with pytest.raises(errors.DependentObjectsStillExist):
        lc.sql("SELECT segment_drop('new_name')", dbname=db)
    lc.sql("SELECT segment_create('taken')", dbname=db)
    with pytest.raises(errors.DuplicateObject):
        lc.sql("SELECT segment_rename('new_name', 'taken')", dbname=db)
    with pytest.raises(errors.UndefinedObject):
        lc.sql("SELECT segment_rename('nowhere', 'else')", dbname=db)


def test_functions_and_grants_missing_say_what_to_run(lc):
    """Item 6: a database without the extension, a role without the
    grant: PostgreSQL's own errors, with a hint that names the fix."""
    lc.sql("CREATE EXTENSION IF NOT EXISTS pg_idgen")
    bare = lc.new_database(extension=False)
    with pytest.raises(errors.UndefinedFunction) as missing:
        lc.sql("SELECT segment_nextval('orders')", dbname=bare)
    assert "CREATE EXTENSION pg_idgen" in missing.value.diag.message_hint
    db = lc.new_database()
    lc.sql("DROP ROLE IF EXISTS idgen_clerk; CREATE ROLE idgen_clerk LOGIN")
    with lc.connect(db) as conn:
        conn.execute("SET ROLE idgen_clerk")
        for function, grant in (("segment_nextval('orders')", "segment_nextval(text)"),
                                ("snowflake_nextval()", "snowflake_nextval()")):
            with pytest.raises(errors.InsufficientPrivilege) as denied:
                conn.execute(f"SELECT {function}")
            assert f"GRANT EXECUTE ON FUNCTION {grant}" in denied.value.diag.message_hint


def test_create_extension_without_the_preload_warns(make_cluster):
    c = make_cluster(preload=False)
    c.start()
    with c.connect() as conn:
        notices = []
        conn.add_notice_handler(lambda n: notices.append((n.severity, n.message_primary, n.message_hint)))
        conn.execute("CREATE EXTENSION pg_idgen")
    warned = [n for n in notices if n[0] == "WARNING" and "shared_preload_libraries" in n[1]]
    assert warned and "restart" in warned[0][2], notices


def test_on_a_hot_standby_every_function_says_connect_to_the_primary(make_cluster):
    primary = make_cluster()
    primary.start()
    primary.sql("CREATE EXTENSION pg_idgen")
    primary.sql("SELECT segment_create('orders')")
    standby = standby_of(primary, make_cluster)
    assert wait_for(lambda: standby.sql("SELECT count(*) FROM id_segment") == [(1,)], timeout=30)
    for call in ("segment_nextval('orders')", "snowflake_nextval()", "segment_nextval('orders', 3)",
                 "segment_reserve('orders', 3)"):
        with pytest.raises(psycopg.Error) as refused:
            standby.sql(f"SELECT * FROM {call}")
        assert refused.value.sqlstate == "25006", (call, refused.value)
        assert "connect to it" in refused.value.diag.message_hint, (call, refused.value.diag.message_hint)


def test_the_status_views_tell_the_truth(make_cluster):
    """Item 7: an unset machine id shows as NULL with why; a refill worker
    that cannot start shows in last_error and refill_failures; last_error
    clears once refills succeed; step shows the configured step."""
    c = make_cluster(conf=["pg_idgen.machine_id = ''", "max_worker_processes = 3",
                           "pg_idgen.refill_timeout = '1s'"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    (machine, problem), = c.sql("SELECT machine_id, machine_problem FROM snowflake_status "
                                "WHERE generator = 'default'")
    assert machine is None and "pg_idgen.machine_id is not set" in problem
    c.sql("SELECT segment_create('orders', step => 10)")
    # max_worker_processes = 3: the snowflake keeper, the logical
    # replication launcher and one more worker.
    # Take the one more with a second database's refill worker.
    other = c.new_database()
    c.sql("SELECT segment_create('elsewhere', step => 10)", dbname=other)
    c.sql("SELECT segment_nextval('elsewhere')", dbname=other)
    with pytest.raises(psycopg.Error) as refused:
        c.sql("SELECT segment_nextval('orders')")
    assert refused.value.sqlstate == "53400", refused.value
    (failures, last_error), = c.sql("SELECT refill_failures, last_error FROM segment_status "
                                    "WHERE tag = 'orders' AND database = current_database()")
    assert failures >= 1 and "could not start the pg_idgen refill worker" in last_error
    c.append_conf("max_worker_processes = 8")
    c.restart()
    c.sql("SELECT segment_nextval('orders')")
    with row_locked(c, "postgres", "orders"):
        with pytest.raises(psycopg.Error):
            c.sql("SELECT segment_nextval('orders') FROM generate_series(1, 100)")
        assert wait_for(lambda: c.sql("SELECT last_error IS NOT NULL FROM segment_status "
                                      "WHERE tag = 'orders' AND database = current_database()") == [(True,)])
    c.sql("SELECT segment_nextval('orders') FROM generate_series(1, 100)")
    assert wait_for(lambda: c.sql("SELECT last_error FROM segment_status "
                                  "WHERE tag = 'orders' AND database = current_database()") == [(None,)])
    c.sql("UPDATE id_segment SET step = 500 WHERE biz_tag = 'orders'")
    assert c.sql("SELECT step FROM segment_status WHERE tag = 'orders' "
                 "AND database = current_database()") == [(500,)]


def test_dropping_the_extension_where_the_snowflake_mark_lives_is_told(make_cluster):
    """Item 9: DROP EXTENSION in pg_idgen.snowflake_database stops snowflake
    IDs on the whole server; after IDs were issued, a WARNING says so and
    how to come back."""
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT snowflake_nextval()")
    with c.connect() as conn:
        notices = []
        conn.add_notice_handler(lambda n: notices.append((n.severity, n.message_primary, n.message_hint)))
        conn.execute("DROP EXTENSION pg_idgen")
    told = [n for n in notices if n[0] == "WARNING" and "snowflake high-water mark" in n[1]]
    assert told and "CREATE EXTENSION pg_idgen" in told[0][2], notices
    # Elsewhere, nothing to tell.
    db = c.new_database()
    with c.connect(db) as conn:
        notices.clear()
        conn.execute("DROP EXTENSION pg_idgen")
    assert not [n for n in notices if "snowflake" in n[1]], notices
