"""Never twice through replication (issue 37): an asynchronous standby
promoted while its WAL receiver lagged, a logical-replication switchover
(blue/green, a major upgrade) done as docs/replication.md says — its SQL
steps are read from the page and run as written —, two-way logical
replication, a point-in-time restore, and pg_idgen.snowflake_database
changed and changed back. Every ID a client received goes into one repeat
check; the client remembers the old primary's highest ID."""

import os
import re
import shutil
import signal
import subprocess
import tempfile

import psycopg
import pytest

from cluster import PG_BIN
from helpers import (BURST_LAYOUT, REPO, archived, assert_unique, draw, promote, replayed, standby_of, wait_for)

# Bursts put snowflake time up to 12.5 s ahead of the clock (16 IDs per ms),
# within a max_lead of 20 s.
AHEAD = (*BURST_LAYOUT, "pg_idgen.snowflake_max_lead = '20s'")


def doc_step(name):
    """The SQL of the block docs/replication.md marks `<!-- step: NAME -->`,
    as written there."""
    with open(os.path.join(REPO, "docs", "replication.md"), encoding="utf-8") as f:
        page = f.read()
    found = re.search(rf"<!-- step: {re.escape(name)} -->\n(?:<!-- snippet:[^\n]*-->\n)?```sql\n(.*?)```",
                      page, re.S)
    assert found, f"docs/replication.md has no step {name}"
    return found.group(1)


def run_step(server, name, dbname="postgres", **variables):
    """Runs a documented step with psql, as a DBA would (psql variables
    for the values the page leaves to the reader), from a file, so that
    its backslash commands work."""
    sets = [arg for k, v in variables.items() for arg in ("-v", f"{k}={v}")]
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(doc_step(name))
    os.chmod(f.name, 0o644)
    try:
        server.client("psql", "-X", "-v", "ON_ERROR_STOP=1", *sets, "-d", dbname, "-f", f.name)
    finally:
        os.unlink(f.name)


def snowflakes(server, n, dbname="postgres"):
    with server.connect(dbname) as conn:
        return [r[0] for r in conn.execute("SELECT snowflake_nextval() FROM generate_series(1, %s)", (n,))]


def wal_receiver_pid(standby):
    return wait_for(lambda: standby.sql("SELECT pid FROM pg_stat_wal_receiver"), timeout=30) and \
        standby.sql("SELECT pid FROM pg_stat_wal_receiver")[0][0]


def test_an_asynchronous_standby_promoted_while_its_wal_receiver_lagged_repeats_no_snowflake_id(
        make_cluster):
    """Finding 1: the standby's WAL receiver is stopped (SIGSTOP) while the
    primary bursts snowflake IDs far ahead of its clock, then the primary
    is killed: the promoted standby has never seen those IDs' mark, and
    starts above the old primary's clock plus snowflake_max_lead plus the
    clock skew — above every one of them."""
    primary = make_cluster(conf=AHEAD)
    primary.start()
    primary.sql("CREATE EXTENSION pg_idgen")
    primary.sql("SELECT segment_create('orders', step => 100)")
    before = snowflakes(primary, 1000)
    segments = draw_all(primary, 1000)
    standby = standby_of(primary, make_cluster, conf=AHEAD)
    assert replayed(primary, standby)
    receiver = wal_receiver_pid(standby)
    os.kill(receiver, signal.SIGSTOP)
    try:
        for _ in range(2):
            before += snowflakes(primary, 100_000)
        segments += draw_all(primary, 30_000)
        (lead,), = primary.sql("SELECT lead_ms FROM snowflake_status WHERE generator = 'default'")
        assert lead > 2_000, f"the bursts put time only {lead} ms ahead"
        primary.stop("immediate")
    finally:
        os.kill(receiver, signal.SIGCONT)
    promote(standby)
    after = snowflakes(standby, 20_000)
    assert min(after) > max(before), "the promoted standby issued IDs the old primary had issued"
    assert_unique(before + after)
    assert "cannot prove its snowflake mark is current" in standby.log()
    # Segment IDs: the documented step, with a margin above the lag.
    run_step(standby, "async-segment")
    assert min(draw_all(standby, 20_000)) > max(segments)


def test_snowflake_database_changed_and_changed_back_without_the_state_file_repeats_nothing(make_cluster):
    """Finding 7: the mark moves to another database and back, and the
    state file is moved aside in between (as a recovery once said): the
    first database's row is stale, and the start cannot prove otherwise —
    it starts above the clock plus max_lead plus skew."""
    c = make_cluster(conf=AHEAD)
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    drawn = snowflakes(c, 1000)
    c.sql("CREATE DATABASE other")
    c.sql("CREATE EXTENSION pg_idgen", dbname="other")
    c.append_conf("pg_idgen.snowflake_database = 'other'")
    c.restart()
    for _ in range(2):
        drawn += snowflakes(c, 100_000, dbname="other")
    c.append_conf("pg_idgen.snowflake_database = 'postgres'")
    c.stop("fast")
    state = os.path.join(c.data, "pg_idgen_snowflake.state")
    os.rename(state, state + ".aside")
    c.start()
    after = snowflakes(c, 20_000)
    assert min(after) > max(drawn)


def logical_pair(make_cluster, conf_a=(), conf_b=(), publish="FOR ALL TABLES"):
    """Two clusters, `a` publishing to `b`, with a table orders keyed by
    segment_nextval('orders') and events keyed by snowflake_nextval()."""
    a = make_cluster(conf=("wal_level = logical", *conf_a))
    b = make_cluster(conf=("wal_level = logical", *conf_b))
    for node in (a, b):
        node.start()
        node.sql("CREATE EXTENSION pg_idgen")
        node.sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'), src text)")
        node.sql("CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), src text)")
    a.sql("SELECT segment_create('orders', step => 100)")
    a.sql(f"CREATE PUBLICATION blue {publish}")
    b.sql(f"CREATE SUBSCRIPTION from_blue CONNECTION 'host={a.dir} port={a.port} dbname=postgres user=postgres' "
          "PUBLICATION blue")
    return a, b


def caught_up(a, b, timeout=60):
    """`b` has copied every table (each in state ready) and applied all of
    `a`'s WAL so far."""
    assert wait_for(lambda: b.sql("SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'")
                    == [(0,)], timeout=timeout)
    (lsn,), = a.sql("SELECT pg_current_wal_lsn()")
    return wait_for(lambda: b.sql("SELECT coalesce(bool_and(latest_end_lsn >= %s::pg_lsn), false) "
                                  "FROM pg_stat_subscription", (lsn,)) == [(True,)], timeout=timeout)


def insert(node, table, n, src):
    with node.connect() as conn:
        return [r[0] for r in conn.execute(
            f"INSERT INTO {table} (src) SELECT %s FROM generate_series(1, %s) RETURNING id", (src, n))]


def test_a_logical_switchover_done_as_documented_continues_above_the_publisher(make_cluster):
    """Finding 3: blue publishes everything to green. A smoke test of
    segment_nextval on green while the subscription writes is refused (not
    a silent overlap); blue stopped cleanly with the subscription still
    enabled gives nothing back (its id_segment is published), so green's
    max_id is never lowered; then the documented switchover on green, and
    green goes on above every ID blue handed out — segment and snowflake."""
    blue, green = logical_pair(make_cluster, conf_a=("pg_idgen.machine_id = 1",),
                               conf_b=("pg_idgen.machine_id = 2",))
    drawn = insert(blue, "orders", 5_000, "blue") + draw_all(blue, 3_000)
    flakes = insert(blue, "events", 5_000, "blue")
    assert caught_up(blue, green)
    with pytest.raises(psycopg.Error) as refused:
        green.sql("SELECT segment_nextval('orders')")
    assert refused.value.sqlstate == "55000" and "from_blue" in str(refused.value), refused.value
    assert "ALTER SUBSCRIPTION from_blue DISABLE" in refused.value.diag.message_hint
    drawn += insert(blue, "orders", 5_000, "blue")
    (blue_max,), = blue.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
    blue.stop("fast")   # a clean stop, the subscription still enabled
    run_step(green, "switchover")
    (green_max,), = green.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
    assert green_max >= blue_max, "a give-back of the publisher lowered the subscriber's max_id"
    green.restart()
    after = insert(green, "orders", 10_000, "green")
    assert min(after) > max(drawn)
    assert_unique(drawn + after)
    after_flakes = insert(green, "events", 5_000, "green")
    assert_unique(flakes + after_flakes)


def draw_all(node, n, tag="orders"):
    with node.connect() as conn:
        return draw(conn, tag, n)


def test_a_replicated_lowering_of_max_id_is_refused_in_the_apply_worker(make_cluster):
    """A change on the publisher that lowers max_id (a superuser past the
    guard there) is refused on the subscriber by the guard, which fires in
    the apply worker: an ERROR in its log, the row unchanged."""
    blue, green = logical_pair(make_cluster, conf_a=("pg_idgen.machine_id = 1",),
                               conf_b=("pg_idgen.machine_id = 2",))
    draw_all(blue, 500)
    assert caught_up(blue, green)
    (kept,), = green.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
    blue.sql("SET pg_idgen.allow_max_id_decrease = on; "
             "UPDATE id_segment SET max_id = 1, version = version + 1 WHERE biz_tag = 'orders'")
    assert wait_for(lambda: 'id_segment.max_id of segment tag "orders" cannot move back' in green.log(),
                    timeout=30), green.log()[-3000:]
    assert green.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'") == [(kept,)]


def test_the_same_machine_id_on_both_sides_of_a_logical_replication_is_warned_about(make_cluster):
    """Finding 5: a copied configuration gives publisher and subscriber one
    machine id. The publisher's mark replicates as a row of its own; its
    moving while the subscriber runs is told (WARNING, machine_problem),
    and raises the subscriber's floor above the publisher's IDs."""
    blue, green = logical_pair(make_cluster, conf_a=("pg_idgen.machine_id = 3",),
                               conf_b=("pg_idgen.machine_id = 3",))
    insert(green, "events", 10, "green")   # green's own row

    def told():
        insert(blue, "events", 2_000, "blue")
        problem = green.sql("SELECT machine_problem FROM snowflake_status WHERE generator = 'default'")[0][0]
        return problem and "another live cluster" in problem

    assert wait_for(told, timeout=60, interval=0.5)
    assert "WARNING:  another live cluster" in green.log()
    assert green.sql("SELECT count(*) FROM snowflake_high_water") == [(2,)]


@pytest.mark.skipif(int(re.search(r"(\d+)", subprocess.run([f"{PG_BIN}/pg_config", "--version"],
                                                           capture_output=True, text=True).stdout).group(1)) < 16,
                    reason="origin = none (two-way logical replication) is PostgreSQL 16 and later")
def test_two_way_replication_of_one_tag_is_refused_not_shared(make_cluster):
    """Finding 4: both nodes publish everything and subscribe to each
    other (origin = none); both draw the tag. Each refuses (55000 naming
    its subscription, the hint pointing at segment_attach) rather than
    take a range the other can take too."""
    a = make_cluster(conf=("wal_level = logical", "pg_idgen.machine_id = 1"))
    b = make_cluster(conf=("wal_level = logical", "pg_idgen.machine_id = 2"))
    for node in (a, b):
        node.start()
        node.sql("CREATE EXTENSION pg_idgen")
        node.sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'), src text)")
    a.sql("SELECT segment_create('orders', step => 100)")
    for node, name in ((a, "a"), (b, "b")):
        node.sql(f"CREATE PUBLICATION pub_{name} FOR ALL TABLES")
    a.sql(f"CREATE SUBSCRIPTION from_b CONNECTION 'host={b.dir} port={b.port} dbname=postgres user=postgres' "
          "PUBLICATION pub_b WITH (origin = none, copy_data = false)")
    b.sql(f"CREATE SUBSCRIPTION from_a CONNECTION 'host={a.dir} port={a.port} dbname=postgres user=postgres' "
          "PUBLICATION pub_a WITH (origin = none)")
    assert wait_for(lambda: b.sql("SELECT count(*) FROM id_segment") == [(1,)], timeout=60)
    for node, subscription in ((a, "from_b"), (b, "from_a")):
        with pytest.raises(psycopg.Error) as refused:
            node.sql("INSERT INTO orders (src) VALUES ('x')")
        assert refused.value.sqlstate == "55000" and subscription in str(refused.value), refused.value
        assert "segment_attach" in refused.value.diag.message_hint


def test_a_point_in_time_restore_to_before_the_last_ids_continues_above_them(make_cluster):
    """Finding 6: restored to a point before the old primary's last IDs
    and started as its replacement, snowflake IDs start above every ID the
    old primary issued (its clock plus max_lead plus skew bounds them); for
    segment IDs, the documented step (raise each tag above the old
    primary's max_id) makes them too."""
    archive = tempfile.mkdtemp(prefix="pg_idgen-archive.")
    backup = tempfile.mkdtemp(prefix="pg_idgen-backup.")
    for d in (archive, backup):
        shutil.chown(d, "postgres", "postgres")
    try:
        old = make_cluster(conf=(*AHEAD, "archive_mode = on", f"archive_command = 'cp %p {archive}/%f'"))
        old.start()
        old.sql("CREATE EXTENSION pg_idgen")
        old.sql("SELECT segment_create('orders', step => 100)")
        subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_basebackup", "-h", old.dir,
                        "-U", "postgres", "-D", os.path.join(backup, "data"), "-X", "stream"],
                       check=True, capture_output=True)
        flakes, ids = snowflakes(old, 50_000), draw_all(old, 20_000)
        old.sql("SELECT pg_create_restore_point('before_the_last')")
        flakes += snowflakes(old, 150_000)
        ids += draw_all(old, 50_000)
        (old_max,), = old.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
        assert archived(old)
        old.stop("immediate")
        restored = make_cluster(conf=AHEAD)
        shutil.rmtree(restored.data)
        shutil.copytree(os.path.join(backup, "data"), restored.data, symlinks=True)
        subprocess.run(["chown", "-R", "postgres:postgres", restored.data], check=True)
        restored.append_conf(f"unix_socket_directories = '{restored.dir}'", "archive_mode = off",
                             f"restore_command = 'cp {archive}/%f %p'", "recovery_target_action = 'promote'",
                             "recovery_target_name = 'before_the_last'")
        open(os.path.join(restored.data, "recovery.signal"), "w").close()
        subprocess.run(["chown", "-R", "postgres:postgres", restored.data], check=True)
        restored.start()
        assert wait_for(lambda: restored.sql("SELECT pg_is_in_recovery()") == [(False,)], timeout=120)
        after_flakes = snowflakes(restored, 20_000)
        assert min(after_flakes) > max(flakes)
        run_step(restored, "pitr-segment", old_max_id=old_max, tag="orders")
        after = draw_all(restored, 20_000)
        assert min(after) > max(ids)
    finally:
        shutil.rmtree(archive, ignore_errors=True)
        shutil.rmtree(backup, ignore_errors=True)
