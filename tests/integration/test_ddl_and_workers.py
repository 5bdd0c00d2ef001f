"""DDL and the refill worker with statements in flight (issue 9, points 2,
5, 6, 8-11, 13 and the smaller ones): DROP/CREATE EXTENSION, segment_drop,
DROP DATABASE and other database commands while statements draw IDs;
deterministic interleavings of the refill worker through test-only
failpoints (see adversary.py); a worker that fails to start, one locked row
stalling other tags, workers leaving once their tag is gone, and slots
(freed by DROP EXTENSION, never taken by made-up tags).

What was test_lifecycle.py is this file, test_max_id_guard.py and
test_creating_transaction.py.

Against a build without the `failpoints` feature, the failpoint tests fail
with "failpoint ... was never reached" after adversary.REACH_TIMEOUT.
"""

import re
import threading
import time

import psycopg
import pytest
from psycopg import errors

from adversary import Failpoint, REACH_TIMEOUT, armed, paused
from helpers import (assert_increasing, assert_unique, draw, draw_new, duplicates, in_thread, joined,
                     refill_worker_pids, row_locked, row_range, session, status_row, total_waits, wait_for)


@pytest.fixture(scope="module")
def idle_cluster(make_module_cluster):
    """Workers leave after 1 s without work; the extension is also in
    `postgres`, to read segment_status after a database dropped it."""
    c = make_module_cluster(conf=["pg_idgen.worker_idle_timeout = '1s'"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    return c


# ---------------------------------------------------------------------------
# Point 2: the worker refills another database's slot.

def test_a_paused_worker_never_refills_a_slot_another_database_took_over(make_cluster):
    """Point 2. db1's worker is paused (failpoint worker-before-refill) after
    deciding that slot 'x' of db1 needs a range; meanwhile segment_drop('x')
    frees the slot and a db2 backend takes it for its tag 'y'. db1 has a
    'y' row too, far away. Released, db1's worker must notice the slot is no
    longer its database's: db1's 'y' row stays untouched, and db2's 'y'
    hands out only IDs from db2's own row."""
    c = make_cluster(conf=["pg_idgen.max_tags = 16", "pg_idgen.max_tags_per_database = 16", "pg_idgen.max_ids_ahead = 1"])
    c.start()
    db1, db2 = c.new_database(), c.new_database()
    y1_start, y2_start = 5_000_000_000, 1_000_000
    c.sql("SELECT segment_create('x', step => 10)", dbname=db1)
    c.sql(f"SELECT segment_create('y', start => {y1_start}, step => 10)", dbname=db1)
    c.sql(f"SELECT segment_create('y', start => {y2_start}, step => 10)", dbname=db2)
    y1_row_before = row_range(c, db1, "y")

    poker = session(c, db1, refill_timeout="1s")
    poker.execute("SELECT segment_nextval('x')")
    assert wait_for(lambda: len(refill_worker_pids(c, db1)) == 1), "db1's refill worker did not start"

    def poke():
        # Each ID taken moves towards the prefetch mark; one past it asks
        # the worker for a refill. Waits of 1 s at most end in 55P03.
        try:
            poker.execute("SELECT segment_nextval('x')")
        except errors.LockNotAvailable:
            pass

    fp = Failpoint(c, "worker-before-refill")
    fp.arm("pause")
    try:
        paused_pid = fp.wait_reached(poke=poke)
        assert paused_pid in refill_worker_pids(c, db1), \
            f"pid {paused_pid} paused at worker-before-refill is not db1's refill worker"
        poker.close()
        c.sql("SELECT segment_drop('x')", dbname=db1)
        # db2's first call takes a slot (the one 'x' freed: the only other
        # slots were never used). db2's worker pauses at the same failpoint.
        drawer, drawn = in_thread(lambda: draw_new(c, db2, "y", 300, refill_timeout="60s"))
        # segment_status() itself: the view lists idle tags too.
        taken = wait_for(lambda: fp.reached_pid() != paused_pid
                         or c.sql("SELECT 1 FROM segment_status() WHERE tag = 'y' AND database = %s",
                                  (db2,), dbname=db2), timeout=REACH_TIMEOUT)
        assert taken, "db2's call of 'y' neither took a slot nor woke db2's worker"
        time.sleep(0.2)
    finally:
        fp.release()
    result = joined(drawer, drawn)
    assert "error" not in result, f"db2's draws of 'y' failed: {result.get('error')!r}"
    ids = result["value"]
    more = draw_new(c, db2, "y", 200)
    y2_max_id = row_range(c, db2, "y")[0]
    foreign = [i for i in ids + more if not y2_start <= i <= y2_max_id]
    assert not foreign, (f"{len(foreign)} IDs of db2's 'y' are not from db2's row "
                         f"[{y2_start}, {y2_max_id}], e.g. {foreign[:5]} (db1's 'y' starts at {y1_start})")
    assert_unique(ids + more)
    assert row_range(c, db1, "y") == y1_row_before, \
        "db1's worker took a range from db1's 'y' row, which nobody in db1 asked for"


# ---------------------------------------------------------------------------
# Point 5: one locked row stalls every tag of the database.

def test_a_locked_row_of_one_tag_never_stalls_another_tag(lc):
    """Point 5. Tag 'stuck' (the lower slot) has its row held FOR UPDATE and
    a caller waiting for it; tag 'free' of the same database then draws
    200,000 IDs at step 100 with refill_timeout = 5s — half the time the
    worker may wait on a row lock (10 s). Every call of 'free' succeeds, the
    worker refilled 'free' while it kept failing 'stuck', and the callers of
    'stuck' fail with 55P03 only after their full refill_timeout (2 s)."""
    c = lc
    db = c.new_database()
    c.sql("SELECT segment_create('stuck', step => 100)", dbname=db)
    c.sql("SELECT segment_create('free', step => 100)", dbname=db)
    c.sql("SELECT segment_nextval('stuck')", dbname=db)  # the first slot, a worker running
    stuck_errors, stop = [], threading.Event()

    def stuck_caller():
        with session(c, db, refill_timeout="2s") as conn:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    conn.execute("SELECT segment_nextval('stuck') FROM generate_series(1, 100000)")
                except psycopg.Error as e:
                    stuck_errors.append((time.monotonic() - started, e.sqlstate, str(e)))

    with row_locked(c, db, "stuck"):
        caller, called = in_thread(stuck_caller)
        try:
            assert wait_for(lambda: total_waits(c, db, "stuck") > 0, timeout=10), \
                "the caller of 'stuck' never waited"
            time.sleep(0.5)
            (failures_before,) = status_row(c, "stuck", "refill_failures", dbname=db)
            free, deadline = [], time.monotonic() + 120
            with session(c, db, refill_timeout="5s") as conn:
                while len(free) < 200_000 and time.monotonic() < deadline:
                    try:
                        free += draw(conn, "free", 10_000)
                    except errors.LockNotAvailable as e:
                        pytest.fail(f"a call of 'free' waited its whole 5 s refill_timeout while 'stuck' "
                                    f"was locked, after {len(free)} IDs: {e}")
            assert len(free) == 200_000, f"only {len(free)} IDs of 'free' in 120 s"
            refills, free_waits = status_row(c, "free", "refills", "waits", dbname=db)
            # Let the 'stuck' caller finish at least one full wait.
            wait_for(lambda: len(stuck_errors) > 0, timeout=15)
            (failures_after,) = status_row(c, "stuck", "refill_failures", dbname=db)
        finally:
            stop.set()
            joined(caller, called)
    assert_unique(free)
    assert_increasing(free)
    assert refills > 0
    assert failures_after > failures_before, \
        "the worker did not try 'stuck' again while it refilled 'free': the test did not race"
    assert stuck_errors, "no call of 'stuck' failed while its row was locked"
    for waited, sqlstate, message in stuck_errors:
        assert sqlstate == "55P03", f"'stuck' failed with {sqlstate}: {message}"
        assert waited >= 1.9, f"'stuck' failed after {waited:.2f} s, before its 2 s refill_timeout: {message}"


# ---------------------------------------------------------------------------
# Point 6: a worker that dies while starting.

def assert_names_the_dead_worker(error, elapsed, timeout_s):
    message = str(error)
    assert elapsed < timeout_s / 2, (
        f"the call waited {elapsed:.1f} s of its {timeout_s} s refill_timeout instead of noticing "
        f"that the worker exited: {message}")
    assert "within pg_idgen.refill_timeout" not in message, f"a generic refill timeout: {message}"
    assert error.sqlstate, message
    assert re.search(r"worker", message, re.I) and re.search(r"exit|died|stopped|could not|fail", message, re.I), \
        f"the error does not say the refill worker exited while starting: {message}"


def test_a_worker_failing_while_starting_is_reported_at_once(lc):
    """Point 6 (failpoint worker-start = error): the worker exits before it
    connects. The first call that needs a range fails at once, saying the
    refill worker exited while starting — not after refill_timeout with a
    generic timeout. Without the failpoint, the next call works."""
    c = lc
    db = c.new_database()
    c.sql("SELECT segment_create('early', step => 10)", dbname=db)
    with armed(c, "worker-start", "error"):
        with session(c, db, refill_timeout="30s") as conn:
            started = time.monotonic()
            try:
                conn.execute("SELECT segment_nextval('early')")
            except psycopg.Error as e:
                error = e
            else:
                pytest.fail("segment_nextval succeeded although its worker exits while starting "
                            "(is the build without the `failpoints` feature?)")
            elapsed = time.monotonic() - started
    assert_names_the_dead_worker(error, elapsed, 30)
    assert "start" in str(error).lower(), str(error)
    assert c.sql("SELECT segment_nextval('early')", dbname=db) == [(1,)]


def test_a_worker_that_cannot_connect_is_reported_at_once(lc):
    """Point 6, the issue's example: a database that stopped allowing
    connections (ALTER DATABASE ... ALLOW_CONNECTIONS false) while a session
    stays connected. Either the worker connects anyway and serves that
    session (BGWORKER_BYPASS_ALLOWCONN), or the call says at once that the
    worker could not start — never a generic timeout after 20 s."""
    c = lc
    db = c.new_database()
    c.sql("SELECT segment_create('closed', step => 10)", dbname=db)
    conn = session(c, db, refill_timeout="20s")
    c.sql(f"ALTER DATABASE {db} ALLOW_CONNECTIONS false")
    error = got = None
    try:
        started = time.monotonic()
        try:
            got = conn.execute("SELECT segment_nextval('closed')").fetchone()[0]
        except psycopg.Error as e:
            error = e
        elapsed = time.monotonic() - started
    finally:
        conn.close()
        c.sql(f"ALTER DATABASE {db} ALLOW_CONNECTIONS true")
    if error is None:
        assert got == 1, f"the first ID of 'closed' is {got}, not 1 from its row"
        assert elapsed < 10, f"the first ID took {elapsed:.1f} s of the 20 s refill_timeout"
    else:
        assert_names_the_dead_worker(error, elapsed, 20)


# ---------------------------------------------------------------------------
# Point 8: statements begun before DROP EXTENSION + CREATE EXTENSION.

SLOW_DRAW = """
CREATE TABLE ctl (done bool);
INSERT INTO ctl VALUES (false);
CREATE FUNCTION slow_draw() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE got bigint; n bigint := 0;
BEGIN
    LOOP
        got := segment_nextval('t');
        RAISE NOTICE 'drew %', got;
        n := n + 1;
        EXIT WHEN (SELECT done FROM ctl) OR n >= 5000;
        PERFORM pg_sleep(0.02);
    END LOOP;
    RETURN n;
END $$;
"""


def recreate_extension(conn):
    conn.execute("SET lock_timeout = '5s'")
    try:
        conn.execute("DROP EXTENSION pg_idgen")
    except errors.LockNotAvailable:
        pytest.fail("DROP EXTENSION waited for a statement that only draws IDs: a user transaction "
                    "holds a lock (design §2.2)")
    conn.execute("CREATE EXTENSION pg_idgen")
    conn.execute("RESET lock_timeout")


@pytest.mark.parametrize("statement", ["cursor", "cursor_setof", "plpgsql_pausing"])
def test_a_statement_begun_before_drop_extension_never_repeats_ids(lc, statement):
    """Point 8. A statement that began before DROP EXTENSION pg_idgen; CREATE
    EXTENSION pg_idgen; segment_create('t', start => <max ID seen + 1>) keeps
    running: an open cursor over segment_nextval('t') (FETCH 10 at a time),
    a cursor over segment_nextval('t', n) in the select list, a PL/pgSQL
    function pausing between draws. Interleaved with draws of the new tag,
    it must fail or hand out IDs the new tag never does."""
    c = lc
    db = c.new_database()
    c.sql("SELECT segment_create('t')", dbname=db)  # step 1000: plenty cached
    ddl = session(c, db)
    old, new, old_errors = [], [], []

    if statement.startswith("cursor"):
        query = {"cursor": "SELECT segment_nextval('t') FROM generate_series(1, 100000)",
                 "cursor_setof": "SELECT segment_nextval('t', 100000)"}[statement]
        holder = session(c, db, autocommit=False)
        holder.execute(f"DECLARE c NO SCROLL CURSOR FOR {query}")

        def fetch():
            if old_errors:
                return
            try:
                old.extend(r[0] for r in holder.execute("FETCH 10 FROM c"))
            except psycopg.Error as e:
                old_errors.append(e)

        fetch()
        recreate_extension(ddl)
        fetch()
        start = max(old) + 1
        ddl.execute(f"SELECT segment_create('t', start => {start})")
        for _ in range(6):
            fetch()                      # the old statement first, then the new tag
            new.extend(draw(ddl, "t", 30))
        holder.rollback()
        holder.close()
    else:
        c.sql(SLOW_DRAW, dbname=db)
        lock = threading.Lock()
        runner = session(c, db)

        def on_notice(diag):
            match = re.match(r"drew (\d+)", diag.message_primary or "")
            if match:
                with lock:
                    old.append(int(match.group(1)))

        runner.add_notice_handler(on_notice)
        worker, outcome = in_thread(lambda: runner.execute("SELECT slow_draw()").fetchone()[0])

        def drawn_more(count):
            target = len(old) + count
            return wait_for(lambda: len(old) >= target or not worker.is_alive(), timeout=30)

        assert drawn_more(10), "the PL/pgSQL function did not draw"
        recreate_extension(ddl)
        drawn_more(3)
        with lock:
            start = max(old) + 1
        ddl.execute(f"SELECT segment_create('t', start => {start})")
        for _ in range(6):
            drawn_more(3)                # the old statement first, then the new tag
            new.extend(draw(ddl, "t", 30))
        c.sql("UPDATE ctl SET done = true", dbname=db)
        result = joined(worker, outcome)
        if "error" in result:
            old_errors.append(result["error"])
        runner.close()

    new.extend(draw_new(c, db, "t", 100))
    new_max_id = row_range(c, db, "t")[0]
    outside = [i for i in new if not start <= i <= new_max_id]
    assert not outside, f"the new tag handed out IDs outside its row [{start}, {new_max_id}]: {outside[:5]}"
    assert_unique(new)
    repeated = sorted(set(old).intersection(new))
    assert not repeated, (
        f"{len(repeated)} IDs came from both the statement begun before DROP EXTENSION and the new tag, "
        f"e.g. {repeated[:5]} (the old statement {'failed: ' + str(old_errors[0]) if old_errors else 'never failed'})")
    assert not duplicates(old)


@pytest.mark.parametrize("drop", ["segment_drop", "drop_extension"])
def test_a_range_committed_for_a_dropped_tag_is_never_served_for_the_new_one(lc, drop):
    """Point 8 with a failpoint: the worker has committed its CAS on 't''s row
    and is paused before publishing (worker-before-publish). The tag is then
    dropped (segment_drop, or DROP/CREATE EXTENSION) and created again above
    every ID seen, and a caller of the new tag waits for a range. Released,
    the worker must not publish the dropped row's range for the new tag."""
    c = lc
    db = c.new_database()
    c.sql("SELECT segment_create('t', step => 100)", dbname=db)
    poker = session(c, db, refill_timeout="1s")
    seen = draw(poker, "t", 1)

    def poke():
        try:
            seen.extend(draw(poker, "t", 20))
        except errors.LockNotAvailable:
            pass

    ddl = session(c, db)
    with paused(c, "worker-before-publish", trigger=poke):
        if drop == "segment_drop":
            ddl.execute("SELECT segment_drop('t')")
        else:
            recreate_extension(ddl)
        start = max(seen) + 1
        ddl.execute(f"SELECT segment_create('t', start => {start}, step => 100)")
        waiter, waited = in_thread(lambda: draw_new(c, db, "t", 300, refill_timeout="60s"))
        wait_for(lambda: total_waits(c, db, "t") > 0, timeout=10)
        time.sleep(0.2)
    result = joined(waiter, waited)
    assert "error" not in result, f"the new tag's caller failed: {result.get('error')!r}"
    new = result["value"] + draw_new(c, db, "t", 300)
    try:
        late = draw(poker, "t", 50)     # the session that drew before the drop
    except psycopg.Error:
        late = []
    new_max_id = row_range(c, db, "t")[0]
    assert_unique(new + late)
    outside = [i for i in new + late if not start <= i <= new_max_id]
    assert not outside, f"IDs not from the new row [{start}, {new_max_id}], e.g. {outside[:5]}"
    repeated = sorted(set(seen).intersection(new + late))
    assert not repeated, f"IDs of the dropped tag handed out again: {repeated[:5]}"


# ---------------------------------------------------------------------------
# Point 9: the worker never leaves once a tag's row or the extension is gone.

@pytest.mark.parametrize("gone", ["segment_drop", "row_deleted", "drop_extension"])
def test_the_worker_stops_retrying_and_leaves_once_a_tag_is_gone(idle_cluster, gone):
    """Point 9. After segment_drop, a DELETE of the tag's row, or DROP
    EXTENSION — each time with a refill of the tag asked for and not
    served — the worker does not keep failing refills for the tag (its
    refill_failures stop climbing), and it leaves after
    worker_idle_timeout (1 s here), freeing its max_worker_processes slot."""
    c = idle_cluster
    db = c.new_database()
    c.sql("SELECT segment_create('gone', step => 10)", dbname=db)
    with session(c, db) as conn:
        draw(conn, "gone", 95)
    assert refill_worker_pids(c, db), "no refill worker after drawing"
    if gone == "drop_extension":
        # A migration: with id_segment locked, a draw uses up every cached
        # ID and asks for a refill that cannot happen; then the extension
        # goes, in the same transaction.
        with session(c, db, refill_timeout="1s") as conn:
            conn.execute("BEGIN")
            conn.execute("LOCK TABLE id_segment IN ACCESS EXCLUSIVE MODE")
            conn.execute("SAVEPOINT s")
            with pytest.raises(psycopg.Error):
                conn.execute("SELECT count(segment_nextval('gone')) FROM generate_series(1, 10000000)")
            conn.execute("ROLLBACK TO s")
            conn.execute("DROP EXTENSION pg_idgen")
            conn.execute("COMMIT")
    else:
        if gone == "segment_drop":
            c.sql("SELECT segment_drop('gone')", dbname=db)
        else:
            c.sql("DELETE FROM id_segment WHERE biz_tag = 'gone'", dbname=db)
        # A caller asks for the gone tag: once any cached IDs are used up,
        # it is told the tag does not exist.
        with pytest.raises(errors.UndefinedObject):
            c.sql("SELECT count(segment_nextval('gone')) FROM generate_series(1, 10000000)", dbname=db)

    def failures():
        row = status_row(c, "gone", "refill_failures", dbname="postgres", of_database=db)
        return row[0] if row else None

    left = wait_for(lambda: not refill_worker_pids(c, db), timeout=20)
    first = failures()
    time.sleep(3)
    second = failures()
    if first is not None and second is not None:
        assert second - first <= 3, (
            f"refill_failures of the gone tag climbed from {first} to {second} in 3 s: "
            f"the worker keeps retrying a tag that no longer exists")
    assert left, (f"the refill worker of {db} is still there 20 s after the tag went away "
                  f"(worker_idle_timeout = 1s; refill_failures {second})")


# ---------------------------------------------------------------------------
# Point 10: slots leak after DROP EXTENSION.

def test_drop_extension_frees_every_slot_of_the_database(make_cluster):
    """Point 10. With max_tags = 16 and 16 tags in use, DROP EXTENSION;
    CREATE EXTENSION: a new tag works (not 53400), so do 15 more, and the
    old tags are gone from segment_status and from segment_drop (42704)."""
    c = make_cluster(conf=["pg_idgen.max_tags = 16", "pg_idgen.max_tags_per_database = 16"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT segment_create('t' || g, step => 10) FROM generate_series(1, 16) g")
    for g in range(1, 17):
        assert c.sql(f"SELECT segment_nextval('t{g}')") == [(1,)]
    c.sql("DROP EXTENSION pg_idgen")
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT segment_create('fresh')")
    assert c.sql("SELECT segment_nextval('fresh')") == [(1,)]
    c.sql("SELECT segment_create('n' || g) FROM generate_series(1, 15) g")
    for g in range(1, 16):
        assert c.sql(f"SELECT segment_nextval('n{g}')") == [(1,)]
    assert c.sql("SELECT count(*) FROM segment_status WHERE tag LIKE 't%'") == [(0,)]
    with pytest.raises(errors.UndefinedObject):
        c.sql("SELECT segment_drop('t1')")


# ---------------------------------------------------------------------------
# Point 11: unknown tags take slots.

def test_made_up_tags_take_no_slot(make_cluster):
    """Point 11. A role with nothing but EXECUTE on segment_nextval(text)
    calls it with 100 made-up tags: each call fails with 42704 and takes no
    slot (segment_status has no row for them), so with max_tags = 16 another
    database still gets 16 real tags; and with every slot taken, a made-up
    tag is still 42704, not 53400."""
    c = make_cluster(conf=["pg_idgen.max_tags = 16", "pg_idgen.max_tags_per_database = 16"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("CREATE ROLE drawer LOGIN")
    c.sql("GRANT EXECUTE ON FUNCTION segment_nextval(text) TO drawer")
    codes = []
    with session(c, "postgres", user="drawer", refill_timeout="10s") as conn:
        for i in range(100):
            try:
                conn.execute(f"SELECT segment_nextval('made_up_{i}')")
                codes.append("no error")
            except psycopg.Error as e:
                codes.append(e.sqlstate)
    assert set(codes) == {"42704"}, f"made-up tags gave {sorted(set(codes))}"
    assert c.sql("SELECT count(*) FROM segment_status WHERE tag LIKE 'made_up_%'") == [(0,)], \
        "made-up tags hold slots"
    other = c.new_database()
    c.sql("SELECT segment_create('real' || g) FROM generate_series(1, 16) g", dbname=other)
    for g in range(1, 17):
        assert c.sql(f"SELECT segment_nextval('real{g}')", dbname=other) == [(1,)]
    with session(c, "postgres", user="drawer") as conn:
        with pytest.raises(errors.UndefinedObject):
            conn.execute("SELECT segment_nextval('made_up_when_full')")


# ---------------------------------------------------------------------------
# Point 13: a database command that fails anyway.

@pytest.mark.parametrize("command", [
    "DROP DATABASE {db}",
    "CREATE DATABASE {db}_copy TEMPLATE {db}",
    "ALTER DATABASE {db} RENAME TO {db}_renamed",
], ids=["drop_database", "create_database_template", "alter_database_rename"])
def test_a_database_command_that_fails_anyway_does_not_stall_the_database(lc, command):
    """Point 13. A session stays connected to the database, so DROP DATABASE
    (or CREATE DATABASE ... TEMPLATE, ALTER DATABASE ... RENAME) waits ~5 s
    for it and then fails with 55006. Stepping aside cannot help: the
    database's refill worker keeps its pid all along, and the connected
    session's draws (refill_timeout = 4s, step 10) keep succeeding."""
    c = lc
    db = c.new_database()
    c.sql("SELECT segment_create('busy', step => 10)", dbname=db)
    conn = session(c, db, refill_timeout="4s")
    ids = draw(conn, "busy", 50)
    assert wait_for(lambda: len(refill_worker_pids(c, db)) == 1), "no refill worker"
    (worker,) = refill_worker_pids(c, db)

    runner, outcome = in_thread(lambda: c.sql(command.format(db=db)))
    samples, failed = [], None
    try:
        while runner.is_alive():
            samples.append(tuple(refill_worker_pids(c, db)))
            try:
                ids += draw(conn, "busy", 20)
            except psycopg.Error as e:
                failed = e
                break
            time.sleep(0.05)
    finally:
        result = joined(runner, outcome)
        conn.close()
    assert isinstance(result.get("error"), errors.ObjectInUse), \
        f"expected the command to fail with 55006 (other users), got {result}"
    assert len(samples) > 5, "the command gave up too fast for the test to look"
    assert failed is None, f"a draw failed while the command waited: {failed}"
    moved = [s for s in samples if s != (worker,)]
    assert not moved, f"the refill worker (pid {worker}) left or changed while the command waited: {moved[:5]}"
    assert_unique(ids)
    assert_increasing(ids)


# ---------------------------------------------------------------------------
# The smaller ones.

def test_a_database_with_a_dropped_databases_oid_never_serves_its_ranges(lc):
    """Smaller: database A (made from a template holding the extension and
    tag 't', so its id_segment has the template's OID) draws 10 IDs; it is
    dropped, and B is created from the same template with A's OID
    (CREATE DATABASE ... OID). B's 't' starts at its own row: its first ID is
    1 and every ID is at most B's max_id — none of A's cached ranges."""
    c = lc
    template = c.new_database()
    c.sql("SELECT segment_create('t')", dbname=template)  # start 1, step 1000
    a, b = f"{template}_a", f"{template}_b"
    c.sql(f"CREATE DATABASE {a} TEMPLATE {template}")
    ((oid,),) = c.sql("SELECT oid::bigint FROM pg_database WHERE datname = %s", (a,))
    assert draw_new(c, a, "t", 10) == list(range(1, 11))
    c.sql(f"DROP DATABASE {a}")
    c.sql(f"CREATE DATABASE {b} TEMPLATE {template} OID = {oid}")
    ids = draw_new(c, b, "t", 30)
    max_id = row_range(c, b, "t")[0]
    assert ids[0] == 1, f"B's first ID is {ids[0]}, not 1 from its own row: A's cached range was served"
    outside = [i for i in ids if not 1 <= i <= max_id]
    assert not outside, f"IDs above B's max_id {max_id}: {outside[:5]}"


def test_tag_dependencies_hold_for_a_role_without_access_to_id_segment(make_cluster):
    # Issue 20, item 4: segment_drop refuses while a default uses the tag;
    # a default naming a missing tag is warned about at commit, for a role
    # that can read neither id_segment nor the extension's objects beyond
    # segment_nextval — and its DDL never fails because of the check.
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT segment_create('orders')")
    c.sql("CREATE ROLE app LOGIN")
    c.sql("GRANT CREATE ON SCHEMA public TO app")
    c.sql("GRANT EXECUTE ON FUNCTION segment_nextval(text) TO app")
    notices = []
    with session(c, "postgres", user="app") as conn:
        conn.add_notice_handler(lambda d: notices.append((d.sqlstate, d.message_primary)))
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'), n int)")
        conn.execute("ALTER TABLE orders ADD COLUMN code bigint GENERATED ALWAYS AS (id * 2) STORED")
        assert notices == []
        conn.execute("CREATE TABLE typo (id bigint DEFAULT segment_nextval('ordres'))")
        assert notices == [("01000", 'the default of column "id" of table typo draws from segment tag '
                                     '"ordres", which does not exist')]
        notices.clear()
        # A tag no segment_create can make: the hint does not suggest one.
        hints = []
        conn.add_notice_handler(lambda d: hints.append(d.message_hint))
        conn.execute("CREATE TABLE too_long (id bigint DEFAULT segment_nextval('%s'))" % ("x" * 100))
        assert [n[0] for n in notices] == ["01000"] and "which cannot exist" in notices[0][1], notices
        assert "segment_create('xxx" not in hints[0] and "1 to 64 bytes" in hints[0], hints
        notices.clear()
        # Rolled back: nothing to warn about.
        conn.execute("BEGIN")
        conn.execute("CREATE TABLE gone (id bigint DEFAULT segment_nextval('nope'))")
        conn.execute("ROLLBACK")
        # Created later in the same transaction, by someone allowed to: fine.
        conn.execute("BEGIN")
        conn.execute("CREATE TABLE later (id bigint DEFAULT segment_nextval('later'))")
        c.sql("SELECT segment_create('later')")  # committed before this one
        conn.execute("COMMIT")
        assert notices == []
        conn.execute("INSERT INTO orders (n) VALUES (1)")
    with pytest.raises(errors.DependentObjectsStillExist) as refused:
        c.sql("SELECT segment_drop('orders')")
    assert 'the default of column "id" of table orders' in refused.value.diag.message_primary
    assert "force => true" in refused.value.diag.message_hint
    assert c.sql("SELECT count(*) FROM id_segment WHERE biz_tag = 'orders'") == [(1,)]
    c.sql("SELECT segment_drop('later', force => true)")
    assert c.sql("SELECT count(*) FROM id_segment WHERE biz_tag = 'later'") == [(0,)]
    c.sql("ALTER TABLE orders ALTER COLUMN id DROP DEFAULT")
    c.sql("SELECT segment_drop('orders')")


def test_the_defaults_check_never_fails_or_stalls_anyones_ddl(make_cluster):
    # Found by review: the event trigger ran as the caller, so a role that
    # could not reach the extension's schema or function could create no
    # table at all; and the commit-time check waited for a lock on
    # id_segment, so COMMIT failed under lock_timeout.
    c = make_cluster()
    c.start()
    c.sql("CREATE SCHEMA idgen")
    c.sql("ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC")
    c.sql("CREATE EXTENSION pg_idgen SCHEMA idgen")
    c.sql("SELECT idgen.segment_create('orders')")
    c.sql("CREATE ROLE app LOGIN")
    c.sql("CREATE SCHEMA app AUTHORIZATION app")
    notices = []
    with session(c, "postgres", user="app") as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        conn.execute("CREATE TABLE app.plain (id int)")
        conn.execute("CREATE TEMP TABLE scratch (id int)")
        # Naming the function needs USAGE on its schema; the check's own
        # function stays out of the role's reach (no EXECUTE for PUBLIC).
        c.sql("GRANT USAGE ON SCHEMA idgen TO app")
        conn.execute("CREATE TABLE app.typo (id bigint DEFAULT idgen.segment_nextval('ordres'))")
        # (The table as regclass prints it: schema app is the role's own.)
        assert notices == ['the default of column "id" of table typo draws from segment tag '
                           '"ordres", which does not exist']
    # id_segment held by a VACUUM FULL or TRUNCATE: COMMIT neither waits nor fails.
    with c.connect() as holder:
        holder.execute("BEGIN")
        holder.execute("LOCK idgen.id_segment IN ACCESS EXCLUSIVE MODE")
        with c.connect() as conn:
            conn.execute("SET lock_timeout = '2s'")
            conn.execute("BEGIN")
            conn.execute("CREATE TABLE locked (id bigint DEFAULT idgen.segment_nextval('nope'))")
            conn.execute("COMMIT")
        holder.execute("ROLLBACK")
    assert c.sql("SELECT count(*) FROM pg_class WHERE relname = 'locked'") == [(1,)]


def test_segment_drop_sees_the_tag_through_casts_names_collations_and_domains(make_cluster):
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    uses = {
        "named": "bigint DEFAULT segment_nextval(tag => 'named')",
        "varchar": "bigint DEFAULT segment_nextval('varchar'::varchar)",
        "collate": "bigint DEFAULT segment_nextval('collate' COLLATE \"C\")",
        "back\\slash": "bigint DEFAULT segment_nextval('back\\slash')",
    }
    for tag, column in uses.items():
        c.sql("SELECT segment_create(%s)", (tag,))
        c.sql(f"CREATE TABLE \"t_{tag}\" (id {column})")
    c.sql("SELECT segment_create('domain')")
    c.sql("CREATE DOMAIN order_id AS bigint DEFAULT segment_nextval('domain')")
    for scs in ("on", "off"):
        for tag in [*uses, "domain"]:
            with c.connect() as conn:
                conn.execute(f"SET standard_conforming_strings = {scs}")
                with pytest.raises(errors.DependentObjectsStillExist):
                    conn.execute("SELECT segment_drop(%s)", (tag,))
    assert c.sql("SELECT count(*) FROM id_segment") == [(5,)]


def test_tag_dependencies_from_plpgsql_procedures_prepared_statements_cursors_and_2pc(make_cluster):
    # Review of issue 20, item 4: segment_drop's dependency check and the
    # commit-time defaults check, from the calling contexts other than a
    # plain statement — a refusal caught by an exception block leaves the
    # tag whole (its IDs go on, none again), a COMMIT inside a procedure
    # and PREPARE TRANSACTION run the commit-time check, and a table
    # created in a subtransaction that rolled back is no longer looked at.
    c = make_cluster(conf=("max_prepared_transactions = 4",))
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT segment_create('orders', step => 10)")
    c.sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'), n int)")
    before = [r[0] for r in c.sql("INSERT INTO orders (n) SELECT g FROM generate_series(1, 25) g RETURNING id")]
    notices = []
    with c.connect() as conn:
        conn.add_notice_handler(lambda d: notices.append((d.severity_nonlocalized, d.message_primary)))
        # A refusal caught in PL/pgSQL: the tag and its cache stay.
        conn.execute("""
            DO $$ BEGIN PERFORM segment_drop('orders');
            EXCEPTION WHEN dependent_objects_still_exist THEN RAISE NOTICE 'refused: %', SQLERRM; END $$
        """)
        assert any(m.startswith("refused: ") and "orders" in m for _, m in notices), notices
        # A prepared statement and a cursor: refused the same way, each time.
        conn.execute("PREPARE drop_tag(text, boolean) AS SELECT segment_drop($1, force => $2)")
        for _ in range(2):
            with pytest.raises(errors.DependentObjectsStillExist):
                conn.execute("EXECUTE drop_tag('orders', false)")
        conn.execute("BEGIN")
        conn.execute("DECLARE c CURSOR FOR SELECT segment_drop('orders')")
        with pytest.raises(errors.DependentObjectsStillExist):
            conn.execute("FETCH c")
        conn.execute("ROLLBACK")
        assert c.sql("SELECT count(*) FROM id_segment WHERE biz_tag = 'orders'") == [(1,)]
        after = [r[0] for r in conn.execute(
            "INSERT INTO orders (n) SELECT g FROM generate_series(26, 50) g RETURNING id").fetchall()]
        assert not set(before) & set(after) and min(after) > max(before), (before, after)

        # COMMIT inside a procedure runs the commit-time check for the
        # table created before it; the procedure goes on.
        notices.clear()
        conn.execute("""
            CREATE PROCEDURE make_tables() LANGUAGE plpgsql AS $$ BEGIN
                CREATE TABLE typo1 (id bigint DEFAULT segment_nextval('ordres'));
                COMMIT;
                CREATE TABLE typo2 (id bigint DEFAULT segment_nextval('ordrs'));
            END $$""")
        conn.execute("CALL make_tables()")
        warned = sorted(m for s, m in notices if s == "WARNING")
        assert warned == ['the default of column "id" of table typo1 draws from segment tag "ordres", '
                          'which does not exist',
                          'the default of column "id" of table typo2 draws from segment tag "ordrs", '
                          'which does not exist'], notices
        assert c.sql("SELECT count(*) FROM pg_class WHERE relname IN ('typo1', 'typo2')") == [(2,)]

        # A table created in a subtransaction that rolled back: nothing to
        # look at, nothing to warn about, the commit goes through.
        notices.clear()
        conn.execute("""
            DO $$ BEGIN
                BEGIN
                    CREATE TABLE undone (id bigint DEFAULT segment_nextval('nope'));
                    RAISE division_by_zero;
                EXCEPTION WHEN division_by_zero THEN NULL; END;
                CREATE TABLE kept (id bigint DEFAULT segment_nextval('orders'));
            END $$""")
        assert [m for s, m in notices if s == "WARNING"] == [], notices
        assert c.sql("SELECT count(*) FROM pg_class WHERE relname = 'undone'") == [(0,)]

        # PREPARE TRANSACTION runs it too; the prepared transaction commits.
        notices.clear()
        conn.execute("BEGIN")
        conn.execute("CREATE TABLE typo3 (id bigint DEFAULT segment_nextval('ordes'))")
        conn.execute("PREPARE TRANSACTION 'ddl'")
        assert [m for s, m in notices if s == "WARNING"] == [
            'the default of column "id" of table typo3 draws from segment tag "ordes", which does not exist'
        ], notices
        conn.execute("COMMIT PREPARED 'ddl'")
        assert c.sql("SELECT count(*) FROM pg_class WHERE relname = 'typo3'") == [(1,)]

        # segment_setval in a prepared transaction: its currval is not
        # reported while the transaction may still be rolled back, nor after.
        conn.execute("SELECT segment_create('prepared', step => 10)")
        conn.execute("BEGIN")
        conn.execute("SELECT segment_setval('prepared', 5000)")
        assert conn.execute("SELECT segment_currval('prepared')").fetchall() == [(5000,)]
        conn.execute("PREPARE TRANSACTION 'setval'")
        with pytest.raises(errors.ObjectNotInPrerequisiteState):
            conn.execute("SELECT segment_currval('prepared')")
        conn.execute("ROLLBACK PREPARED 'setval'")
        with pytest.raises(errors.ObjectNotInPrerequisiteState):
            conn.execute("SELECT segment_currval('prepared')")
        assert conn.execute("SELECT segment_nextval('prepared')").fetchall() == [(1,)]

        # force => true through the prepared statement drops it.
        conn.execute("EXECUTE drop_tag('orders', true)")
        assert c.sql("SELECT count(*) FROM id_segment WHERE biz_tag = 'orders'") == [(0,)]


def test_a_refill_that_finds_its_row_dropped_and_created_alike_takes_the_new_one(lc):
    """Found by an attack review: a refill read the tag's row (version 0,
    max_id 0); before its UPDATE, another session dropped the tag and
    created it again, the new row alike (version 0, max_id 0). The UPDATE
    found the old row gone, the refill read the new one as the same, took
    it for a write that a trigger, rule or policy skipped, and failed with
    09000, whose hint names a trigger that is not there. The refill worker
    paused between its read and its UPDATE (refill-before-cas) makes it
    certain: now it tells the rows apart (xmin) and goes on with the new
    row; the session that waited gets its IDs, and nothing is logged."""
    c = lc
    db = c.new_database()
    c.sql("SELECT segment_create('t', step => 10)", dbname=db)
    log_before = len(c.log())
    fp = Failpoint(c, "refill-before-cas")
    fp.arm("pause")
    try:
        drawer, drawn = in_thread(lambda: draw_new(c, db, "t", 30, refill_timeout="60s"))
        fp.wait_reached(REACH_TIMEOUT)
        with session(c, db, autocommit=False) as a:
            a.execute("SELECT segment_drop('t')")
            a.execute("SELECT segment_create('t', step => 10)")
            fp.release()
            # The refill's UPDATE waits for the dropped row's lock.
            assert wait_for(lambda: c.sql(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
                (db,))[0][0] > 0)
            a.commit()
        result = joined(drawer, drawn)
    finally:
        fp.release()
    assert "error" not in result, result.get("error")
    ids = result["value"]
    assert len(ids) == 30
    assert_unique(ids)
    assert_increasing(ids)
    assert "left it at" not in c.log()[log_before:]
    assert status_row(c, "t", "last_error", dbname=db) == (None,)
