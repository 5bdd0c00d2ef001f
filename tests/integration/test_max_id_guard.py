"""The max_id guard of segment IDs, and restarts (issue 9, point 3, and
two cases found by adversarial review): lowering id_segment.max_id is
refused before and after restarts, a lowered max_id never makes IDs repeat,
the documented superuser override, an outside program adding step without
the version, a row moved onto another tag, a trigger lowering max_id behind
the guard; and IDs drawn in every calling form never repeat across a fast
restart or a crash, when shared memory has forgotten every ID handed out.

What was test_lifecycle.py is this file, test_creating_transaction.py and
test_ddl_and_workers.py.
"""

import threading

import psycopg
import pytest
from psycopg import errors

from helpers import (assert_increasing, assert_unique, draw, draw_new, in_thread, joined, row_range, session,
                     wait_for)


@pytest.fixture(scope="module")
def durable(make_module_cluster):
    """A cluster the restart tests may restart; one step per refill."""
    c = make_module_cluster(conf=["pg_idgen.max_ids_ahead = 1"])
    c.start()
    return c


# ---------------------------------------------------------------------------
# Point 3: the max_id safeguard, durable; outside programs adding step.

LOWERING = [
    "UPDATE id_segment SET max_id = 0 WHERE biz_tag = 'tamper'",
    "UPDATE id_segment SET max_id = 0, version = version + 1 WHERE biz_tag = 'tamper'",
    "UPDATE id_segment SET max_id = max_id - 1 WHERE biz_tag = 'tamper'",
    "INSERT INTO id_segment (biz_tag, max_id, step) VALUES ('tamper', 3, 10) "
    "ON CONFLICT (biz_tag) DO UPDATE SET max_id = excluded.max_id",
]


def test_moving_max_id_backwards_is_refused_before_and_after_restarts(durable):
    """Point 3. Lowering max_id (directly, with the version bumped, by one,
    or through INSERT ... ON CONFLICT DO UPDATE) is refused with a SQLSTATE
    and leaves the row as it was — before a restart, after a fast restart
    and after a crash (immediate stop), when shared memory has forgotten
    every ID handed out."""
    c = durable
    db = c.new_database()
    c.sql("SELECT segment_create('tamper', step => 10)", dbname=db)
    drawn = draw_new(c, db, "tamper", 35)
    for stage, restart in [("before any restart", None), ("after a fast restart", "fast"),
                           ("after an immediate stop", "immediate")]:
        if restart:
            c.restart(mode=restart)
        for statement in LOWERING:
            before = row_range(c, db, "tamper")
            try:
                c.sql(statement, dbname=db)
            except psycopg.Error as e:
                assert e.sqlstate, f"{stage}: refused without a SQLSTATE: {e}"
            else:
                pytest.fail(f"{stage}: accepted {statement!r} (max_id {before[0]} -> "
                            f"{row_range(c, db, 'tamper')[0]})")
            # Not lowered: the refill worker may raise it meanwhile (a
            # prefetch after the draws), which is no change by the statement.
            assert row_range(c, db, "tamper")[0] >= before[0], f"{stage}: {statement!r} lowered max_id"
        drawn += draw_new(c, db, "tamper", 25)
    assert_unique(drawn)
    assert_increasing(drawn)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_lowered_max_id_never_makes_ids_repeat_after_a_restart(durable, mode):
    """Point 3, the harm itself: whatever happens to `UPDATE id_segment SET
    max_id = 0` (refused, or accepted and refused at refill), no ID handed
    out before a restart comes out again after it."""
    c = durable
    db = c.new_database()
    c.sql("SELECT segment_create('tamper', step => 10)", dbname=db)
    before = draw_new(c, db, "tamper", 45)
    # The guard refuses the lowering (23514): the row keeps its max_id.
    with pytest.raises(psycopg.errors.CheckViolation):
        c.sql("UPDATE id_segment SET max_id = 0, version = version + 1 WHERE biz_tag = 'tamper'", dbname=db)
    c.restart(mode=mode)
    # So the tag stays usable, and goes on above what it handed out.
    after = draw_new(c, db, "tamper", 45)
    assert min(after) > max(before), (before[-3:], after[:3])
    repeated = sorted(set(before).intersection(after))
    assert not repeated, f"{len(repeated)} IDs handed out again after the restart, e.g. {repeated[:5]}"


def test_an_administrator_lowers_max_id_on_purpose_and_only_a_superuser_can(durable):
    """Point 3, the documented way out: `SET LOCAL
    pg_idgen.allow_max_id_decrease = on` in the transaction lets a superuser
    lower max_id; the setting ends with the transaction; a role with UPDATE
    on id_segment can neither set it (SET LOCAL, or at connection start)
    nor lower max_id."""
    c = durable
    db = c.new_database()
    c.sql("SELECT segment_create('lower', start => 1001, step => 10)", dbname=db)  # max_id 1000
    with session(c, db, autocommit=False) as conn:
        conn.execute("SET LOCAL pg_idgen.allow_max_id_decrease = on")
        conn.execute("UPDATE id_segment SET max_id = 500 WHERE biz_tag = 'lower'")
        conn.commit()
    assert row_range(c, db, "lower")[0] == 500
    with pytest.raises(psycopg.Error):
        c.sql("UPDATE id_segment SET max_id = 400 WHERE biz_tag = 'lower'", dbname=db)
    assert row_range(c, db, "lower")[0] == 500, "SET LOCAL outlived its transaction"
    # Nothing of 'lower' was handed out on this server: it continues from the lowered row.
    assert c.sql("SELECT segment_nextval('lower')", dbname=db) == [(501,)]

    c.sql("CREATE ROLE lowerer LOGIN")
    c.sql("GRANT SELECT, UPDATE ON id_segment TO lowerer", dbname=db)
    before = row_range(c, db, "lower")[0]
    lowered = []
    try:
        with session(c, db, autocommit=False, user="lowerer") as conn:
            conn.execute("SET LOCAL pg_idgen.allow_max_id_decrease = on")
            conn.execute("UPDATE id_segment SET max_id = 10 WHERE biz_tag = 'lower'")
            conn.commit()
            lowered.append("SET LOCAL")
    except psycopg.Error:
        pass
    try:
        with psycopg.connect(host=c.dir, user="lowerer", dbname=db, autocommit=True,
                             options="-c pg_idgen.allow_max_id_decrease=on") as conn:
            conn.execute("UPDATE id_segment SET max_id = 10 WHERE biz_tag = 'lower'")
            lowered.append("connection option")
    except psycopg.Error:
        pass
    assert not lowered, f"a role that is not superuser lowered max_id through {lowered}"
    # Not below where it was: the refill worker may have taken the next
    # range meanwhile (the draw above crossed its prefetch mark).
    assert row_range(c, db, "lower")[0] >= before


def test_an_outside_program_adding_step_without_the_version_never_overlaps(durable):
    """Point 3, last part. An outside program takes ranges with `UPDATE
    id_segment SET max_id = max_id + step ... RETURNING max_id` and does not
    bump version. First deterministically: its update is open (row locked)
    while the worker reads the row and tries its CAS, and commits after;
    then both race freely. No ID may be given to both."""
    c = durable
    db = c.new_database()
    c.sql("SELECT segment_create('shared', step => 10)", dbname=db)
    take = ("UPDATE id_segment SET max_id = max_id + step WHERE biz_tag = 'shared' "
            "RETURNING max_id - step + 1, max_id")
    theirs = []
    ours = draw_new(c, db, "shared", 5)

    outside = session(c, db, autocommit=False)
    first, last = outside.execute(take).fetchone()
    drawer, drawn = in_thread(lambda: draw_new(c, db, "shared", 100, refill_timeout="60s"))
    # The worker reads max_id while the outside update is uncommitted; a
    # worker that waits for the row lock shows up as blocked by it. (One
    # that does not wait retries later; then this just lets time pass.)
    outside_pid = outside.info.backend_pid
    wait_for(lambda: c.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_idgen refill worker' "
        "AND %s = ANY (pg_blocking_pids(pid))", (outside_pid,))[0][0] > 0, timeout=5)
    outside.commit()
    outside.close()
    theirs.append(range(first, last + 1))
    result = joined(drawer, drawn)
    assert "error" not in result, f"drawing failed: {result.get('error')!r}"
    ours += result["value"]

    stop = threading.Event()

    def outside_loop():
        with session(c, db) as conn:
            while not stop.is_set() and len(theirs) < 500:
                a, b = conn.execute(take).fetchone()
                theirs.append(range(a, b + 1))

    looper, looped = in_thread(outside_loop)
    try:
        for _ in range(20):
            ours += draw_new(c, db, "shared", 500, refill_timeout="60s")
    finally:
        stop.set()
        joined(looper, looped)
    assert "error" not in looped, f"the outside program failed: {looped.get('error')!r}"
    assert len(theirs) > 10, "the outside program barely ran"
    assert_unique(ours)
    overlap = sorted({i for r in theirs for i in r}.intersection(ours))
    assert not overlap, f"{len(overlap)} IDs given to the extension and the outside program, e.g. {overlap[:5]}"


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_ids_never_repeat_across_a_restart_in_any_calling_form(durable, mode):
    """Restart: every piece of state kept in shared memory (cached ranges,
    slots, the worker) is lost on a restart or crash; IDs drawn before it,
    through plain calls, a trigger and segment_nextval(tag, n), never come
    out again after it."""
    c = durable
    db = c.new_database()
    c.sql("SELECT segment_create('r', step => 10)", dbname=db)
    c.sql("CREATE TABLE ev (id bigint, kind text); "
          "CREATE FUNCTION set_id() RETURNS trigger LANGUAGE plpgsql AS "
          "$$ BEGIN NEW.id := segment_nextval(NEW.kind); RETURN NEW; END $$; "
          "CREATE TRIGGER t BEFORE INSERT ON ev FOR EACH ROW EXECUTE FUNCTION set_id()", dbname=db)

    def draw_all():
        with session(c, db) as conn:
            ids = draw(conn, "r", 40)
            ids += [r[0] for r in conn.execute("INSERT INTO ev (kind) SELECT 'r' FROM generate_series(1, 25) "
                                               "RETURNING id")]
            ids += [r[0] for r in conn.execute("SELECT * FROM segment_nextval('r', 25)")]
        return ids

    before = draw_all()
    c.restart(mode=mode)
    after = draw_all()
    assert_unique(before + after)
    assert_increasing(after)
    assert min(after) > max(before)


# ---------------------------------------------------------------------------
# Found by adversarial review of the fixes: renaming a tag, and a trigger
# that changes max_id behind the guard's back.


def test_a_row_never_moves_to_another_tag(lc):
    """An UPDATE that moves a row onto a tag (renaming r1 away and a spare
    row onto r1) would hand out r1's IDs again: refused like lowering
    max_id (23514), with the same documented override."""
    c = lc
    db = c.new_database()
    c.sql("SELECT segment_create('r1', step => 10)", dbname=db)
    c.sql("SELECT segment_create('spare', step => 10)", dbname=db)
    drawn = draw_new(c, db, "r1", 5)
    with pytest.raises(errors.CheckViolation) as refused:
        c.sql("UPDATE id_segment SET biz_tag = 'r1_old' WHERE biz_tag = 'r1'", dbname=db)
    assert "biz_tag cannot change" in str(refused.value)
    assert "segment_create" in refused.value.diag.message_hint
    with pytest.raises(errors.CheckViolation):
        c.sql("INSERT INTO id_segment (biz_tag, max_id, step) VALUES ('r1', 0, 10) "
              "ON CONFLICT (biz_tag) DO UPDATE SET max_id = excluded.max_id", dbname=db)
    assert_unique(drawn + draw_new(c, db, "r1", 5))


def test_a_trigger_lowering_max_id_behind_the_guard_is_refused(lc):
    """A BEFORE trigger that sets NEW.max_id lower when another column
    changes: the guard, an AFTER trigger, judges the row as stored."""
    c = lc
    db = c.new_database()
    c.sql("SELECT segment_create('g1', step => 10)", dbname=db)
    drawn = draw_new(c, db, "g1", 5)
    c.sql("""CREATE FUNCTION reset() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN IF NEW.step <> OLD.step THEN NEW.max_id := 0; END IF; RETURN NEW; END $$""",
          dbname=db)
    c.sql("CREATE TRIGGER a_reset BEFORE UPDATE ON id_segment FOR EACH ROW EXECUTE FUNCTION reset()",
          dbname=db)
    with pytest.raises(errors.CheckViolation):
        c.sql("UPDATE id_segment SET step = 13 WHERE biz_tag = 'g1'", dbname=db)
    assert row_range(c, db, "g1")[0] >= max(drawn)
