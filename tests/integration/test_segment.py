"""Segment IDs against a real server: concurrency, rollbacks, open
transactions, outside allocators, dump and restore, drops, and the errors
that need more than one session to provoke."""

import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from psycopg import errors

from adversary import paused
from helpers import assert_increasing, assert_unique, draw, row_locked, wait_for


def draw_batches(cluster, db, tag, batches, size, use_setof=False):
    """One session drawing `batches * size` IDs, in the order received."""
    ids = []
    query = (f"SELECT * FROM segment_nextval(%s, {size})" if use_setof
             else f"SELECT segment_nextval(%s) FROM generate_series(1, {size})")
    with cluster.connect(db) as conn:
        for _ in range(batches):
            ids.extend(row[0] for row in conn.execute(query, (tag,)))
    return ids


@pytest.fixture(scope="module")
def one_step_cluster(make_module_cluster):
    """A cluster whose worker takes one step per refill (max_ids_ahead is
    below every step used here), so refills race the callers all the time
    instead of being batched away by the adaptive prefetch."""
    c = make_module_cluster(conf=["pg_idgen.max_ids_ahead = 1"])
    c.start()
    return c


def test_four_sessions_racing_refills_never_share_an_id(one_step_cluster):
    # step = 10: every session needs a refill every few IDs, so refills and
    # range switches race all the time: 6,000 refills (40,000 in the soak,
    # tests/torture.sh).
    batches = 100 if os.environ.get("PG_IDGEN_TORTURE") == "long" else 15
    cluster, db = one_step_cluster, one_step_cluster.new_database()
    cluster.sql("SELECT segment_create('race', step => 10)", dbname=db)
    with ThreadPoolExecutor(4) as pool:
        sessions = list(pool.map(
            lambda i: draw_batches(cluster, db, "race", batches=batches, size=1000, use_setof=i % 2 == 1),
            range(4)))
    for ids in sessions:
        assert len(ids) == batches * 1000
        assert_increasing(ids)
    every_id = [i for ids in sessions for i in ids]
    assert_unique(every_id)
    (max_id, refills), = cluster.sql(
        "SELECT s.max_id, st.refills FROM id_segment s JOIN segment_status st ON st.tag = s.biz_tag "
        "WHERE s.biz_tag = 'race'", dbname=db)
    assert max(every_id) <= max_id, "an ID above max_id was handed out"
    assert refills >= len(every_id) // 10


def test_ids_drawn_in_rolled_back_transactions_are_never_reused(cluster, db):
    cluster.sql("SELECT segment_create('rb', step => 5)", dbname=db)
    cluster.sql("CREATE TABLE rb (id bigint PRIMARY KEY DEFAULT segment_nextval('rb'))", dbname=db)
    received = []
    with cluster.connect(db, autocommit=False) as conn:
        for round_no in range(60):
            received += [r[0] for r in conn.execute("INSERT INTO rb DEFAULT VALUES RETURNING id")]
            received += [r[0] for r in conn.execute("SELECT segment_nextval('rb') FROM generate_series(1, 3)")]
            conn.rollback() if round_no % 2 else conn.commit()
    assert len(received) == 240
    assert_unique(received)
    assert_increasing(received)
    # The committed rows are exactly the even rounds' inserts.
    (committed,), = cluster.sql("SELECT count(*) FROM rb", dbname=db)
    assert committed == 30
    # Rolled-back refills? There are none: max_id covers every ID received.
    (max_id,), = cluster.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'rb'", dbname=db)
    assert max(received) <= max_id


def test_an_open_transaction_holds_no_lock_and_delays_no_one(cluster, db):
    cluster.sql("SELECT segment_create('open', step => 10)", dbname=db)
    holder = cluster.connect(db, autocommit=False)
    try:
        # Draw across several refills inside a transaction, and keep it open.
        held = [r[0] for r in holder.execute("SELECT segment_nextval('open') FROM generate_series(1, 95)")]
        holder_pid = holder.info.backend_pid
        locks = cluster.sql(
            "SELECT count(*) FROM pg_locks WHERE pid = %s AND relation = 'id_segment'::regclass",
            (holder_pid,), dbname=db)
        assert locks == [(0,)], "the drawing transaction holds a lock on id_segment"
        with cluster.connect(db) as other:
            other.execute("SET statement_timeout = '30s'")
            started = time.monotonic()
            drawn = [r[0] for r in other.execute("SELECT segment_nextval('open') FROM generate_series(1, 20000)")]
            elapsed = time.monotonic() - started
        assert holder.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert_unique(held + drawn)
        # 2,000 refills while the other transaction stays open; each one is
        # a short committed transaction of the worker's, never blocked.
        assert elapsed < 20, f"20,000 IDs took {elapsed:.1f} s"
        (failures,), = cluster.sql("SELECT refill_failures FROM segment_status WHERE tag = 'open'", dbname=db)
        assert failures == 0
    finally:
        holder.rollback()
        holder.close()


def outside_allocator(cluster, db, tag, ranges_wanted, granted, stop):
    """The classic version-CAS protocol (Meituan Leaf's segment mode), run by an application on the same row."""
    with cluster.connect(db, autocommit=False) as conn:
        while len(granted) < ranges_wanted and not stop.is_set():
            (max_id, step, version), = conn.execute(
                "SELECT max_id, step, version FROM id_segment WHERE biz_tag = %s", (tag,)).fetchall()
            cur = conn.execute(
                "UPDATE id_segment SET max_id = %s, version = version + 1 WHERE biz_tag = %s AND version = %s",
                (max_id + step, tag, version))
            won = cur.rowcount == 1
            conn.commit()
            if won:
                granted.append(range(max_id + 1, max_id + step + 1))


def test_an_outside_cas_allocator_never_overlaps_the_extension(one_step_cluster):
    cluster, db = one_step_cluster, one_step_cluster.new_database()
    cluster.sql("SELECT segment_create('shared', step => 50)", dbname=db)
    granted, stop = [], threading.Event()
    outside = threading.Thread(target=outside_allocator, args=(cluster, db, "shared", 400, granted, stop))
    outside.start()
    try:
        with ThreadPoolExecutor(2) as pool:
            sessions = list(pool.map(lambda _: draw_batches(cluster, db, "shared", 50, 1000), range(2)))
    finally:
        stop.set()
        outside.join()
    assert len(granted) >= 50, "the outside allocator barely ran; the race was not exercised"
    ours = [i for ids in sessions for i in ids]
    assert_unique(ours)
    theirs = {i for r in granted for i in r}
    overlap = theirs.intersection(ours)
    assert not overlap, f"{len(overlap)} IDs given to both allocators, e.g. {sorted(overlap)[:5]}"


def test_dump_and_restore_continue_above_every_id_drawn_before(cluster, tmp_path):
    source = cluster.new_database()
    cluster.sql("SELECT segment_create('orders', step => 100)", dbname=source)
    cluster.sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'), n int)",
                dbname=source)
    cluster.sql("INSERT INTO orders (n) SELECT g FROM generate_series(1, 250) g", dbname=source)
    before = draw_batches(cluster, source, "orders", 1, 137)
    before += [r[0] for r in cluster.sql("SELECT id FROM orders", dbname=source)]
    dump = tmp_path / "dump.sql"
    cluster.client("pg_dump", "-d", source, "-f", str(dump))
    target = cluster.new_database(extension=False)
    restore = cluster.client("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", target, "-f", str(dump))
    # The table comes before id_segment's rows: pg_dump's
    # check_function_bodies = false keeps the default from being warned about.
    assert "WARNING" not in restore.stderr, restore.stderr
    (rows,), = cluster.sql("SELECT count(*) FROM orders", dbname=target)
    assert rows == 250
    # Rows inserted after the restore carry n > 1000.
    cluster.sql("INSERT INTO orders (n) SELECT g FROM generate_series(1001, 1500) g", dbname=target)
    after = draw_batches(cluster, target, "orders", 2, 500)
    after += [r[0] for r in cluster.sql("SELECT id FROM orders WHERE n > 1000", dbname=target)]
    assert_unique(after)
    assert min(after) > max(before), "the restored database handed out an ID drawn before the dump"


def test_drop_database_succeeds_right_after_heavy_use(cluster):
    victim = cluster.new_database()
    cluster.sql("SELECT segment_create('busy', step => 10)", dbname=victim)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda _: draw_batches(cluster, victim, "busy", 5, 2000), range(2)))
    workers = cluster.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_idgen refill worker' AND datname = %s",
        (victim,))
    assert workers == [(1,)], "the refill worker should still be there, idle"
    # DROP DATABASE gives up with 55006 ("being accessed by other users")
    # after waiting 5 s for other processes: succeeding at all is the
    # check. (No bound on its time: the sessions that just closed may take
    # a while to exit on a busy machine, and the worker waits for them.)
    cluster.sql(f"DROP DATABASE {victim}")
    assert cluster.sql("SELECT count(*) FROM pg_database WHERE datname = %s", (victim,)) == [(0,)]


def test_drop_extension_right_after_use_and_a_fresh_start(cluster, db):
    cluster.sql("SELECT segment_create('t', step => 1000)", dbname=db)
    first = draw_batches(cluster, db, "t", 1, 1500)
    assert first[0] == 1
    cluster.sql("DROP EXTENSION pg_idgen", dbname=db)
    cluster.sql("CREATE EXTENSION pg_idgen", dbname=db)
    cluster.sql("SELECT segment_create('t', start => 1000000, step => 1000)", dbname=db)
    # Ranges cached from the dropped table are not handed out for the new one.
    again = draw_batches(cluster, db, "t", 1, 10)
    assert again == list(range(1000000, 1000010))


def test_a_locked_row_ends_in_the_timeout_error_and_work_resumes(cluster, db):
    cluster.sql("SELECT segment_create('locked', step => 100)", dbname=db)
    with row_locked(cluster, db, "locked"), cluster.connect(db) as conn:
        conn.execute("SET pg_idgen.refill_timeout = '700ms'")
        started = time.monotonic()
        with pytest.raises(errors.LockNotAvailable) as caught:
            conn.execute("SELECT segment_nextval('locked')")
        waited = time.monotonic() - started
        assert 0.6 < waited < 10
        assert "got no new range within pg_idgen.refill_timeout" in str(caught.value)
        assert "locked by another transaction" in str(caught.value)
        assert caught.value.diag.message_hint.startswith("A transaction holds the row")
    assert cluster.sql("SELECT segment_nextval('locked')", dbname=db) == [(1,)]


@pytest.mark.parametrize("how", ["cancel", "statement_timeout", "terminate"])
def test_a_waiting_call_ends_at_once_on_cancel_timeout_or_terminate(cluster, db, how):
    cluster.sql("SELECT segment_create('w', step => 100)", dbname=db)
    with row_locked(cluster, db, "w"), cluster.connect(db) as conn:
        conn.execute("SET pg_idgen.refill_timeout = '60s'")
        if how == "statement_timeout":
            conn.execute("SET statement_timeout = '400ms'")
        else:
            pid = conn.info.backend_pid
            function = "pg_cancel_backend" if how == "cancel" else "pg_terminate_backend"
            timer = threading.Timer(0.4, lambda: cluster.sql(f"SELECT {function}(%s)", (pid,)))
            timer.start()
        started = time.monotonic()
        with pytest.raises((errors.QueryCanceled, errors.AdminShutdown, psycopg.OperationalError)):
            conn.execute("SELECT segment_nextval('w')")
        assert time.monotonic() - started < 20, "the wait did not end at once (refill_timeout is 60 s)"


def test_max_id_moved_backwards_is_refused(one_step_cluster):
    cluster, db = one_step_cluster, one_step_cluster.new_database()
    cluster.sql("SELECT segment_create('tamper', step => 10)", dbname=db)
    with cluster.connect(db) as conn:
        drawn = [conn.execute("SELECT segment_nextval('tamper')").fetchone()[0] for _ in range(25)]
        # The table itself refuses: the trigger holds across restarts.
        with pytest.raises(errors.CheckViolation) as refused:
            conn.execute("UPDATE id_segment SET max_id = 3, version = version + 1 WHERE biz_tag = 'tamper'")
        assert "cannot move back" in str(refused.value)
        assert "pg_idgen.allow_max_id_decrease" in refused.value.diag.message_hint
        # A superuser may lower it on purpose; this server, which handed out
        # IDs above it, still refuses to repeat them.
        with conn.transaction():
            conn.execute("SET LOCAL pg_idgen.allow_max_id_decrease = on")
            conn.execute("UPDATE id_segment SET max_id = 3, version = version + 1 WHERE biz_tag = 'tamper'")
        with pytest.raises(errors.DataException) as caught:
            for _ in range(100):
                drawn.append(conn.execute("SELECT segment_nextval('tamper')").fetchone()[0])
    assert "went backwards" in str(caught.value)
    assert "UPDATE id_segment SET max_id" in caught.value.diag.message_hint
    assert_unique(drawn)
    assert_increasing(drawn)


def test_too_many_tags_for_shared_memory(make_cluster):
    c = make_cluster(conf=["pg_idgen.max_tags = 16", "pg_idgen.max_tags_per_database = 16"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT segment_create('t' || g) FROM generate_series(1, 17) g")
    for g in range(1, 17):
        c.sql(f"SELECT segment_nextval('t{g}')")
    with pytest.raises(errors.ConfigurationLimitExceeded) as caught:
        c.sql("SELECT segment_nextval('t17')")
    assert "pg_idgen.max_tags = 16" in str(caught.value)
    assert "Raise pg_idgen.max_tags" in caught.value.diag.message_hint
    # Dropping a tag frees its slot.
    c.sql("SELECT segment_drop('t1')")
    assert c.sql("SELECT segment_nextval('t17')") == [(1,)]
    # So does dropping a database whose tags fill shared memory.
    c.sql("CREATE DATABASE doomed")
    c.sql("CREATE EXTENSION pg_idgen", dbname="doomed")
    c.sql("SELECT segment_create('d')", dbname="doomed")
    with pytest.raises(errors.ConfigurationLimitExceeded):
        c.sql("SELECT segment_nextval('d')", dbname="doomed")
    c.sql("SELECT segment_drop('t2')")
    assert c.sql("SELECT segment_nextval('d')", dbname="doomed") == [(1,)]
    c.sql("DROP DATABASE doomed")
    c.sql("SELECT segment_create('t18')")
    assert c.sql("SELECT segment_nextval('t18')") == [(1,)]


def test_without_preloading_every_function_names_the_setting(make_cluster):
    c = make_cluster(preload=False)
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    for call in ["SELECT segment_nextval('x')", "SELECT * FROM segment_nextval('x', 2)",
                 "SELECT segment_create('x')", "SELECT segment_drop('x')", "SELECT * FROM segment_status",
                 "SELECT snowflake_nextval()", "SELECT snowflake_js_nextval()", "SELECT * FROM snowflake_parse(1)",
                 "SELECT snowflake_format(1)", "SELECT snowflake_from_timestamp(now())",
                 "SELECT snowflake_timestamp(1)", "SELECT snowflake_machine_id(1)",
                 "SELECT snowflake_sequence(1)",
                 "SELECT * FROM snowflake_status", "SELECT * FROM segment_reserve('x', 5)",
                 "SELECT segment_attach('x', 'central')"]:
        with pytest.raises(errors.ObjectNotInPrerequisiteState) as caught:
            c.sql(call)
        assert "must be loaded via shared_preload_libraries" in str(caught.value), call
        assert "shared_preload_libraries" in caught.value.diag.message_hint
    assert c.sql("SELECT count(*) FROM id_segment") == [(0,)], "segment_create must not have written"
    # The stateless helpers need no shared memory: base62, and the snowflake
    # helpers that take the layout.
    assert c.sql("SELECT idgen_base62(3844), idgen_base62_decode('100')") == [("100", 3844)]
    assert c.sql("SELECT snowflake_machine_id((5 << 12) | 7, '2025-01-01 00:00:00+00', 10, 12), "
                 "snowflake_sequence((5 << 12) | 7, '2025-01-01 00:00:00+00', 10, 12)") == [(5, 7)]


def test_a_hot_standby_refuses_to_hand_out_ids(make_cluster):
    """Both generators refuse on a hot standby (made with pg_basebackup)."""
    primary = make_cluster()
    primary.start()
    primary.sql("CREATE EXTENSION pg_idgen")
    primary.sql("SELECT segment_create('orders')")
    assert primary.sql("SELECT segment_nextval('orders')") == [(1,)]
    standby = make_cluster()
    subprocess.run(["rm", "-rf", standby.data], check=True)
    primary.client("pg_basebackup", "-c", "fast", "-D", standby.data, "-R", "-X", "stream")
    subprocess.run(["chown", "-R", "postgres:postgres", standby.data], check=True)
    standby.append_conf(f"unix_socket_directories = '{standby.dir}'", "hot_standby = on")
    standby.start()
    assert standby.sql("SELECT pg_is_in_recovery()") == [(True,)]
    with pytest.raises(errors.ReadOnlySqlTransaction) as caught:
        standby.sql("SELECT segment_nextval('orders')")
    assert "cannot execute segment_nextval() during recovery" in str(caught.value)
    assert caught.value.diag.message_hint == (
        "IDs are handed out, and tags changed, on the primary server only; connect to it instead.")
    # So are the functions that change tags (found by an attack review:
    # segment_create failed on a lock, not as a read-only call).
    for function, call in [("segment_create()", "segment_create('fresh')"),
                           ("segment_setval()", "segment_setval('orders', 100000)"),
                           ("segment_drop()", "segment_drop('orders')"),
                           ("segment_rename()", "segment_rename('orders', 'renamed')")]:
        with pytest.raises(errors.ReadOnlySqlTransaction) as caught:
            standby.sql(f"SELECT {call}")
        assert f"cannot execute {function} during recovery" in str(caught.value)
    # segment_currval too points to the primary: no session here can draw.
    with pytest.raises(errors.ObjectNotInPrerequisiteState) as caught:
        standby.sql("SELECT segment_currval('orders')")
    assert caught.value.diag.message_hint == (
        "IDs can only be handed out on the primary server: connect to it, and call "
        "segment_nextval('orders') there first, in the session that calls segment_currval.")
    # A standby shares the primary's machine id: it must not hand out
    # snowflake IDs either.
    with pytest.raises(errors.ReadOnlySqlTransaction) as caught:
        standby.sql("SELECT snowflake_nextval()")
    assert "cannot execute snowflake_nextval() during recovery" in str(caught.value)


def test_the_worker_leaves_when_idle_and_comes_back_on_demand(make_cluster):
    c = make_cluster(conf=["pg_idgen.worker_idle_timeout = '1s'"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT segment_create('idle', step => 10)")
    worker_count = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_idgen refill worker'"
    assert c.sql("SELECT count(segment_nextval('idle')) FROM generate_series(1, 100)") == [(100,)]
    assert c.sql(worker_count) == [(1,)]
    assert wait_for(lambda: c.sql(worker_count) == [(0,)], timeout=10), "the idle worker did not leave"
    assert c.sql("SELECT count(segment_nextval('idle')) FROM generate_series(1, 100)") == [(100,)]
    assert "pg_idgen" not in "".join(line for line in c.log().splitlines() if "ERROR" in line)


def test_no_room_for_a_refill_worker_is_a_clear_error(make_cluster):
    # The logical replication launcher and the snowflake keeper take both
    # worker slots: the refill worker cannot start.
    c = make_cluster(conf=["max_worker_processes = 2", "pg_idgen.refill_timeout = '2s'"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT segment_create('crowded')")
    with pytest.raises(errors.ConfigurationLimitExceeded) as caught:
        c.sql("SELECT segment_nextval('crowded')")
    assert 'could not start the pg_idgen refill worker for database "postgres"' in str(caught.value)
    assert "max_worker_processes" in caught.value.diag.message_hint


def test_a_waiting_call_shows_its_wait_event(cluster, db):
    """From PostgreSQL 17 a call waiting for a refill shows pg_idgen's own
    wait event in pg_stat_activity; before 17, the generic Extension."""
    cluster.sql("SELECT segment_create('shown', step => 100)", dbname=db)
    (version,), = cluster.sql("SHOW server_version_num")
    expected = "PgIdgenRefill" if int(version) >= 170000 else "Extension"
    with row_locked(cluster, db, "shown"), cluster.connect(db) as waiter:
        waiter.execute("SET pg_idgen.refill_timeout = '60s'")
        pid = waiter.info.backend_pid
        caught = []
        thread = threading.Thread(target=lambda: _expect_error(waiter, caught))
        thread.start()
        try:
            seen = wait_for(lambda: cluster.sql(
                "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s",
                (pid,)) == [("Extension", expected)], timeout=30)
        finally:
            cluster.sql("SELECT pg_cancel_backend(%s)", (pid,))
            thread.join(30)
        assert seen, cluster.sql("SELECT wait_event_type, wait_event FROM pg_stat_activity "
                                 "WHERE pid = %s", (pid,))
        assert caught and isinstance(caught[0], errors.QueryCanceled)


def _expect_error(conn, caught):
    try:
        conn.execute("SELECT segment_nextval('shown')")
    except psycopg.Error as e:
        caught.append(e)


def test_segment_currval_never_goes_back_to_a_value_older_than_the_last_id(lc):
    """Found by an attack review: segment_currval gave a value older than the
    last ID the session got — its own segment_setval's (committed, or rolled
    back and so the ID before it), after another session's setval gave up
    the slot the later IDs came from, and after the session dropped the tag
    (created again too). A slot given up since no longer counts, and neither
    does anything older: 55000, as for a tag the session never drew. A drop
    rolled back gives back what was there."""
    db = lc.new_database()
    setvals = {"committed": ["SELECT segment_setval('t', 100)"],
               "rolled_back": ["BEGIN", "SELECT segment_setval('t', 100)", "ROLLBACK"]}
    with lc.connect(db) as a, lc.connect(db) as b:
        a.autocommit = b.autocommit = True
        for how, statements in setvals.items():
            lc.sql("SELECT segment_create('t', step => 10)", dbname=db)
            first = draw(a, "t", 3)
            for statement in statements:
                a.execute(statement)
            assert a.execute("SELECT segment_currval('t')").fetchone() == \
                ((100,) if how == "committed" else (first[-1],))
            later = draw(a, "t", 2)
            assert a.execute("SELECT segment_currval('t')").fetchone() == (later[-1],), how
            b.execute("SELECT segment_setval('t', 500)")
            with pytest.raises(errors.ObjectNotInPrerequisiteState):
                a.execute("SELECT segment_currval('t')")
            assert draw(a, "t", 1) == [501]
            assert a.execute("SELECT segment_currval('t')").fetchone() == (501,)
            # A drop rolled back gives back the last ID; a drop committed
            # leaves nothing, also once the tag is created again.
            a.execute("BEGIN")
            a.execute("SELECT segment_drop('t')")
            a.execute("ROLLBACK")
            assert a.execute("SELECT segment_currval('t')").fetchone() == (501,)
            a.execute("SELECT segment_setval('t', 1000)")
            assert draw(a, "t", 2) == [1001, 1002]
            a.execute("SELECT segment_drop('t')")
            with pytest.raises(errors.ObjectNotInPrerequisiteState):
                a.execute("SELECT segment_currval('t')")
            lc.sql("SELECT segment_create('t', start => 2000, step => 10)", dbname=db)
            with pytest.raises(errors.ObjectNotInPrerequisiteState):
                a.execute("SELECT segment_currval('t')")
            assert draw(a, "t", 1) == [2000]
            assert a.execute("SELECT segment_currval('t')").fetchone() == (2000,)
            lc.sql("SELECT segment_drop('t')", dbname=db)


def test_segment_currval_stays_undefined_once_another_tag_takes_the_slot_given_up(make_cluster):
    """Found by an attack review: after another session's segment_setval
    gave up the slot a session's last IDs came from, segment_currval raised
    55000 — until the session drew another tag, which took the freed slot
    (a server just started hands out its slots lowest first): then it gave
    the session's older value again, its own setval's or one drawn in the
    transaction that created the tag."""
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    with c.connect() as a, c.connect() as b:
        for how in ("own setval", "created here"):
            tag, other = f"t_{how[:3]}", f"c_{how[:3]}"
            if how == "own setval":
                a.execute("SELECT segment_create(%s)", (tag,))
                a.execute("SELECT segment_setval(%s, 100)", (tag,))
            else:
                a.execute("BEGIN")
                a.execute("SELECT segment_create(%s)", (tag,))
                draw(a, tag, 1)
                a.execute("COMMIT")
            last = draw(a, tag, 2)[-1]
            assert a.execute("SELECT segment_currval(%s)", (tag,)).fetchone() == (last,)
            b.execute("SELECT segment_setval(%s, 100000)", (tag,))
            a.execute("SELECT segment_create(%s)", (other,))
            draw(a, other, 1)
            for _ in range(2):
                with pytest.raises(errors.ObjectNotInPrerequisiteState):
                    a.execute("SELECT segment_currval(%s)", (tag,))
                draw(b, tag, 1)
            assert draw(a, tag, 1) == [100003]
            assert a.execute("SELECT segment_currval(%s)", (tag,)).fetchone() == (100003,)


def test_discard_all_and_discard_sequences_forget_segment_currval_as_a_sequences(lc):
    """A session pooler resets a server connection with DISCARD ALL
    (PgBouncer's server_reset_query) before the next client gets it: that
    client must see no segment_currval of the previous one, as it sees no
    currval of a sequence. DISCARD SEQUENCES forgets it too (in a
    transaction also, and a rollback brings nothing back); DISCARD PLANS
    and DISCARD TEMP do not."""
    db = lc.new_database()
    lc.sql("SELECT segment_create('t', step => 10)", dbname=db)
    lc.sql("CREATE SEQUENCE s", dbname=db)

    def currvals(conn):
        got = []
        for call in ("segment_currval('t')", "currval('s')"):
            try:
                got.append(conn.execute(f"SELECT {call}").fetchone()[0])
            except errors.ObjectNotInPrerequisiteState:
                got.append(None)
        return got

    with lc.connect(db) as conn:
        for discard, forgets in (("DISCARD PLANS", False), ("DISCARD TEMP", False),
                                 ("DISCARD ALL", True), ("DISCARD SEQUENCES", True)):
            last = draw(conn, "t", 2)[-1]
            (value,), = conn.execute("SELECT nextval('s')").fetchall()
            conn.execute("SELECT segment_setval('t', %s)", (last + 100,))
            assert draw(conn, "t", 1) == [last + 101]
            conn.execute(discard)
            assert currvals(conn) == ([None, None] if forgets else [last + 101, value]), discard
        # In a transaction, after a setval of its own: a rollback brings back
        # neither the setval's value nor the one before it.
        last = draw(conn, "t", 1)[-1]
        conn.execute("BEGIN")
        conn.execute("SELECT segment_setval('t', %s)", (last + 1000,))
        conn.execute("DISCARD SEQUENCES")
        conn.execute("ROLLBACK")
        assert currvals(conn)[0] is None
        # Drawing defines it again.
        after = draw(conn, "t", 1)
        assert currvals(conn)[0] == after[0]


def test_an_error_inside_a_utility_statement_reaches_the_client_as_raised(lc):
    """Found by an attack review: the DISCARD hook (which sees every utility
    statement) ran PostgreSQL's processing inside pgrx's error boundary,
    which raised an ERROR from a CALL, a DO block or DDL again without its
    own SQLSTATE (an application's became XX000, so an EXCEPTION handler
    around the CALL no longer caught it), CONTEXT, position and constraint
    fields. They come through as raised."""
    db = lc.new_database()
    lc.sql("""CREATE PROCEDURE p_custom() LANGUAGE plpgsql AS
              $$ BEGIN RAISE EXCEPTION 'custom' USING ERRCODE = 'U0001'; END $$""", dbname=db)
    lc.sql("CREATE TABLE x (id int CONSTRAINT x_pk PRIMARY KEY)", dbname=db)
    lc.sql("INSERT INTO x VALUES (1)", dbname=db)
    lc.sql("CREATE PROCEDURE p_dup() LANGUAGE sql AS $$ INSERT INTO x VALUES (1) $$", dbname=db)
    lc.sql("""CREATE FUNCTION catches() RETURNS text LANGUAGE plpgsql AS
              $$ BEGIN CALL p_custom(); RETURN 'not raised';
                 EXCEPTION WHEN SQLSTATE 'U0001' THEN RETURN 'caught'; END $$""", dbname=db)
    with lc.connect(db) as conn:
        for statement in ("CALL p_custom()",
                          "DO $$ BEGIN RAISE EXCEPTION 'custom' USING ERRCODE = 'U0001'; END $$"):
            with pytest.raises(psycopg.Error) as raised:
                conn.execute(statement)
            assert raised.value.sqlstate == "U0001", statement
            assert "PL/pgSQL function" in (raised.value.diag.context or ""), statement
        with pytest.raises(errors.UniqueViolation) as raised:
            conn.execute("CALL p_dup()")
        assert (raised.value.diag.constraint_name, raised.value.diag.table_name) == ("x_pk", "x")
        assert conn.execute("SELECT catches()").fetchone() == ("caught",)
        with pytest.raises(errors.UndefinedObject) as raised:
            conn.execute("CREATE TABLE y (a nosuchtype)")
        assert raised.value.diag.statement_position == "19"


def test_dropping_a_table_that_is_only_named_id_segment_frees_no_cached_range(lc):
    """Found by an attack review: the drop hook knew pg_idgen's table by its
    name, so any role with TEMP emptied every cached range of the database
    (a gap and a refill wait on every tag) by dropping a temporary
    id_segment, and a tag created after it in that transaction was refused.
    Only the extension's own table counts; DROP EXTENSION still frees."""
    db = lc.new_database()
    lc.sql("SELECT segment_create('t', step => 10)", dbname=db)
    lc.sql("CREATE ROLE temp_user LOGIN", dbname=db)
    lc.sql(f"GRANT TEMP ON DATABASE {db} TO temp_user", dbname=db)
    with lc.connect(db) as drawer, psycopg.connect(host=lc.dir, port=lc.port, user="temp_user", dbname=db,
                                                   autocommit=True) as other:
        assert draw(drawer, "t", 3) == [1, 2, 3]
        other.execute("CREATE TEMP TABLE id_segment (x int)")
        other.execute("DROP TABLE pg_temp.id_segment")
        lc.sql("CREATE SCHEMA elsewhere; CREATE TABLE elsewhere.id_segment (x int); "
               "DROP TABLE elsewhere.id_segment", dbname=db)
        assert draw(drawer, "t", 2) == [4, 5], "the cached range is still there"
        drawer.execute("BEGIN")
        drawer.execute("CREATE TEMP TABLE id_segment (x int)")
        drawer.execute("DROP TABLE pg_temp.id_segment")
        drawer.execute("SELECT segment_create('new_here')")
        assert draw(drawer, "new_here", 2) == [1, 2]
        drawer.execute("COMMIT")
    lc.sql("DROP EXTENSION pg_idgen", dbname=db)
    lc.sql("CREATE EXTENSION pg_idgen", dbname=db)
    (slots,), = lc.sql("SELECT count(*) FROM segment_status WHERE database = %s", (db,), dbname=db)
    assert slots == 0, "DROP EXTENSION frees the database's slots"


def test_segment_setval_moves_every_session_above_the_value_even_with_a_refill_in_flight(lc):
    """Session A draws (its tag's ranges are cached in shared memory); the
    worker is stopped between its CAS commit and publishing the next range
    (worker-before-publish); session B runs segment_setval(tag, v) from a
    PL/pgSQL function and returns while the worker is still stopped. Once
    released, the range it took before the setval is never handed out:
    every ID A draws next is above v, none repeats; segment_currval follows
    in each session. Then the same from a prepared statement and a DO
    block, each time above the new value."""
    db = lc.new_database()
    lc.sql("SELECT segment_create('t', step => 100)", dbname=db)
    lc.sql("CREATE FUNCTION set_t(v bigint) RETURNS bigint LANGUAGE plpgsql "
           "AS $$ BEGIN RETURN segment_setval('t', v); END $$", dbname=db)
    with lc.connect(db) as a, lc.connect(db) as b:
        drawn = [r[0] for r in a.execute("SELECT segment_nextval('t') FROM generate_series(1, 150)")]
        with paused(lc, "worker-before-publish",
                    trigger=lambda: lc.sql("SELECT segment_nextval('t') FROM generate_series(1, 5)",
                                           dbname=db)):
            (max_id,), = lc.sql("SELECT max_id FROM id_segment WHERE biz_tag = 't'", dbname=db)
            value = max_id + 1_000
            assert b.execute("SELECT set_t(%s)", (value,)).fetchone() == (value,)
        after = [r[0] for r in a.execute("SELECT segment_nextval('t') FROM generate_series(1, 500)")]
        assert min(after) > value, (min(after), value)
        assert a.execute("SELECT segment_currval('t')").fetchone() == (max(after),)
        assert b.execute("SELECT segment_currval('t')").fetchone() == (value,)
        for how in ("prepared", "do"):
            # The row locked first, so that the prefetching worker cannot
            # raise max_id past the value before the setval.
            with b.transaction():
                (max_id,), = b.execute("SELECT max_id FROM id_segment WHERE biz_tag = 't' FOR UPDATE")
                value = max_id + 10_000
                if how == "prepared":
                    b.execute("SELECT segment_setval('t', %s)", (value,), prepare=True)
                else:
                    b.execute(f"DO $$ BEGIN PERFORM segment_setval('t', {value}); END $$")
            more = [r[0] for r in a.execute("SELECT segment_nextval('t') FROM generate_series(1, 300)")]
            assert min(more) > value, (how, min(more), value)
            after += more
    assert_unique(drawn + after)


def test_every_function_table_view_and_column_of_the_extension_has_a_comment(lc):
    """\\df+ and \\d+ describe everything pg_idgen creates."""
    db = lc.new_database()
    missing = lc.sql("""
        SELECT pg_describe_object(d.classid, d.objid, 0) FROM pg_depend d
         WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idgen') AND d.deptype = 'e'
           AND d.classid IN ('pg_proc'::regclass, 'pg_class'::regclass)
           AND obj_description(d.objid, d.classid::regclass::text) IS NULL
        UNION ALL
        SELECT format('column %s.%s', c.relname, a.attname)
          FROM pg_depend d JOIN pg_class c ON c.oid = d.objid AND d.classid = 'pg_class'::regclass
          JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
         WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idgen') AND d.deptype = 'e'
           AND c.relkind IN ('r', 'v') AND col_description(c.oid, a.attnum) IS NULL""", dbname=db)
    assert missing == [], missing


def test_segment_setval_from_a_trigger_and_a_cursor_holds_through_a_crash_and_a_restart(make_cluster):
    """segment_setval from a BEFORE INSERT trigger and from a cursor, each
    committed, then the server crashed (and later restarted cleanly): the
    next IDs are above the last value set, in new sessions too, and none
    repeats; segment_currval is per session (a new one has none)."""
    c = make_cluster()
    c.start()
    db = c.new_database()
    for statement in [
        "SELECT segment_create('t', step => 100)",
        "CREATE TABLE marks (v bigint)",
        "CREATE FUNCTION mark() RETURNS trigger LANGUAGE plpgsql "
        "AS $$ BEGIN PERFORM segment_setval('t', NEW.v); RETURN NEW; END $$",
        "CREATE TRIGGER mark BEFORE INSERT ON marks FOR EACH ROW EXECUTE FUNCTION mark()",
    ]:
        c.sql(statement, dbname=db)
    drawn = [r[0] for r in c.sql("SELECT segment_nextval('t') FROM generate_series(1, 500)", dbname=db)]

    # Each value is set above max_id in a transaction that first locks the
    # tag's row: the refill worker, prefetching meanwhile, cannot raise
    # max_id past it (on a busy machine it took 7,500 IDs between a plain
    # read and the setval, which was then refused as a move back).
    def locked_max_id(conn):
        return conn.execute("SELECT max_id FROM id_segment WHERE biz_tag = 't' FOR UPDATE").fetchone()[0]

    with c.connect(db, autocommit=False) as conn:
        value = locked_max_id(conn) + 1_000
        conn.execute("INSERT INTO marks VALUES (%s)", (value,))
        conn.commit()
    got = [r[0] for r in c.sql("SELECT segment_nextval('t') FROM generate_series(1, 300)", dbname=db)]
    assert min(got) > value
    drawn += got
    with c.connect(db, autocommit=False) as conn:
        value = locked_max_id(conn) + 1_000
        conn.execute("DECLARE setting CURSOR FOR SELECT segment_setval('t', %s)", (value,))
        assert conn.execute("FETCH setting").fetchone() == (value,)
        conn.commit()
    c.stop("immediate")
    c.start()
    got = [r[0] for r in c.sql("SELECT segment_nextval('t') FROM generate_series(1, 300)", dbname=db)]
    assert min(got) > value
    drawn += got
    with c.connect(db, autocommit=False) as conn:
        value = locked_max_id(conn) + 1_000
        conn.execute("SELECT segment_setval('t', %s)", (value,))
        conn.commit()
    c.restart()
    with pytest.raises(errors.ObjectNotInPrerequisiteState):
        c.sql("SELECT segment_currval('t')", dbname=db)
    got = [r[0] for r in c.sql("SELECT segment_nextval('t') FROM generate_series(1, 300)", dbname=db)]
    assert min(got) > value
    drawn += got
    assert_unique(drawn)


# ---------------------------------------------------------------------------
# A clean stop gives the unused IDs back (issue 20, item 7).

def classic_take(cluster, tag):
    """One range taken by a client of the classic version-CAS protocol:
    (first, last)."""
    with cluster.connect() as conn:
        while True:
            max_id, step, version = conn.execute(
                "SELECT max_id, step, version FROM id_segment WHERE biz_tag = %s", (tag,)).fetchone()
            if conn.execute("UPDATE id_segment SET max_id = max_id + step, version = version + 1 "
                            "WHERE biz_tag = %s AND version = %s", (tag, version)).rowcount == 1:
                return max_id + 1, max_id + step


@pytest.mark.parametrize("mode", ["fast", "smart"])
def test_a_clean_restart_skips_no_id_of_a_tag_used_only_here(make_cluster, mode):
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT segment_create('orders', step => 1000)")
    c.sql("SELECT segment_create('idle', step => 1000)")
    before = draw_batches(c, "postgres", "orders", 5, 700)
    idle_before = draw_batches(c, "postgres", "idle", 1, 10)
    (cached_to,), = c.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
    assert cached_to > max(before), "the worker should hold a range ahead"
    c.restart(mode)
    after = draw_batches(c, "postgres", "orders", 1, 10)
    assert after[0] == max(before) + 1, (
        f"a {mode} restart skipped {max(before) + 1}..{after[0] - 1} (the row had {cached_to})")
    assert draw_batches(c, "postgres", "idle", 1, 1) == [max(idle_before) + 1]
    assert "gave the unused IDs of 2 segment tag(s) back" in c.log()


def test_a_crash_still_skips_and_repeats_nothing(make_cluster):
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT segment_create('orders', step => 1000)")
    before = draw_batches(c, "postgres", "orders", 2, 700)
    (cached_to,), = c.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
    c.restart("immediate")
    after = draw_batches(c, "postgres", "orders", 1, 10)
    assert after[0] == cached_to + 1, "after a crash the next ID is above what the row had handed out"


def test_nothing_goes_back_when_another_allocator_took_a_range_meanwhile(make_cluster):
    # The worker is stopped (pg_terminate_backend) and paused between closing
    # the chain and writing the row; a classic client takes a range then.
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT segment_create('orders', step => 1000)")
    before = draw_batches(c, "postgres", "orders", 2, 700)
    stop = lambda: c.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE backend_type = 'pg_idgen refill worker'")
    with paused(c, "worker-before-give-back", trigger=stop):
        classic = classic_take(c, "orders")
        # A caller meanwhile finds the chain closed and waits for a worker.
        waiting = ThreadPoolExecutor(1).submit(draw_batches, c, "postgres", "orders", 1, 5)
        time.sleep(0.5)
        assert not waiting.done(), "a call was served from a closed chain"
    meanwhile = waiting.result(timeout=60)
    after = draw_batches(c, "postgres", "orders", 1, 10) + meanwhile
    assert min(after) > classic[1], f"IDs {sorted(after)[:3]}... repeat the classic client's {classic}"
    assert_unique(before + after)
    (max_id, version), = c.sql("SELECT max_id, version FROM id_segment WHERE biz_tag = 'orders'")
    assert max_id >= max(after)


def test_a_trigger_that_rewrites_the_give_back_is_refused(make_cluster):
    c = make_cluster(conf=["log_line_prefix = '%e '"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT segment_create('orders', step => 1000)")
    c.sql("""
        CREATE FUNCTION lower_more() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.max_id < OLD.max_id THEN NEW.max_id := NEW.max_id - 100; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER lower_more BEFORE UPDATE ON id_segment FOR EACH ROW EXECUTE FUNCTION lower_more();
    """)
    before = draw_batches(c, "postgres", "orders", 2, 700)
    (cached_to,), = c.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
    c.restart("fast")
    assert c.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'") == [(cached_to,)]
    assert "27000 " in c.log() and "changed the give-back of segment tag \"orders\"" in c.log()
    after = draw_batches(c, "postgres", "orders", 1, 10)
    assert min(after) == cached_to + 1
    assert_unique(before + after)


def test_nothing_goes_back_to_a_tag_dropped_and_created_again_meanwhile(make_cluster):
    # Found by review: a tag dropped and created again while the stopping
    # worker held its give-back can end at the same version and max_id as
    # the worker's last refill left the old row (the creating transaction
    # raises max_id over the IDs it handed out); only the row version's
    # xmin tells them apart. (The drop commits first: a tag created again in
    # the transaction that dropped it hands out no ID.)
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT segment_create('s', step => 1000)")
    before = draw_batches(c, "postgres", "s", 1, 700)
    (max_id, version), = c.sql("SELECT max_id, version FROM id_segment WHERE biz_tag = 's'")
    stop = lambda: c.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE backend_type = 'pg_idgen refill worker'")
    with paused(c, "worker-before-give-back", trigger=stop):
        with c.connect() as conn:
            conn.execute("SELECT segment_drop('s', force => true)")
            conn.execute("BEGIN")
            conn.execute("SELECT segment_create('s', start => %s, step => 1000)", (max_id - 4,))
            recreated = draw(conn, "s", 5)
            conn.execute("COMMIT")
        assert c.sql("SELECT max_id, version FROM id_segment WHERE biz_tag = 's'") == [(max_id, version)], \
            "the race needs the re-created row at the old row's version and max_id"
    after = draw_batches(c, "postgres", "s", 1, 1400)
    assert_unique(before + recreated + after)
