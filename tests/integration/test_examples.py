"""The client examples against a real server: the ID pool
(examples/id_pool.py) under many threads, beside another pool, plain
segment_nextval callers and a program running the classic version-CAS protocol on
the row; the URL-shortener article's double buffer, shown to repeat an ID; and the URL
shortener (examples/shortener/) run as a program.

No assertion depends on how fast the machine is: the prefetch is checked by
counting segment_reserve calls at fixed points of the pool's use, and by
waiting (without a deadline that matters) for the fetch it started."""

import math
import os
import subprocess
import sys
import threading

import psycopg
import pytest

from helpers import REPO, assert_increasing, assert_unique

sys.path.insert(0, os.path.join(REPO, "examples"))
from id_pool import IdPool, PoolClosed  # noqa: E402

SHORTEN = os.path.join(REPO, "examples", "shortener", "shorten.py")


class CountingCursor(psycopg.Cursor):
    """Counts the segment_reserve statements its connection runs, and keeps
    the blocks they return: the pool seen from the outside."""

    def execute(self, query, params=None, **kwargs):
        self._reserve = "segment_reserve" in str(query)
        if self._reserve:
            self.connection.reserve_statements += 1
        return super().execute(query, params, **kwargs)

    def fetchall(self):
        rows = super().fetchall()
        if getattr(self, "_reserve", False):
            self.connection.reservations.append(rows)
        return rows


def counting_factory(cluster, dbname):
    made = []

    def connect():
        conn = cluster.connect(dbname, cursor_factory=CountingCursor)
        conn.reserve_statements = 0
        conn.reservations = []
        made.append(conn)
        return conn

    return connect, made


def reserve_statements(made):
    return sum(conn.reserve_statements for conn in made)


def classic_cas_ranges(conn, tag, rounds):
    """The classic version-CAS protocol, done right: (max_id - step, max_id] after a won CAS."""
    ids = []
    while rounds:
        (max_id, step, version), = conn.execute(
            "SELECT max_id, step, version FROM id_segment WHERE biz_tag = %s", (tag,)).fetchall()
        won = conn.execute(
            "UPDATE id_segment SET max_id = max_id + step, version = version + 1 "
            "WHERE biz_tag = %s AND version = %s RETURNING max_id", (tag, version)).fetchall()
        if won:
            top = won[0][0]
            ids.extend(range(top - step + 1, top + 1))
            rounds -= 1
    return ids


def test_pool_prefetches_at_the_mark_and_never_waits_when_the_fetch_is_back(cluster, db):
    cluster.sql("SELECT segment_create('pool', step => 300)", dbname=db)
    connect, made = counting_factory(cluster, db)
    block = 1000
    with IdPool(connect, "pool", block_size=block, prefetch_at=0.8) as pool:
        assert reserve_statements(made) == 1 and pool.reserve_calls == 1
        ids = [pool.next_id() for _ in range(799)]
        # Below the mark nothing is asked for: the fetcher only acts on a request.
        assert not pool.fetch_requested
        assert reserve_statements(made) == 1
        ids.append(pool.next_id())                  # the 800th: 80% of the block
        assert pool.wait_ahead(timeout=120), "the prefetch did not arrive"
        assert reserve_statements(made) == 2
        # The rest of the block, then the switch: no call waited for the database.
        ids += [pool.next_id() for _ in range(block - 800 + 1)]
        assert pool.waits == 0
        assert reserve_statements(made) == 2        # the next prefetch is 800 IDs away
        # On to the mark of each of the next three reservations (799 more
        # in this one, then 200 + 800 each), each prefetch awaited there.
        for count in (799, 1000, 1000):
            ids += [pool.next_id() for _ in range(count - 1)]
            assert not pool.fetch_requested
            ids.append(pool.next_id())
            assert pool.wait_ahead(timeout=120)
        assert pool.waits == 0
        assert reserve_statements(made) == pool.reserve_calls == 5
    assert len(made) == 1, "every reservation on one connection"
    assert_unique(ids)
    assert_increasing(ids)
    # Exactly the reserved IDs, in order: reservations 1-3 whole, then the
    # first 800 of the 4th (the 5th is the one fetched ahead).
    reserved = [[i for first, last in blocks for i in range(first, last + 1)]
                for blocks in made[0].reservations]
    assert [len(r) for r in reserved] == [block] * 5
    assert ids == reserved[0] + reserved[1] + reserved[2] + reserved[3][:800]


class ScriptedConnection:
    """Stands in for a psycopg connection: each segment_reserve pops the
    next outcome of a script shared by all connections: a reservation (a
    list of blocks) or an error to raise."""

    def __init__(self, script):
        self.script, self.autocommit, self.closed, self.rows = script, False, False, None

    def execute(self, query, params):
        assert "segment_reserve" in query and self.autocommit
        outcome = self.script.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        self.rows = outcome
        return self

    def fetchall(self):
        return self.rows

    def close(self):
        self.closed = True


def test_pool_consumes_a_reservations_blocks_in_order_and_recovers_from_a_failed_fetch():
    script = [
        [(1, 3), (10, 11)],            # a reservation crossing a range boundary: two blocks
        [(20, 24)],
        psycopg.OperationalError("server closed the connection"),
        psycopg.OperationalError("still down"),
        [(22, 23), (30, 32)],          # after the reconnect: 22 and 23 are not above 24
    ]
    made = []

    def connect():
        made.append(ScriptedConnection(script))
        return made[-1]

    pool = IdPool(connect, "t", block_size=5, prefetch_at=0.8)
    ids = [pool.next_id() for _ in range(5)]
    assert ids == [1, 2, 3, 10, 11]
    assert pool.wait_ahead(timeout=120)
    ids += [pool.next_id() for _ in range(5)]      # the 4th asks for the next: it fails
    assert ids[5:] == [20, 21, 22, 23, 24]
    assert not pool.wait_ahead(timeout=120)        # the failed prefetch
    # Nothing in hand: the stale failure is retried; the retry fails too and
    # reaches the caller that waited for it.
    with pytest.raises(psycopg.OperationalError, match="still down"):
        pool.next_id()
    assert made[0].closed and made[1].closed      # each failure drops its connection
    # The next call reconnects, and drops what is not above 24.
    ids += [pool.next_id() for _ in range(3)]
    assert ids[10:] == [30, 31, 32]
    assert len(made) == 3 and pool.reserve_calls == 3 and not script
    assert pool.waits == 2
    pool.close()
    assert made[2].closed
    with pytest.raises(PoolClosed):
        pool.next_id()
    with pytest.raises(ValueError):
        IdPool(connect, "t", block_size=0)
    with pytest.raises(ValueError):
        IdPool(connect, "t", prefetch_at=0)


def test_pool_waits_instead_of_failing_when_the_fetch_is_late(cluster, db):
    """prefetch_at = 1: the next reservation is asked for by the call that
    takes the last ID, so the next call may find nothing in hand and wait."""
    cluster.sql("SELECT segment_create('late', step => 50)", dbname=db)
    with IdPool(lambda: cluster.connect(db), "late", block_size=100, prefetch_at=1.0) as pool:
        ids = [pool.next_id() for _ in range(1000)]
        assert pool.reserve_calls in (10, 11)
    assert_unique(ids)
    assert_increasing(ids)
    with pytest.raises(PoolClosed):
        pool.next_id()


def test_pool_under_many_threads(cluster, db):
    cluster.sql("SELECT segment_create('threads', step => 1000)", dbname=db)
    connect, made = counting_factory(cluster, db)
    threads, per_thread, block = 8, 20_000, 2_500
    got = [[] for _ in range(threads)]
    start = threading.Barrier(threads)
    failures = []

    def work(i):
        try:
            start.wait()
            for _ in range(per_thread):
                got[i].append(pool.next_id())
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    with IdPool(connect, "threads", block_size=block) as pool:
        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        assert not failures, failures[0]
    calls = pool.reserve_calls
    everything = [i for ids in got for i in ids]
    assert len(everything) == threads * per_thread
    assert_unique(everything)
    for ids in got:
        assert_increasing(ids)   # each thread sees a part of the pool's increasing order
    needed = math.ceil(threads * per_thread / block)
    # One call per reservation used, plus at most the one fetched ahead.
    assert needed <= calls <= needed + 1
    assert reserve_statements(made) == calls
    assert len(made) == 1


def test_two_pools_segment_nextval_and_a_classic_version_cas_client_share_no_id(cluster, db):
    cluster.sql("SELECT segment_create('shared', step => 500)", dbname=db)
    results, failures = {}, []

    def pool_user(name, block):
        try:
            with IdPool(lambda: cluster.connect(db), "shared", block_size=block) as pool:
                ids = [pool.next_id() for _ in range(30_000)]
            assert_increasing(ids)
            results[name] = ids
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    def nextval_user():
        try:
            with cluster.connect(db) as conn:
                ids = []
                for _ in range(30):
                    ids += [r[0] for r in conn.execute(
                        "SELECT segment_nextval('shared') FROM generate_series(1, 1000)").fetchall()]
                ids += [r[0] for r in conn.execute("SELECT segment_nextval('shared', 5000)").fetchall()]
            results["segment_nextval"] = ids
        except Exception as e:  # noqa: BLE001
            failures.append(e)

    def cas_user():
        try:
            with cluster.connect(db) as conn:
                results["classic CAS"] = classic_cas_ranges(conn, "shared", 20)
        except Exception as e:  # noqa: BLE001
            failures.append(e)

    workers = [threading.Thread(target=pool_user, args=("pool A", 1000)),
               threading.Thread(target=pool_user, args=("pool B", 7000)),
               threading.Thread(target=nextval_user), threading.Thread(target=cas_user)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not failures, failures[0]
    assert set(results) == {"pool A", "pool B", "segment_nextval", "classic CAS"}
    owner = {}
    for name, ids in results.items():
        assert_unique(ids)
        for i in ids:
            assert i not in owner, f"ID {i} handed out by {owner[i]} and by {name}"
            owner[i] = name
    assert len(owner) == 30_000 * 2 + 35_000 + 20 * 500


class ArticleDoubleBuffer:
    """The URL-shortener article's DoubleBufferSegmentGenerator, transcribed (its loads and its
    switch; the background thread left out, so the switch takes the
    synchronous path, which has the same flaw)."""

    def __init__(self, conn, tag):
        self.conn, self.tag = conn, tag
        self.current_id = self.current_max = 0
        self._load_segment()

    def _cas(self):
        while True:
            (old_max, step, version), = self.conn.execute(
                "SELECT max_id, step, version FROM id_segment WHERE biz_tag = %s", (self.tag,)).fetchall()
            new_max = old_max + step
            if self.conn.execute("UPDATE id_segment SET max_id = %s, version = version + 1 "
                                 "WHERE biz_tag = %s AND version = %s",
                                 (new_max, self.tag, version)).rowcount > 0:
                return old_max, new_max

    def _load_segment(self):
        self.current_id, self.current_max = self._cas()

    def next_id(self):
        self.current_id += 1
        if self.current_id > self.current_max:
            self._load_segment()          # the article: current_id = old_max
        return self.current_id


def test_the_articles_double_buffer_repeats_an_id_on_every_switch(cluster, db):
    """What the pool's docstring says goes wrong: after a switch the article's
    generator returns old_max, the last ID of the previous holder's range."""
    cluster.sql("SELECT segment_create('article', step => 10)", dbname=db)
    with cluster.connect(db) as conn:
        article = ArticleDoubleBuffer(conn, "article")
        alone = [article.next_id() for _ in range(11)]
        # Alone on the row: ID 10 twice, its own previous range's last ID.
        assert alone[9] == alone[10] == 10
        # Beside pg_idgen: the article's first ID after a switch is one
        # segment_nextval has handed out (or will: the top of its range).
        ours = [r[0] for r in conn.execute("SELECT segment_nextval('article') FROM generate_series(1, 10)")]
        while article.current_id < article.current_max:
            article.next_id()
        after_switch = article.next_id()
        assert after_switch > max(alone)
        # The top of the range pg_idgen's worker took last: this backend's
        # segment_nextval hands it out in its turn.
        for _ in range(1000):
            if max(ours) >= after_switch:
                break
            ours += [r[0] for r in conn.execute("SELECT segment_nextval('article') FROM generate_series(1, 10)")]
        assert after_switch in ours, (after_switch, ours)


# --------------------------------------------------------------------------
# The URL shortener, as a program.

def shorten(cluster, db, *args):
    conninfo = f"host={cluster.dir} user=postgres dbname={db}"
    return subprocess.run([sys.executable, SHORTEN, "--db", conninfo, *args],
                          capture_output=True, text=True, timeout=120)


def test_shortener_end_to_end(cluster):
    db = cluster.new_database(extension=False)     # --init creates the extension
    init = shorten(cluster, db, "--init")
    assert init.returncode == 0, init.stderr
    assert shorten(cluster, db, "--init").returncode == 0, "the schema is idempotent"

    urls = [f"https://example.com/page/{i}?q=%20x" for i in range(5)] + ["http://example.org/"]
    out = shorten(cluster, db, *urls)
    assert out.returncode == 0, out.stderr
    codes = out.stdout.split()
    assert len(codes) == len(urls) and len(set(codes)) == len(codes)
    assert all(len(c) >= 3 and c.isalnum() for c in codes)
    # One more run, a new connection: new codes.
    more = shorten(cluster, db, "https://example.net/")
    assert more.returncode == 0 and more.stdout.strip() not in codes

    back = shorten(cluster, db, "--resolve", *codes)
    assert back.returncode == 0, back.stderr
    assert back.stdout.splitlines() == urls
    # The table agrees: the code column is idgen_base62 of the segment ID.
    rows = cluster.sql("SELECT id, code, idgen_base62(id), url FROM links ORDER BY id", dbname=db)
    assert all(code == expected for _, code, expected, _ in rows)
    assert [url for *_, url in rows[:len(urls)]] == urls
    assert rows[0][0] >= 3844

    bad = shorten(cluster, db, "--resolve", "ab-c")
    assert bad.returncode == 2
    assert "not a short code" in bad.stderr and "Traceback" not in bad.stderr
    too_big = shorten(cluster, db, "--resolve", "zzzzzzzzzzzzzzzz")
    assert too_big.returncode == 2 and "Traceback" not in too_big.stderr
    missing = shorten(cluster, db, "--resolve", "zz")
    assert missing.returncode == 1
    assert "no link for code 'zz'" in missing.stderr
    not_a_url = shorten(cluster, db, "ftp://example.com/x")
    assert not_a_url.returncode == 2 and "Traceback" not in not_a_url.stderr
    nowhere = subprocess.run([sys.executable, SHORTEN, "--db", f"host={cluster.dir} user=postgres dbname=nope",
                              "--resolve", "101"], capture_output=True, text=True, timeout=120)
    assert nowhere.returncode == 3 and "database error" in nowhere.stderr
