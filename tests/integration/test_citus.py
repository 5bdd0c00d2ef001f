"""pg_idgen on Citus: one ID space for distributed and reference tables, on
every node, by every route Citus has, with no per-node set-up (issue 36).

A coordinator and two workers on 127.0.0.1 (tests/lib/citus_cluster.py),
a node added mid-test; every ID drawn anywhere goes into one repeat check.
Where the default runs: Citus evaluates it on the coordinator for INSERT
... VALUES, multi-row inserts, COPY and INSERT ... SELECT from a local
source, and on the workers for INSERT ... SELECT from a distributed table
and for every statement sent to a worker. Citus supports PostgreSQL 16-18:
on 15 this module is skipped."""

import os
import threading

import psycopg
import pytest
from psycopg import errors

from citus_cluster import CITUS_CONF, CitusCluster, citus_available, free_port
from cluster import PG_BIN
from helpers import REPO, assert_unique, draw_snowflakes, promote, replayed, standby_of, wait_for

pytestmark = pytest.mark.skipif(not citus_available(), reason=f"Citus is not built into {PG_BIN} (16-18 only)")

NODE_CONF = ("pg_idgen.refill_timeout = '5s'", "pg_idgen.machine_id = 'citus'")


@pytest.fixture(scope="module")
def citus(make_module_cluster):
    cluster = CitusCluster(make_module_cluster, workers=2, conf=NODE_CONF)
    c = cluster.coordinator
    c.sql("SELECT segment_create('orders', step => 100)")
    c.sql("SELECT segment_create('refs', step => 50)")
    c.sql("CREATE TABLE orders (customer_id int NOT NULL, id bigint NOT NULL DEFAULT segment_nextval('orders'), "
          "flake bigint NOT NULL DEFAULT snowflake_nextval(), note text, PRIMARY KEY (customer_id, id))")
    c.sql("SELECT create_distributed_table('orders', 'customer_id')")
    c.sql("CREATE TABLE refs (id bigint PRIMARY KEY DEFAULT segment_nextval('refs'), "
          "flake bigint NOT NULL DEFAULT snowflake_nextval(), note text)")
    c.sql("SELECT create_reference_table('refs')")
    c.sql("CREATE TABLE staging (customer_id int, note text)")   # a local table
    return cluster


def all_ids(node, table, column="id"):
    return [r[0] for r in node.sql(f"SELECT {column} FROM {table}")]


def test_every_route_on_every_node_draws_from_one_id_space(citus):
    """Each route Citus has, from the coordinator and from each worker,
    several clients at once: no segment or snowflake ID repeats, and no
    step was needed on any worker."""
    c = citus.coordinator
    routes = [
        (c, "INSERT INTO orders (customer_id, note) VALUES (1, 'values')"),
        (c, "INSERT INTO orders (customer_id, note) SELECT g % 50, 'multi' FROM generate_series(1, 200) g"),
        (c, "INSERT INTO staging SELECT g % 50, 'local' FROM generate_series(1, 300) g"),
        (c, "INSERT INTO orders (customer_id, note) SELECT customer_id, note FROM staging"),
        # Evaluated on the workers: INSERT ... SELECT from a distributed table.
        (c, "INSERT INTO orders (customer_id, note) SELECT customer_id + 1, 'from distributed' FROM orders "
            "WHERE note = 'local'"),
        (c, "INSERT INTO refs (note) SELECT 'ref' FROM generate_series(1, 100)"),
    ]
    for node, statement in routes:
        node.sql(statement)
    with c.connect() as conn:
        with conn.cursor().copy("COPY orders (customer_id, note) FROM STDIN") as copy:
            for i in range(500):
                copy.write_row((i % 70, "copy"))
    # Statements sent to each worker (Citus runs queries from any node), by
    # several clients at once.
    errors_seen = []

    def client(node, n):
        try:
            with node.connect() as conn:
                for i in range(n):
                    conn.execute("INSERT INTO orders (customer_id, note) SELECT g, 'worker' FROM generate_series(%s::int, %s::int) g",
                                 (i * 10, i * 10 + 9))
                    conn.execute("INSERT INTO refs (note) VALUES ('worker')")
        except Exception as e:  # noqa: BLE001 - reported below
            errors_seen.append(e)

    threads = [threading.Thread(target=client, args=(node, 20)) for node in citus.nodes for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors_seen == []
    ids = all_ids(c, "orders")
    assert len(ids) > 2000
    assert_unique(ids)
    assert_unique(all_ids(c, "refs"))
    assert_unique(all_ids(c, "orders", "flake") + all_ids(c, "refs", "flake"))
    # One allocator: every ID is below the coordinator's max_id.
    (max_id,), = c.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
    assert max(ids) <= max_id
    # No row of id_segment on any worker: nothing was set up there; the
    # status says where the tag comes from.
    for worker in citus.workers:
        assert worker.sql("SELECT count(*) FROM id_segment") == [(0,)]
        assert worker.sql("SELECT source FROM segment_status WHERE tag = 'orders' "
                          "AND database = current_database()") == [("citus coordinator",)]


def test_a_coordinator_row_locked_for_a_moment_is_waited_through_not_an_error(citus):
    """The coordinator's row of a tag locked past the refill's short wait
    (its own refill worker's commit on a busy machine; here a session
    holding it FOR UPDATE): the worker's refill is refused with 55P03 and
    retried, and its waiting caller gets its ID once the row is free — as a
    local refill's caller does — instead of an error of the whole call."""
    c, worker = citus.coordinator, citus.workers[0]
    c.sql("SELECT segment_create('held', step => 10)")
    outcome = {}

    def draw():
        try:
            outcome["ids"] = draw_on(worker, 25, tag="held")
        except psycopg.Error as e:
            outcome["error"] = e

    with c.connect() as holder:
        holder.execute("BEGIN")
        holder.execute("SELECT 1 FROM id_segment WHERE biz_tag = 'held' FOR UPDATE")
        drawer = threading.Thread(target=draw)
        drawer.start()
        try:
            # The worker's refill met the lock (and is retrying), or the
            # call already failed.
            assert wait_for(lambda: "error" in outcome or worker.sql(
                "SELECT last_error FROM segment_status WHERE tag = 'held' AND last_error LIKE '%lock%'"), timeout=30)
        finally:
            holder.execute("COMMIT")
            drawer.join()
    assert "error" not in outcome, outcome
    assert len(set(outcome["ids"])) == 25


def test_each_node_issues_snowflake_ids_under_its_citus_group(citus):
    seen = {}
    for node in citus.nodes:
        (machine,), = node.sql("SELECT machine_id FROM snowflake_status WHERE generator = 'default'")
        assert machine == citus.group_of(node)
        (flake,), = node.sql("SELECT snowflake_nextval()")
        (parsed,), = node.sql("SELECT machine_id FROM snowflake_parse(%s)", (flake,))
        seen[node.port] = parsed
    assert len(set(seen.values())) == len(citus.nodes), seen


def test_a_node_added_later_draws_with_no_step_of_its_own(citus):
    c = citus.coordinator
    worker = citus.add_worker()
    c.sql("SELECT citus_rebalance_start(shard_transfer_mode => 'block_writes')")
    c.sql("SELECT citus_rebalance_wait()")
    with worker.connect() as conn:
        for i in range(30):
            conn.execute("INSERT INTO orders (customer_id, note) SELECT g, 'new node' FROM generate_series(%s::int, %s::int) g",
                         (1000 + i * 10, 1000 + i * 10 + 9))
    (machine,), = worker.sql("SELECT machine_id FROM snowflake_status WHERE generator = 'default'")
    assert machine == citus.group_of(worker)
    assert_unique(all_ids(c, "orders"))
    assert_unique(all_ids(c, "orders", "flake") + all_ids(c, "refs", "flake"))


def test_a_tag_is_created_on_the_coordinator_not_on_a_worker(citus):
    worker = citus.workers[0]
    with pytest.raises(psycopg.Error) as refused:
        worker.sql("SELECT segment_create('orders')")
    assert refused.value.sqlstate == "0A000", refused.value
    assert "coordinator" in refused.value.diag.message_hint
    # A tag that exists nowhere: the hint names the coordinator, never a
    # bare segment_create on this node.
    with pytest.raises(psycopg.Error) as missing:
        worker.sql("SELECT segment_nextval('nowhere')")
    assert missing.value.sqlstate == "42704", missing.value
    assert "on the coordinator" in missing.value.diag.message_hint
    # Forced, a worker may keep a tag of its own (its own ID space).
    worker.sql("SELECT segment_create('worker_only', force => true)")
    assert worker.sql("SELECT segment_nextval('worker_only')") == [(1,)]


def test_id_segment_cannot_be_distributed(citus):
    c = citus.coordinator
    for call in ("create_reference_table('id_segment')", "create_distributed_table('id_segment', 'biz_tag')"):
        with pytest.raises(psycopg.Error) as refused:
            c.sql(f"SELECT {call}")
        assert refused.value.sqlstate == "0A000", refused.value
        assert "id_segment" in str(refused.value)


def test_distributing_a_table_with_a_segment_default_warns_nothing(citus):
    c = citus.coordinator
    c.sql("SELECT segment_create('quiet')")
    with c.connect() as conn:
        notices = []
        conn.add_notice_handler(lambda n: notices.append(n.message_primary))
        conn.execute("CREATE TABLE quiet (k int, id bigint DEFAULT segment_nextval('quiet'), PRIMARY KEY (k, id))")
        conn.execute("SELECT create_distributed_table('quiet', 'k')")
    assert [n for n in notices if "segment" in n] == [], notices
    for node in citus.nodes:
        warned = [line for line in node.log().splitlines() if "WARNING" in line and "quiet" in line]
        assert warned == [], warned


# ---------------------------------------------------------------------------
# Failures: each on a cluster of its own, with a small cache on the workers
# so that a test can run it dry.

SMALL_CACHE = (*NODE_CONF, "pg_idgen.remote_cache_ahead = '1s'", "pg_idgen.max_ids_ahead = 2000",
               "pg_idgen.refill_timeout = '2s'", "pg_idgen.remote_timeout = '2s'")


def small_cluster(make_cluster, workers=2):
    cluster = CitusCluster(make_cluster, workers=workers, conf=SMALL_CACHE)
    cluster.coordinator.sql("SELECT segment_create('orders', step => 10)")
    return cluster


def draw_on(node, n, tag="orders"):
    with node.connect() as conn:
        return [r[0] for r in conn.execute("SELECT segment_nextval(%s) FROM generate_series(1, %s)", (tag, n))]


def draw_until_refused(node, drawn, tries):
    """Draws 100 IDs at a time on `node` into `drawn` until a call fails;
    returns that error (None if `tries` draws all succeeded)."""
    for _ in range(tries):
        try:
            drawn += draw_on(node, 100)
        except psycopg.Error as e:
            return e
    return None


def test_with_the_coordinator_down_a_worker_serves_its_cache_then_refuses(make_cluster):
    cluster = small_cluster(make_cluster)
    worker = cluster.workers[0]
    drawn = draw_on(worker, 500)
    cluster.coordinator.stop("fast")
    refused = draw_until_refused(worker, drawn, 200)
    assert refused is not None, "the worker kept drawing with the coordinator down"
    assert refused.sqlstate == "55000", refused
    assert "coordinator" in str(refused), refused
    cluster.coordinator.start()
    assert wait_for(lambda: _draws(worker), timeout=30)
    drawn += draw_on(worker, 500)
    for node in cluster.nodes:
        drawn += draw_on(node, 300)
    assert_unique(drawn)


def _draws(node):
    try:
        draw_on(node, 1)
        return True
    except psycopg.Error:
        return False


def test_crashes_of_the_coordinator_and_of_a_worker_repeat_nothing(make_cluster):
    cluster = small_cluster(make_cluster)
    drawn = []
    for victim in (cluster.coordinator, cluster.workers[0], cluster.coordinator):
        for node in cluster.nodes:
            drawn += draw_on(node, 700)
        victim.stop("immediate")
        victim.start()
        assert wait_for(lambda: all(_draws(node) for node in cluster.nodes), timeout=30)
    for node in cluster.nodes:
        drawn += draw_on(node, 700)
    assert_unique(drawn)
    (max_id,), = cluster.coordinator.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
    assert max(drawn) <= max_id


def test_the_coordinator_failed_over_to_its_synchronous_standby_repeats_nothing(make_cluster):
    """The coordinator crashes and its synchronous standby is promoted and
    made the coordinator (citus_set_coordinator_host there): every range
    the old coordinator granted a worker was committed on the standby
    before the worker had it, so the workers go on from the new coordinator
    and no segment ID repeats; its snowflake IDs continue above the old
    coordinator's (the same group, the mark in the WAL)."""
    cluster = small_cluster(make_cluster)
    old = cluster.coordinator
    port = free_port()
    standby = standby_of(old, make_cluster, tcp_port=port)
    old.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
    old.sql("SELECT pg_reload_conf()")
    assert wait_for(lambda: old.sql(
        "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") == [(1,)], timeout=30)
    drawn, flakes = [], draw_snowflakes(old, 2000)
    for node in cluster.nodes:
        drawn += draw_on(node, 700)
    old.stop("immediate")
    promote(standby)
    standby.sql("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (port,))
    cluster.coordinator = standby
    flakes += draw_snowflakes(standby, 2000)
    for node in cluster.nodes:   # past what a worker holds ahead (max_ids_ahead)
        drawn += draw_on(node, 3000)
    assert_unique(drawn)
    assert_unique(flakes)
    assert min(flakes[2000:]) > max(flakes[:2000])
    (max_id,), = standby.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
    assert max(drawn) <= max_id


def test_the_coordinator_failed_over_to_an_asynchronous_standby_catches_up_before_its_first_range(make_cluster):
    """The coordinator's asynchronous standby misses the last refills: the
    ranges the old coordinator granted worker 1. After the failover (a new
    timeline), the new coordinator's first refill asks every primary
    worker what it took: with a worker down, or disabled, it hands out
    nothing (08006, nothing raised); once every worker answers, its row
    goes above all of it, and no node repeats an ID — not worker 2, which
    took less than worker 1, nor the coordinator's own sessions. Without
    the catch-up, 800 of the new coordinator's 1,000 IDs repeated. The
    ranges the old coordinator drew for its own sessions are recorded only
    in the rows that hold them: docs/citus.md's segment_setval step, run
    as written before the workers reach the new coordinator, covers them."""
    cluster = small_cluster(make_cluster)
    old, (w1, w2) = cluster.coordinator, cluster.workers
    old.sql("CREATE TABLE orders (customer_id int NOT NULL, id bigint NOT NULL DEFAULT segment_nextval('orders'))")
    old.sql("SELECT create_distributed_table('orders', 'customer_id')")
    old.sql("SELECT segment_create('refs', step => 10)")
    old.sql("CREATE TABLE refs (id bigint PRIMARY KEY DEFAULT segment_nextval('refs'))")
    old.sql("SELECT create_reference_table('refs')")
    extra = cluster.add_worker()                 # no shard of orders: it can be disabled
    port = free_port()
    standby = standby_of(old, make_cluster, tcp_port=port)
    drawn = []
    for node in cluster.nodes:
        drawn += draw_on(node, 700)
    assert replayed(old, standby)
    standby.stop("fast")                        # it falls behind: asynchronous
    drawn += draw_on(w1, 3000)                   # ranges the standby never sees
    with old.connect() as conn:                  # and the coordinator's own, whose rows are on the workers
        conn.execute("INSERT INTO orders (customer_id) SELECT g FROM generate_series(1, 500) g")
        conn.execute("INSERT INTO refs SELECT FROM generate_series(1, 300)")
    (lost_max,), = old.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
    old.stop("immediate")
    standby.start()
    promote(standby)
    (behind,), = standby.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
    assert behind < lost_max, "the standby saw every refill: the test lost its point"
    # docs/citus.md's step for the coordinator's own lost ranges, as written.
    step = ("SELECT segment_setval('orders', max(id)) FROM orders HAVING max(id) > "
            "(SELECT max_id FROM id_segment WHERE biz_tag = 'orders');")
    docs = open(os.path.join(REPO, "docs", "citus.md")).read()
    assert step in docs
    standby.sql(step)
    ref_step = docs[docs.index("SELECT segment_setval('refs', m)"):]
    ref_step = ref_step[:ref_step.index("biz_tag = 'refs');") + len("biz_tag = 'refs');")]
    assert standby.sql("SELECT count(*) FROM refs") == [(0,)]   # its copy lost the rows
    standby.sql(ref_step)
    standby.sql("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (port,))
    cluster.coordinator = standby
    (behind,), = standby.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")

    def refused_while(why):
        with pytest.raises(psycopg.Error) as refused:
            draw_on(standby, 1)
        assert refused.value.sqlstate == "08006", (why, refused.value)
        assert "not every worker" in refused.value.diag.message_primary, (why, refused.value)
        assert standby.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'") == [(behind,)], why
        assert standby.sql("SELECT count(*) FROM id_segment_citus_caught_up c JOIN id_segment_origin o "
                           "USING (system_identifier, timeline)") == [(0,)], why
        return refused.value

    # Once refused, the refill worker retries by itself: from here until
    # the end, never every worker answering at once (worker 2 goes down
    # while the other is still disabled), or a retry would catch up between
    # two steps.
    extra.stop("fast")
    standby.sql("SELECT citus_disable_node('127.0.0.1', %s, synchronous := true)", (extra.port,))
    assert "disabled" in refused_while("a worker disabled").diag.message_primary
    w2.stop("fast")
    refused_while("worker 2 down")
    w2.start()
    extra.start()
    standby.sql("SELECT citus_activate_node('127.0.0.1', %s)", (extra.port,))

    assert wait_for(lambda: _draws(standby), timeout=30)
    with standby.connect() as conn:
        conn.execute("INSERT INTO orders (customer_id) SELECT g FROM generate_series(1, 500) g")
        conn.execute("INSERT INTO refs SELECT FROM generate_series(1, 300)")
    drawn += draw_on(w2, 3000) + draw_on(standby, 1000) + draw_on(w1, 3000)
    assert_unique(drawn + all_ids(standby, "orders"))
    assert_unique(all_ids(w1, "refs"))   # the copy that kept the old coordinator's rows
    (raised,), = standby.sql("SELECT raised FROM id_segment_citus_caught_up c JOIN id_segment_origin o "
                             "USING (system_identifier, timeline)")
    assert raised == 1
    assert standby.sql("SELECT * FROM segment_citus_catch_up()") == []   # nothing left to raise
    with pytest.raises(psycopg.Error) as on_worker:
        w1.sql("SELECT * FROM segment_citus_catch_up()")
    assert on_worker.value.sqlstate == "0A000", on_worker.value
    assert "this node is a worker" in on_worker.value.diag.message_primary
    assert "pg_dist_node WHERE groupid = 0" in on_worker.value.diag.message_hint


def test_the_coordinators_functions_on_a_node_in_no_cluster_say_so(make_cluster):
    """A node with Citus that is in no cluster yet has nothing to catch up:
    refused, and the hint names no catalog query that cannot answer."""
    node = make_cluster(conf=CITUS_CONF)
    node.start()
    node.sql("CREATE EXTENSION citus")
    node.sql("CREATE EXTENSION pg_idgen")
    for call in ("segment_citus_catch_up()", "segment_citus_range('orders', 1, NULL)"):
        with pytest.raises(psycopg.Error) as refused:
            node.sql(f"SELECT * FROM {call}")
        assert refused.value.sqlstate == "0A000", refused.value
        assert "in no Citus cluster yet" in refused.value.diag.message_primary
        assert "pg_dist_node" not in refused.value.diag.message_hint


def test_a_worker_refused_below_its_mark_is_told_the_catch_up_that_raises_every_tag(make_cluster):
    """A coordinator row lowered on its own timeline (what a cold copy does;
    here by hand, past the guard): worker 2, which took nothing, cannot
    tell; worker 1 refuses with 22000, and its hint is the catch-up, which
    asks every worker — run as written, it raises the row above worker 1's
    mark and worker 1 draws again."""
    cluster = small_cluster(make_cluster)
    c, (w1, w2) = cluster.coordinator, cluster.workers
    drawn = draw_on(w1, 3000)
    c.sql("ALTER TABLE id_segment DISABLE TRIGGER USER")
    c.sql("UPDATE id_segment SET max_id = 10, version = version + 1 WHERE biz_tag = 'orders'")
    c.sql("ALTER TABLE id_segment ENABLE TRIGGER USER")
    refused = draw_until_refused(w1, drawn, 100)
    assert refused is not None and refused.sqlstate == "22000", refused
    hint = refused.diag.message_hint
    assert "SELECT * FROM segment_citus_catch_up();" in hint, hint
    statement = hint[hint.index("SELECT * FROM segment_citus_catch_up();"):].split(";")[0]
    [raised] = c.sql(statement)
    assert raised[0] == "orders" and raised[2] >= max(drawn), raised
    assert wait_for(lambda: _draws(w1), timeout=30)
    drawn += draw_on(w1, 500) + draw_on(w2, 500) + draw_on(c, 500)
    assert_unique(drawn)


def test_a_tag_the_coordinator_lost_is_made_again_above_every_node_by_the_hints(make_cluster):
    """The coordinator lost a tag its workers drew (here dropped; a
    restore or failover from before it was made does the same): a worker
    is refused with 42704 and told to create it on the coordinator; there,
    segment_create at the default start is refused (22023) with the start
    above every worker's mark, and that, run as written, repeats nothing."""
    cluster = small_cluster(make_cluster)
    c, (w1, w2) = cluster.coordinator, cluster.workers
    drawn = draw_on(w1, 1500) + draw_on(w2, 300)
    c.sql("SELECT segment_drop('orders')")
    refused = draw_until_refused(w1, drawn, 100)
    assert refused is not None and refused.sqlstate == "42704", refused
    hint = refused.diag.message_hint
    create = hint[hint.index("SELECT segment_create("):].split(";")[0]
    with pytest.raises(psycopg.Error) as too_low:
        c.sql(create)
    assert too_low.value.sqlstate == "22023", too_low.value
    assert c.sql("SELECT count(*) FROM id_segment WHERE biz_tag = 'orders'") == [(0,)]
    hint = too_low.value.diag.message_hint
    w2.stop("fast")                # a worker that cannot say what it took
    with pytest.raises(psycopg.Error) as unanswered:
        c.sql(hint[hint.index("SELECT segment_create("):].split(";")[0])
    assert unanswered.value.sqlstate == "08006", unanswered.value
    assert c.sql("SELECT count(*) FROM id_segment WHERE biz_tag = 'orders'") == [(0,)]
    w2.start()
    c.sql(hint[hint.index("SELECT segment_create("):].split(";")[0])
    (max_id,), = c.sql("SELECT max_id FROM id_segment WHERE biz_tag = 'orders'")
    assert max_id >= max(drawn)
    for node in (c, w2, w1):
        assert wait_for(lambda: _draws(node), timeout=30)
        drawn += draw_on(node, 500)
    assert_unique(drawn)


def test_a_rename_onto_a_name_the_workers_drew_goes_on_above_them(make_cluster):
    """A tag renamed on the coordinator onto the name of a tag the workers
    drew before it was dropped: refused (22023) while its position is below
    their mark, with a hint that, run as written, moves it above; and a
    role with the grants docs/security.md names (EXECUTE and write access
    to id_segment, none on the workers' tables) creates and renames tags
    there as on a single server."""
    cluster = small_cluster(make_cluster)
    c, (w1, w2) = cluster.coordinator, cluster.workers
    drawn = draw_on(w1, 300) + draw_on(w2, 300)
    c.sql("SELECT segment_drop('orders')")
    c.sql("CREATE ROLE tag_admin")
    c.sql("GRANT EXECUTE ON FUNCTION segment_create(text, bigint, int, boolean), segment_rename(text, text), "
          "segment_setval(text, bigint) TO tag_admin")
    c.sql("GRANT SELECT, INSERT, UPDATE, DELETE ON id_segment TO tag_admin")
    c.sql("SET ROLE tag_admin; SELECT segment_create('orders_v2'); RESET ROLE")
    with pytest.raises(psycopg.Error) as refused:
        c.sql("SET ROLE tag_admin; SELECT segment_rename('orders_v2', 'orders'); RESET ROLE")
    assert refused.value.sqlstate == "22023", refused.value
    assert c.sql("SELECT biz_tag FROM id_segment ORDER BY 1") == [("orders_v2",)]
    hint = refused.value.diag.message_hint
    c.sql(hint[hint.index("SELECT segment_setval("):].split(";")[0])
    c.sql("SET ROLE tag_admin; SELECT segment_rename('orders_v2', 'orders'); RESET ROLE")
    for node in (c, w2, w1):
        assert wait_for(lambda: _draws(node), timeout=30)
        drawn += draw_on(node, 500)
    assert_unique(drawn)


def test_a_node_removed_and_added_again_repeats_nothing(make_cluster):
    cluster = small_cluster(make_cluster, workers=1)
    c = cluster.coordinator
    c.sql("CREATE TABLE refs (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'), "
          "flake bigint NOT NULL DEFAULT snowflake_nextval())")
    c.sql("SELECT create_reference_table('refs')")
    extra = cluster.add_worker()   # holds no shard of a distributed table
    groups = [cluster.group_of(extra)]

    def insert_on(node, n=300):
        with node.connect() as conn:
            conn.execute("INSERT INTO refs SELECT FROM generate_series(1, %s)", (n,))

    insert_on(extra)
    insert_on(c)
    c.sql("SELECT citus_remove_node('127.0.0.1', %s)", (extra.port,))
    c.sql("SELECT citus_add_node('127.0.0.1', %s)", (extra.port,))
    groups.append(cluster.group_of(extra))
    assert groups[1] != groups[0], "Citus gave the node its old group id"
    assert wait_for(lambda: extra.sql("SELECT machine_id FROM snowflake_status WHERE generator = 'default'")
                    == [(groups[1],)], timeout=30)
    insert_on(extra)
    insert_on(cluster.workers[0])
    (rows, ids, flakes), = c.sql("SELECT count(*), count(DISTINCT id), count(DISTINCT flake) FROM refs")
    assert rows == ids == flakes == 1200


def test_explicit_machine_ids_shared_by_two_nodes_are_refused_and_told(make_cluster):
    """Two nodes given the same explicit machine id (a copied
    configuration): proven by asking the other nodes through Citus, both
    refuse snowflake IDs (55000 naming the other node), and
    snowflake_status.machine_problem says so; the third node, with its own
    id, goes on. Fixed (one restarted with 'citus'), IDs flow again."""
    ids = {0: 7, 1: 7, 2: 9}
    conf = ("pg_idgen.refill_timeout = '5s'",)
    cluster = CitusCluster(make_cluster, workers=2, conf=conf,
                           node_conf=lambda i: (f"pg_idgen.machine_id = {ids[i]}",))
    c, w1, w2 = cluster.nodes
    # The namesake check runs at start, before the nodes joined: restart
    # both namesakes so that each looks again, now in the cluster.
    for node in (c, w1):
        node.restart()
    for node, other in ((c, w1), (w1, c)):
        assert wait_for(lambda: node.sql("SELECT machine_problem FROM snowflake_status "
                                         "WHERE generator = 'default'")[0][0] is not None, timeout=60)
        with pytest.raises(psycopg.Error) as refused:
            node.sql("SELECT snowflake_nextval()")
        assert refused.value.sqlstate == "55000", refused.value
        assert f"127.0.0.1:{other.port}" in str(refused.value), refused.value
        assert "machine_id = 'citus'" in refused.value.diag.message_hint
        assert f"WARNING:  snowflake machine id 7 is also" in node.log()
    assert w2.sql("SELECT snowflake_nextval() > 0") == [(True,)]
    assert w2.sql("SELECT machine_problem FROM snowflake_status WHERE generator = 'default'") == [(None,)]
    w1.append_conf("pg_idgen.machine_id = 'citus'")
    w1.restart()
    assert wait_for(lambda: _snowflake_works(w1), timeout=60)
    c.restart()
    assert wait_for(lambda: _snowflake_works(c), timeout=60)


def _snowflake_works(node):
    try:
        node.sql("SELECT snowflake_nextval()")
        return True
    except psycopg.Error:
        return False
