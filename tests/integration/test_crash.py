"""Crashes: `pg_ctl stop -m immediate` while sessions draw IDs, then a
restart. Every ID any client received, in committed or rolled-back
transactions, is recorded outside the database; none may repeat."""

import random
import threading
import time

import psycopg

from conftest import assert_unique

ROUNDS = 4
SESSIONS = 4


def drawing_session(cluster, db, received, lock, stop):
    """Draws IDs until the server goes away, recording each one received."""
    try:
        with cluster.connect(db, autocommit=False) as conn:
            n = 0
            while not stop.is_set():
                n += 1
                if n % 3 == 0:
                    rows = conn.execute("SELECT segment_nextval('crash') FROM generate_series(1, 50)").fetchall()
                    ids = [r[0] for r in rows]
                    with lock:
                        received.extend(ids)
                    conn.rollback()
                else:
                    rows = conn.execute("INSERT INTO t DEFAULT VALUES RETURNING id").fetchall()
                    with lock:
                        received.extend(r[0] for r in rows)
                    conn.commit()
    except psycopg.Error:
        pass  # the server went down under us


def test_immediate_stops_never_repeat_an_id(make_cluster):
    cluster = make_cluster()
    cluster.start()
    cluster.sql("CREATE EXTENSION pg_idgen")
    cluster.sql("SELECT segment_create('crash', step => 10)")
    cluster.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT segment_nextval('crash'))")
    received, lock = [], threading.Lock()
    rng = random.Random(20261130)
    per_round = []
    for _ in range(ROUNDS):
        stop = threading.Event()
        sessions = [threading.Thread(target=drawing_session, args=(cluster, "postgres", received, lock, stop))
                    for _ in range(SESSIONS)]
        before = len(received)
        for s in sessions:
            s.start()
        time.sleep(rng.uniform(0.5, 1.5))
        cluster.stop("immediate")
        stop.set()
        for s in sessions:
            s.join()
        per_round.append(len(received) - before)
        cluster.start()
    # After the last restart, draw some more: still nothing repeats.
    with cluster.connect() as conn:
        received.extend(r[0] for r in conn.execute("SELECT segment_nextval('crash') FROM generate_series(1, 500)"))
    assert all(n > 100 for n in per_round), f"too few IDs drawn per round to mean anything: {per_round}"
    assert_unique(received)
    (committed,), = cluster.sql("SELECT count(*) FROM t")
    assert committed > 0
    assert "terminated by signal" not in cluster.log(), "a server process crashed on its own"
