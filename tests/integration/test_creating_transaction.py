"""Segment tags used in the transaction that creates them (issue 9, point
12, and what two adversarial reviews of the fixes found): a migration that
creates a tag and draws from it, committed or rolled back; savepoints,
exception blocks, two-phase commit, drops and deleted rows in the creating
transaction; a commit that cannot raise max_id; and a transaction that
holds its tag's row (updated, locked or dropped) and then needs a refill.

What was test_lifecycle.py is this file, test_max_id_guard.py and
test_ddl_and_workers.py.
"""

import time

import psycopg
import pytest
from psycopg import errors

from helpers import assert_increasing, assert_unique, draw, draw_new, row_range, session


# ---------------------------------------------------------------------------
# Point 12: the same transaction.

MIGRATION = ["SELECT segment_create('orders')",
             "CREATE TABLE orders (id bigint DEFAULT segment_nextval('orders'), v int)",
             "INSERT INTO orders (v) SELECT generate_series(1, 5000)"]


def test_a_tag_created_in_the_migrating_transaction_works_there(lc):
    """Point 12. BEGIN; segment_create('orders'); CREATE TABLE orders (id
    DEFAULT segment_nextval('orders')); INSERT 5,000 rows; COMMIT works, as it
    would with a sequence; the IDs are unique, from the row, and inserts
    after the commit continue above them."""
    c = lc
    db = c.new_database()
    with session(c, db, autocommit=False) as conn:
        for statement in MIGRATION:
            conn.execute(statement)
        conn.commit()
    first = [r[0] for r in c.sql("SELECT id FROM orders ORDER BY v", dbname=db)]
    assert len(first) == 5000
    assert_unique(first)
    assert_increasing(first)
    assert min(first) >= 1
    c.sql("INSERT INTO orders (v) SELECT generate_series(5001, 7000)", dbname=db)
    later = [r[0] for r in c.sql("SELECT id FROM orders WHERE v > 5000 ORDER BY v", dbname=db)]
    assert_unique(later)
    assert min(later) > max(first)
    assert max(later) <= row_range(c, db, "orders")[0]


def test_a_tag_created_in_a_rolled_back_transaction_never_existed(lc):
    """Point 12. The same migration rolled back: the tag does not exist
    (42704, no row), and created again it starts where segment_create says,
    not from ranges cached for the rolled-back row."""
    c = lc
    db = c.new_database()
    with session(c, db, autocommit=False) as conn:
        for statement in MIGRATION:
            conn.execute(statement)
        conn.rollback()
    with pytest.raises(errors.UndefinedObject):
        c.sql("SELECT segment_nextval('orders')", dbname=db)
    assert c.sql("SELECT count(*) FROM id_segment", dbname=db) == [(0,)]
    c.sql("SELECT segment_create('orders', start => 1)", dbname=db)
    assert c.sql("SELECT segment_nextval('orders')", dbname=db) == [(1,)]


def test_savepoints_in_the_creating_transaction_never_repeat_an_id(lc):
    """Point 12. Inside the transaction that creates the tag (in a released
    savepoint), draws inside savepoints that are rolled back, released, and
    an error inside one: no ID twice, neither in the transaction nor after
    its commit, and each session's IDs increase."""
    c = lc
    db = c.new_database()
    ids = []
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("SAVEPOINT c")
        conn.execute("SELECT segment_create('sp', step => 10)")
        conn.execute("RELEASE c")
        ids += draw(conn, "sp", 25)
        conn.execute("SAVEPOINT s1")
        ids += draw(conn, "sp", 25)
        conn.execute("ROLLBACK TO s1")
        ids += draw(conn, "sp", 25)
        conn.execute("SAVEPOINT s2")
        ids += draw(conn, "sp", 25)
        conn.execute("RELEASE s2")
        conn.execute("SAVEPOINT s3")
        ids += [r[0] for r in conn.execute("SELECT * FROM segment_nextval('sp', 25)")]
        with pytest.raises(errors.DivisionByZero):
            conn.execute("SELECT segment_nextval('sp') / 0")
        conn.execute("ROLLBACK TO s3")
        ids += draw(conn, "sp", 25)
        conn.execute("COMMIT")
        ids += draw(conn, "sp", 25)
    assert_unique(ids)
    assert_increasing(ids)
    other = draw_new(c, db, "sp", 50)
    assert_unique(ids + other)
    assert max(ids + other) <= row_range(c, db, "sp")[0]


@pytest.mark.parametrize("hold", [
    "UPDATE id_segment SET step = 7 WHERE biz_tag = 'x'",
    "SELECT * FROM id_segment WHERE biz_tag = 'x' FOR UPDATE",
    "SELECT * FROM id_segment WHERE biz_tag = 'x' FOR SHARE",
    "SELECT segment_drop('x')",
], ids=["update_step", "for_update", "for_share", "segment_drop"])
def test_a_tag_whose_row_this_transaction_holds_fails_at_once(lc, hold):
    """Point 12. A transaction that updated, locked or deleted a tag's row
    and then needs a refill of that tag (its cached IDs used up) would wait
    on its own row lock, which the deadlock detector cannot see. It must fail
    at once (well under refill_timeout = 10s) with 55000 or 55P03 and a hint
    to commit first (42704 is also fine after segment_drop)."""
    c = lc
    db = c.new_database()
    c.sql("SELECT segment_create('x', step => 10)", dbname=db)
    with session(c, db, refill_timeout="10s") as conn:
        drawn = draw(conn, "x", 3)
        conn.execute("BEGIN")
        conn.execute(hold)
        started = time.monotonic()
        try:
            drawn += draw(conn, "x", 200)
        except psycopg.Error as e:
            error = e
        else:
            pytest.fail("200 IDs drawn at step 10 while this transaction holds the tag's row")
        elapsed = time.monotonic() - started
        conn.execute("ROLLBACK")
        drawn += draw(conn, "x", 30)
    assert elapsed < 5, f"waited {elapsed:.1f} s (refill_timeout 10 s) on its own transaction's row lock: {error}"
    allowed = {"55000", "55P03"} | ({"42704"} if "segment_drop" in hold else set())
    assert error.sqlstate in allowed, f"SQLSTATE {error.sqlstate}: {error}"
    if error.sqlstate != "42704":
        hint = error.diag.message_hint or ""
        assert "commit" in hint.lower(), f"the hint does not say to commit first: {hint!r}"
    assert_unique(drawn)
    assert_increasing(drawn)


# ---------------------------------------------------------------------------
# Found by adversarial review of the fixes: savepoints, exception blocks and
# two-phase commit in the creating transaction.

def test_a_rolled_back_savepoint_never_takes_back_the_creating_transactions_ids(lc):
    """BEGIN; create; SAVEPOINT; draw; ROLLBACK TO; draw; COMMIT: the IDs
    drawn inside the rolled-back savepoint stay used, in the transaction
    and after its commit (max_id ends above every one of them)."""
    c = lc
    db = c.new_database()
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT segment_create('s', step => 10)")
        conn.execute("SAVEPOINT p")
        inside = draw(conn, "s", 1)
        conn.execute("ROLLBACK TO p")
        after = draw(conn, "s", 2)
        conn.execute("COMMIT")
    later = draw_new(c, db, "s", 3)
    ids = inside + after + later
    assert_unique(ids)
    assert_increasing(ids)
    assert row_range(c, db, "s")[0] >= max(ids)


def test_an_exception_block_never_takes_back_the_creating_transactions_ids(lc):
    c = lc
    db = c.new_database()
    c.sql("CREATE TABLE seen (id bigint)", dbname=db)
    c.sql("""DO $$ BEGIN
               PERFORM segment_create('y', step => 10);
               BEGIN
                 INSERT INTO seen SELECT segment_nextval('y');
                 RAISE EXCEPTION 'undo the block';
               EXCEPTION WHEN others THEN NULL;
               END;
               INSERT INTO seen SELECT segment_nextval('y');
             END $$""", dbname=db)
    # The block's INSERT was undone, but the ID it drew (1) is used: the
    # one inserted after it is 2, and later draws come above both.
    assert c.sql("SELECT id FROM seen", dbname=db) == [(2,)]
    later = draw_new(c, db, "y", 4)
    assert min(later) > 2


def test_a_creation_rolled_back_to_a_savepoint_forgets_the_tag(lc):
    c = lc
    db = c.new_database()
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("SAVEPOINT p")
        conn.execute("SELECT segment_create('x', step => 10)")
        draw(conn, "x", 3)
        conn.execute("ROLLBACK TO p")
        with pytest.raises(errors.UndefinedObject):
            draw(conn, "x", 1)
        conn.execute("ROLLBACK")


def test_a_creation_rolled_back_never_takes_another_sessions_tag(lc):
    """T1 creates 'q' and rolls that back to a savepoint; T2 creates 'q' and
    commits; T1 draws 'q': from T2's committed row through the worker, never
    from a range T1 takes in its own transaction and rolls back, and T1
    holds no lock on T2's row."""
    c = lc
    db = c.new_database()
    with session(c, db) as t1, session(c, db) as t2:
        t1.execute("BEGIN")
        t1.execute("SAVEPOINT s")
        t1.execute("SELECT segment_create('q', step => 10)")
        t1.execute("ROLLBACK TO s")
        t2.execute("SELECT segment_create('q', step => 10)")
        first = draw(t1, "q", 3)
        locks = c.sql("SELECT count(*) FROM pg_locks l JOIN pg_class r ON r.oid = l.relation "
                      "WHERE l.pid = %s AND r.relname = 'id_segment' AND l.mode <> 'AccessShareLock'",
                      (t1.info.backend_pid,), dbname=db)
        t1.execute("ROLLBACK")
        second = draw(t2, "q", 30)
    assert locks == [(0,)], "T1 holds a lock on id_segment"
    assert_unique(first + second)


def test_two_phase_commit_of_a_creating_transaction_keeps_its_ids(make_cluster):
    c = make_cluster(conf=["max_prepared_transactions = 2"])
    c.start()
    db = c.new_database()
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT segment_create('t', step => 10)")
        conn.execute("SAVEPOINT p")
        ids = draw(conn, "t", 3)
        conn.execute("ROLLBACK TO p")
        ids += draw(conn, "t", 3)
        conn.execute("PREPARE TRANSACTION 'creating'")
        conn.execute("COMMIT PREPARED 'creating'")
    ids += draw_new(c, db, "t", 5)
    assert_unique(ids)
    assert_increasing(ids)


# Second adversarial pass: the creating transaction's drops, blocked raises
# and deleted rows.

def test_a_drop_rolled_back_in_the_creating_transaction_keeps_its_ids(lc):
    c = lc
    db = c.new_database()
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT segment_create('a', start => 1, step => 10)")
        ids = draw(conn, "a", 5)
        conn.execute("SAVEPOINT s")
        conn.execute("SELECT segment_drop('a')")
        conn.execute("ROLLBACK TO s")
        ids += draw(conn, "a", 2)
        conn.execute("SAVEPOINT t")
        conn.execute("SELECT segment_drop('a')")
        conn.execute("SELECT segment_create('a', start => 100, step => 10)")
        ids += draw(conn, "a", 3)
        conn.execute("ROLLBACK TO t")
        ids += draw(conn, "a", 2)
        conn.execute("COMMIT")
    ids += draw_new(c, db, "a", 5)
    assert_unique(ids)
    assert_increasing(ids)
    assert row_range(c, db, "a")[0] >= max(ids)


@pytest.mark.parametrize("removal", [
    ["SELECT segment_drop('a')"],
    ["SELECT segment_rename('a', 'a_old')"],
    ["SELECT segment_setval('a', 1000)", "SELECT segment_drop('a')"],
    ["DELETE FROM id_segment WHERE biz_tag = 'a'"],
    ["TRUNCATE id_segment"],
], ids=["drop", "rename", "setval_then_drop", "delete", "truncate"])
@pytest.mark.parametrize("form", [
    "SELECT segment_nextval('a')",
    "SELECT * FROM segment_nextval('a', 3)",
    "SELECT * FROM segment_reserve('a', 3)",
])
def test_a_tag_created_again_in_the_transaction_that_removed_it_hands_out_nothing(lc, removal, form):
    """Found by an attack review: BEGIN; drop (or rename away) a committed
    tag; create it again above its IDs; draw; ROLLBACK brought the old tag
    back below the IDs drawn, and it handed them out again. The draw is
    refused (55000, whose hint is to commit the removal first), in a
    savepoint released or not; rolled back, the old tag goes on above every
    ID it gave; and the hint, followed, works."""
    c = lc
    db = c.new_database()
    c.sql("SELECT segment_create('a', start => 1, step => 10)", dbname=db)
    with session(c, db) as other:
        before = draw(other, "a", 5)
    top = row_range(c, db, "a")[0]
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("SAVEPOINT s")
        for statement in removal:
            conn.execute(statement)
        conn.execute("RELEASE s")
        conn.execute(f"SELECT segment_create('a', start => {top + 1}, step => 10)")
        with pytest.raises(errors.ObjectNotInPrerequisiteState) as refused:
            conn.execute(form).fetchall()
        assert "dropped, renamed or detached" in refused.value.diag.message_primary
        hint = refused.value.diag.message_hint
        assert "Commit the segment_drop(), segment_rename(), DELETE, TRUNCATE, ALTER TABLE or DROP EXTENSION in a transaction of its own" in hint
        conn.execute("ROLLBACK")
        # Removed in a savepoint rolled back: the tag is back and draws as before.
        conn.execute("BEGIN")
        conn.execute("SAVEPOINT s")
        conn.execute(removal[-1])
        conn.execute("ROLLBACK TO s")
        after = draw(conn, "a", 3)
        conn.execute("COMMIT")
        # The hint followed: the removal committed on its own, then the tag
        # created again and drawn in one transaction.
        for statement in removal:
            conn.execute(statement)
        conn.execute("BEGIN")
        conn.execute("SELECT segment_create('a', start => 100000, step => 10)")
        again = [r[0] for r in conn.execute(form).fetchall()]
        conn.execute("COMMIT")
    assert before == [1, 2, 3, 4, 5]
    assert_unique(before + after)
    assert min(after) > max(before)
    assert again and min(again) == 100000


@pytest.mark.parametrize("renames", [
    ["SELECT segment_rename('m', 'm2')"],
    ["SELECT segment_rename('m', 'm1')", "SELECT segment_rename('m1', 'm2')"],
    ["SAVEPOINT r", "SELECT segment_rename('m', 'm2')", "RELEASE r"],
], ids=["rename", "chain", "in a savepoint"])
def test_a_tag_created_drawn_and_renamed_in_one_transaction_goes_on_above_its_ids(lc, renames):
    """Found by an attack review: a migration that creates a tag, fills a
    table whose DEFAULT draws from it, and renames the tag (the DEFAULT
    follows) committed the renamed row at the tag's start, so the next
    INSERT repeated the IDs drawn under the old name (23505 on the primary
    key). The rename carries the IDs drawn under the old name to the new
    one: at commit its row is raised above them."""
    c = lc
    db = c.new_database()
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT segment_create('m', start => 1, step => 10)")
        conn.execute("CREATE TABLE m_rows (id bigint PRIMARY KEY DEFAULT segment_nextval('m'), x int)")
        conn.execute("INSERT INTO m_rows (x) SELECT g FROM generate_series(1, 3) g")
        conn.execute("SELECT * FROM segment_nextval('m', 4)")
        conn.execute("SELECT * FROM segment_reserve('m', 2)")
        for statement in renames:
            conn.execute(statement)
        conn.execute("COMMIT")
        (default,), = conn.execute("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
                                   "WHERE adrelid = 'm_rows'::regclass").fetchall()
        assert "'m2'" in default
        assert row_range(c, db, "m2")[0] >= 9, "the renamed row is raised past the 9 IDs drawn"
        conn.execute("INSERT INTO m_rows (x) SELECT g FROM generate_series(4, 8) g")
        later = draw(conn, "m2", 3)
    ids = [r[0] for r in c.sql("SELECT id FROM m_rows ORDER BY x", dbname=db)]
    assert ids[:3] == [1, 2, 3]
    assert_unique(list(range(1, 10)) + ids[3:] + later)
    assert min(ids[3:]) > 9


def _a_committed_tag_drawn_from(make_cluster):
    """A cluster of its own (these tests drop or move the extension's
    objects) and a database whose committed tag 'a' (step 10) handed out 5
    IDs: (cluster, database, those IDs, the row's max_id)."""
    c = make_cluster()
    c.start()
    db = c.new_database()
    c.sql("SELECT segment_create('a', step => 10)", dbname=db)
    with session(c, db) as other:
        before = draw(other, "a", 5)
    return c, db, before, row_range(c, db, "a")[0]


def test_a_tag_created_after_drop_extension_in_the_same_transaction_hands_out_nothing(make_cluster):
    """Found by an attack review: DROP EXTENSION and CREATE EXTENSION in one
    transaction, then a tag created above the old one's IDs, drawn, and
    ROLLBACK: the old table came back below the IDs drawn and handed them
    out again. The draw is refused; a drop rolled back to a savepoint
    lifts that; and CREATE EXTENSION with a tag drawn in one transaction
    (no table dropped) draws."""
    c, db, before, top = _a_committed_tag_drawn_from(make_cluster)
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("DROP EXTENSION pg_idgen")
        conn.execute("CREATE EXTENSION pg_idgen")
        conn.execute(f"SELECT segment_create('a', start => {top + 1}, step => 10)")
        with pytest.raises(errors.ObjectNotInPrerequisiteState) as refused:
            draw(conn, "a", 1)
        assert "DROP EXTENSION in a transaction of its own" in refused.value.diag.message_hint
        conn.execute("ROLLBACK")
        conn.execute("BEGIN")
        conn.execute("SAVEPOINT s")
        conn.execute("DROP EXTENSION pg_idgen")
        conn.execute("ROLLBACK TO s")
        conn.execute("SELECT segment_create('b', step => 10)")
        assert draw(conn, "b", 2) == [1, 2]
        conn.execute("COMMIT")
        after = draw(conn, "a", 3)
        # The drop committed on its own: a transaction that creates the
        # extension, a tag and draws from it draws.
        conn.execute("DROP EXTENSION pg_idgen")
        conn.execute("BEGIN")
        conn.execute("CREATE EXTENSION pg_idgen")
        conn.execute("SELECT segment_create('n')")
        assert draw(conn, "n", 2) == [1, 2]
        conn.execute("COMMIT")
    assert_unique(before + after)
    assert min(after) > max(before)


@pytest.mark.parametrize("replace", [
    ["ALTER TABLE id_segment RENAME TO id_segment_old",
     "CREATE TABLE id_segment (LIKE id_segment_old INCLUDING ALL)"],
    ["CREATE SCHEMA aside", "ALTER TABLE id_segment SET SCHEMA aside",
     "CREATE TABLE id_segment (LIKE aside.id_segment INCLUDING ALL)"],
    ["ALTER TABLE id_segment RENAME TO id_segment_old", "DROP EXTENSION pg_idgen",
     "CREATE SCHEMA elsewhere", "CREATE EXTENSION pg_idgen SCHEMA elsewhere",
     "SET LOCAL search_path = elsewhere, public"],
    ["CREATE SCHEMA s2", "ALTER FUNCTION segment_create(text, bigint, integer, boolean) SET SCHEMA s2",
     "ALTER FUNCTION segment_nextval(text) SET SCHEMA s2",
     "CREATE TABLE s2.id_segment (LIKE public.id_segment INCLUDING ALL)",
     "SET LOCAL search_path = s2, public"],
], ids=["renamed", "set schema", "renamed then drop extension", "functions moved beside a new table"])
def test_a_tag_created_after_id_segment_left_its_name_hands_out_nothing(make_cluster, replace):
    """Found by two attack reviews: the committed id_segment renamed or
    moved to another schema (before a DROP EXTENSION, say), another table
    given its place — or the functions moved beside a new table —, then a
    tag created above the old one's IDs, drawn, and
    ROLLBACK: the old table came back below the IDs drawn and handed them
    out again. The draw is refused; rolled back, the old tag goes on above
    every ID it gave."""
    c, db, before, top = _a_committed_tag_drawn_from(make_cluster)
    with session(c, db) as conn:
        conn.execute("BEGIN")
        for statement in replace:
            conn.execute(statement)
        conn.execute(f"SELECT segment_create('a', start => {top + 1}, step => 10)")
        with pytest.raises(errors.ObjectNotInPrerequisiteState) as refused:
            draw(conn, "a", 1)
        assert "moved its table away" in refused.value.diag.message_primary
        assert "ALTER TABLE or DROP EXTENSION in a transaction of its own" in refused.value.diag.message_hint
        conn.execute("ROLLBACK")
        after = draw(conn, "a", 3)
    assert_unique(before + after)
    assert min(after) > max(before)


def test_a_tag_created_beside_another_table_is_not_drawn_through_the_first(make_cluster):
    """Found by an attack review: a tag created in a second id_segment (the
    functions moved beside it for the call) was then drawn through the
    first table's functions, under its tag of the same name, and the
    commit raised only the second table's row: the first went on to hand
    out the same IDs. A draw through the first table's functions takes
    that table's tag."""
    c, db, before, top = _a_committed_tag_drawn_from(make_cluster)
    create = "segment_create(text, bigint, integer, boolean)"
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("CREATE SCHEMA s2")
        conn.execute("CREATE TABLE s2.id_segment (LIKE public.id_segment INCLUDING ALL)")
        conn.execute(f"ALTER FUNCTION public.{create} SET SCHEMA s2")
        conn.execute(f"SELECT s2.segment_create('a', start => {top + 1}, step => 10)")
        conn.execute(f"ALTER FUNCTION s2.{create} SET SCHEMA public")
        during = [r[0] for r in conn.execute(
            "SELECT public.segment_nextval('a') FROM generate_series(1, 5)").fetchall()]
        conn.execute("COMMIT")
        after = draw(conn, "a", 40)
    assert max(during) <= top, f"drew {during} from the second table's tag, above {top}"
    assert_unique(before + during + after)


def test_a_name_that_no_committed_tag_has_draws_when_created_again(lc):
    """The refusal above is for a committed tag of the name only: a name
    this transaction gave by a rename, dropped and created again has no
    committed tag that a rollback could bring back, so it draws."""
    c = lc
    db = c.new_database()
    c.sql("SELECT segment_create('w', step => 10)", dbname=db)
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT segment_rename('w', 'x')")
        conn.execute("SELECT segment_drop('x')")
        conn.execute("SELECT segment_create('x', start => 100, step => 10)")
        assert draw(conn, "x", 2) == [100, 101]
        conn.execute("COMMIT")
        assert draw(conn, "x", 1) == [102]


def test_a_commit_that_cannot_raise_max_id_fails_instead(lc):
    """A trigger that silently skips the creating transaction's raise of
    max_id (or READ ONLY) makes its COMMIT fail: the IDs it handed out
    were never committed anywhere, and the tag never existed."""
    c = lc
    db = c.new_database()
    c.sql("""CREATE FUNCTION skip_unversioned() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN IF NEW.max_id > OLD.max_id AND NEW.step = 7 THEN RETURN NULL; END IF;
                RETURN NEW; END $$""", dbname=db)
    c.sql("CREATE TRIGGER a_skip BEFORE UPDATE ON id_segment FOR EACH ROW "
          "EXECUTE FUNCTION skip_unversioned()", dbname=db)
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT segment_create('c', start => 1, step => 7)")
        draw(conn, "c", 5)
        with pytest.raises(errors.ObjectNotInPrerequisiteState) as failed:
            conn.execute("COMMIT")
    assert "could not raise its id_segment.max_id" in str(failed.value)
    assert c.sql("SELECT count(*) FROM id_segment WHERE biz_tag = 'c'", dbname=db) == [(0,)]
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT segment_create('d', start => 1, step => 10)")
        draw(conn, "d", 2)
        conn.execute("SET TRANSACTION READ ONLY")
        with pytest.raises(errors.ObjectNotInPrerequisiteState) as failed:
            conn.execute("COMMIT")
    assert "read-only" in str(failed.value)


def test_a_created_tag_whose_row_is_deleted_stops_at_once(lc):
    c = lc
    db = c.new_database()
    with session(c, db) as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT segment_create('del', start => 1, step => 10)")
        draw(conn, "del", 1)
        conn.execute("DELETE FROM id_segment WHERE biz_tag = 'del'")
        with pytest.raises(errors.UndefinedObject):
            draw(conn, "del", 1)
        conn.execute("ROLLBACK")
