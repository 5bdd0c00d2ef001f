"""Never twice through failover and restores: the snowflake high-water mark
is committed in the WAL (snowflake_high_water) before any ID up to it is
issued, so a promoted standby, a point-in-time restore and a crash recovery
continue above every ID in their data — with segment IDs beside them.

Bursts far beyond what the layout's sequence allows per millisecond (4
sequence bits: 16 IDs per ms, so 200,000 IDs take 12.5 s of snowflake
time, however fast the machine inserts them) make the primary's logical
clock run well ahead of the wall clock, so that a generator that forgot
the mark would start below IDs the replicated table already holds."""

import os
import shutil
import subprocess
import tempfile
import time

import psycopg
import pytest

from cluster import PG_BIN
from helpers import BURST_LAYOUT, BURST_LEAD_MS, COPY_WARNING, archived, assert_unique, lead_ms, faketime_env, promote, replayed, standby_of, wait_for

NARROW = [*BURST_LAYOUT, "wal_level = replica"]

def primary_with_events(make_cluster, conf=()):
    primary = make_cluster(conf=[*NARROW, *conf])
    primary.start()
    primary.sql("CREATE EXTENSION pg_idgen")
    primary.sql("CREATE TABLE events (id bigint PRIMARY KEY, kind text NOT NULL)")
    primary.sql("SELECT segment_create('orders', step => 100)")
    primary.sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'))")
    return primary


def burst(server, rows, kind):
    """Inserts `rows` snowflake IDs in one statement (time runs ahead of the
    clock) and a tenth as many segment IDs."""
    with server.connect() as conn:
        conn.execute(f"INSERT INTO events SELECT snowflake_nextval(), '{kind}' FROM generate_series(1, {rows})")
        conn.execute(f"INSERT INTO orders SELECT FROM generate_series(1, {rows // 10})")


def ids(server, table):
    return [r[0] for r in server.sql(f"SELECT id FROM {table} ORDER BY id")]


def check_continues_above(server, snowflakes_before, orders_before):
    """New IDs on `server` never equal or fall below what its data holds."""
    with server.connect() as conn:
        # The primary key is the first judge: a repeat fails the INSERT.
        conn.execute("INSERT INTO events SELECT snowflake_nextval(), 'after' FROM generate_series(1, 50000)")
        conn.execute("INSERT INTO orders SELECT FROM generate_series(1, 2000)")
    new_events = [r[0] for r in server.sql("SELECT id FROM events WHERE kind = 'after'")]
    new_orders = sorted(set(ids(server, "orders")) - set(orders_before))
    assert len(new_events) == 50000 and len(new_orders) == 2000
    assert_unique(snowflakes_before + new_events)
    assert min(new_events) > max(snowflakes_before), "a snowflake ID below the replicated maximum"
    assert min(new_orders) > max(orders_before), "a segment ID below the replicated maximum"


@pytest.mark.parametrize("standby_clock", ["right", "3 s behind"])
def test_a_promoted_standby_continues_above_every_replicated_id(make_cluster, standby_clock):
    primary = primary_with_events(make_cluster)
    env = faketime_env(-3) if standby_clock != "right" else None
    standby = standby_of(primary, make_cluster, conf=NARROW, env=env)
    for round_ in range(2):
        burst(primary, 200_000, f"burst{round_}")
    assert lead_ms(primary) > BURST_LEAD_MS, "the bursts did not put time ahead of the clock"
    assert replayed(primary, standby)
    # The standby shows the replayed mark (above every replicated ID), and
    # still refuses to issue.
    top = primary.sql("SELECT max(id) FROM events")[0][0]
    assert wait_for(lambda: standby.sql(
        "SELECT wal_mark >= (SELECT ts FROM snowflake_parse(%s)) FROM snowflake_status"
        " WHERE generator = 'default'", (top,)) == [(True,)], timeout=30)
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        standby.sql("SELECT snowflake_nextval()")
    primary.stop("immediate")
    snowflakes_before, orders_before = ids(standby, "events"), ids(standby, "orders")
    assert len(snowflakes_before) == 400_000
    promote(standby)
    check_continues_above(standby, snowflakes_before, orders_before)
    # A promotion starts a new timeline: not a copy beside its original.
    assert COPY_WARNING not in standby.log()


def test_a_base_backup_started_as_a_second_primary_is_warned_about(make_cluster):
    """A pg_basebackup started as a primary of its own (no standby.signal)
    with the same fixed machine id issues the same IDs as its original —
    which neither server can see; the copy can tell it started from a backup
    on the backup's timeline, and warns (once per start, naming the fix).
    Its original, restarted, does not."""
    primary = primary_with_events(make_cluster)
    copy = make_cluster(conf=NARROW)
    shutil.rmtree(copy.data)
    primary.client("pg_basebackup", "-c", "fast", "-D", copy.data, "-X", "stream")
    subprocess.run(["chown", "-R", "postgres:postgres", copy.data], check=True)
    copy.append_conf(f"unix_socket_directories = '{copy.dir}'")
    copy.start()
    copy.sql("SELECT snowflake_nextval()")
    assert wait_for(lambda: COPY_WARNING in copy.log(), timeout=30)
    assert "pg_idgen.machine_id = 7" in copy.log()
    assert "remove backup_label.old" in copy.log()
    # The fix the hint names ends it; the original never warned.
    os.remove(os.path.join(copy.data, "backup_label.old"))
    log_before = len(copy.log())
    copy.restart()
    copy.sql("SELECT snowflake_nextval()")
    primary.restart()
    primary.sql("SELECT snowflake_nextval()")
    # An ID is issued only after the keeper's first pass, which warns.
    assert COPY_WARNING not in copy.log()[log_before:]
    assert COPY_WARNING not in primary.log()


def test_the_mark_cannot_be_deleted_truncated_or_lowered(make_cluster):
    """Without its row a promotion or restore can only guess how far ahead
    IDs were issued; with a lowered row it would start below them: the
    guard refuses both (23514, naming the override), and lets the keeper's
    own raises through."""
    c = make_cluster(conf=NARROW)
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    c.sql("SELECT snowflake_nextval()")
    (high,), = c.sql("SELECT default_high_id FROM snowflake_high_water")
    for statement in ["DELETE FROM snowflake_high_water", "TRUNCATE snowflake_high_water",
                      "UPDATE snowflake_high_water SET default_high_id = 0",
                      "UPDATE snowflake_high_water SET javascript_high_id = javascript_high_id - 1"]:
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            c.sql(statement)
        assert "would lose or lower the snowflake high-water mark" in str(caught.value)
        assert "pg_idgen.allow_max_id_decrease" in caught.value.diag.message_hint
    assert c.sql("SELECT default_high_id FROM snowflake_high_water") == [(high,)]
    # Raising it is no harm; a role that is not a superuser cannot override.
    c.sql("UPDATE snowflake_high_water SET default_high_id = default_high_id + 1")
    c.sql("CREATE ROLE app")
    with c.connect() as conn:
        conn.execute("SET ROLE app")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SET pg_idgen.allow_max_id_decrease = on")
    # The keeper goes on committing above it.
    with c.connect() as conn:
        conn.execute("SELECT count(snowflake_nextval()) FROM generate_series(1, 100000)")
    assert wait_for(lambda: c.sql("SELECT default_high_id > %s FROM snowflake_high_water", (high + 1,))
                    == [(True,)], timeout=30)


def test_a_restart_after_the_state_file_is_lost_continues_above_the_wal_mark(make_cluster):
    """A crash, and the state file removed: the mark comes back from the
    WAL (crash recovery replays the table's row), not from the clock."""
    primary = primary_with_events(make_cluster)
    for round_ in range(2):
        burst(primary, 200_000, f"burst{round_}")
    assert lead_ms(primary) > BURST_LEAD_MS
    primary.stop("immediate")
    os.remove(os.path.join(primary.data, "pg_idgen_snowflake.state"))
    primary.start()
    snowflakes_before, orders_before = ids(primary, "events"), ids(primary, "orders")
    check_continues_above(primary, snowflakes_before, orders_before)


def test_a_point_in_time_restore_continues_above_every_id_it_holds(make_cluster):
    """A base backup, WAL archived to a local folder, bursts on both sides
    of a restore point; restored to the point and to the end, each copy
    continues above every ID it holds."""
    wal_archive = tempfile.mkdtemp(prefix="pg_idgen-archive.")
    shutil.chown(wal_archive, "postgres", "postgres")
    try:
        primary = primary_with_events(make_cluster, conf=[
            "archive_mode = on", f"archive_command = 'cp %p {wal_archive}/%f'"])
        backup = tempfile.mkdtemp(prefix="pg_idgen-backup.")
        shutil.chown(backup, "postgres", "postgres")
        subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_basebackup", "-h", primary.dir,
                        "-U", "postgres", "-D", os.path.join(backup, "data"), "-X", "stream"],
                       check=True, capture_output=True)
        burst(primary, 200_000, "before")
        primary.sql("SELECT pg_create_restore_point('middle')")
        burst(primary, 200_000, "after_point")
        assert lead_ms(primary) > BURST_LEAD_MS
        assert archived(primary)
        primary.stop("immediate")
        for target, kinds in [("middle", {"before"}), (None, {"before", "after_point"})]:
            restored = make_cluster(conf=NARROW)
            shutil.rmtree(restored.data)
            shutil.copytree(os.path.join(backup, "data"), restored.data, symlinks=True)
            subprocess.run(["chown", "-R", "postgres:postgres", restored.data], check=True)
            lines = [f"unix_socket_directories = '{restored.dir}'", "archive_mode = off",
                     f"restore_command = 'cp {wal_archive}/%f %p'", "recovery_target_action = 'promote'"]
            if target:
                lines.append(f"recovery_target_name = '{target}'")
            restored.append_conf(*lines)
            signal = os.path.join(restored.data, "recovery.signal")
            open(signal, "w").close()
            shutil.chown(signal, "postgres", "postgres")
            restored.start()
            assert wait_for(lambda: restored.sql("SELECT pg_is_in_recovery()") == [(False,)], timeout=120)
            assert {r[0] for r in restored.sql("SELECT DISTINCT kind FROM events")} == kinds
            check_continues_above(restored, ids(restored, "events"), ids(restored, "orders"))
            assert COPY_WARNING not in restored.log()
            restored.destroy()
        shutil.rmtree(backup, ignore_errors=True)
    finally:
        shutil.rmtree(wal_archive, ignore_errors=True)


@pytest.mark.parametrize("standby_restarted", [False, True], ids=["promoted", "restarted-then-promoted"])
@pytest.mark.parametrize("lost_by", [
    "SET pg_idgen.allow_max_id_decrease = on; DELETE FROM snowflake_high_water",
    "DROP EXTENSION pg_idgen"], ids=["DELETE", "DROP EXTENSION"])
def test_a_failover_after_the_marks_row_is_lost_still_continues_above_every_id(make_cluster, lost_by,
                                                                               standby_restarted):
    """The row deleted (by a superuser, past the guard) or the extension
    dropped, then created again as the 55000 hint says, on the primary,
    replayed, and the standby promoted —
    at once, or after a restartpoint and a restart, so that it replays no
    commit before its promotion (found by adversarial review): "no mark"
    is not "nothing issued" — it starts above the last commit or checkpoint
    it knows of plus snowflake_max_lead."""
    primary = make_cluster(conf=NARROW)
    primary.start()
    primary.sql("CREATE EXTENSION pg_idgen")
    app = primary.new_database()
    primary.sql("CREATE TABLE events (id bigint PRIMARY KEY)", dbname=app)
    standby = standby_of(primary, make_cluster, conf=NARROW)
    with primary.connect(app) as conn:
        for _ in range(2):
            conn.execute("INSERT INTO events SELECT snowflake_nextval() FROM generate_series(1, 200000)")
    assert lead_ms(primary, app) > BURST_LEAD_MS
    # The keeper's last commit for the bursts lands first (it would put the
    # row back).
    time.sleep(1)
    primary.sql(lost_by)
    assert replayed(primary, standby)
    if standby_restarted:
        primary.sql("CHECKPOINT")
        assert replayed(primary, standby)
        standby.sql("CHECKPOINT")
        standby.restart()
        assert replayed(primary, standby)
    primary.stop("immediate")
    promote(standby)
    if lost_by.startswith("DROP"):
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
            standby.sql("SELECT snowflake_nextval()", dbname=app)
        standby.sql("CREATE EXTENSION pg_idgen")
    before = [r[0] for r in standby.sql("SELECT id FROM events", dbname=app)]
    assert len(before) == 400_000
    with standby.connect(app) as conn:
        # The primary key is the first judge: a repeat fails the INSERT.
        new = [r[0] for r in conn.execute(
            "INSERT INTO events SELECT snowflake_nextval() FROM generate_series(1, 20000) RETURNING id")]
    assert min(new) > max(before)
