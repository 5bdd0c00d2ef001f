"""A client-side ID pool over pg_idgen's segment_reserve: the
double-buffer generator of the segment-caching article, done right.

    from id_pool import IdPool

    with IdPool("host=/tmp/pg dbname=app", "orders", block_size=10000) as pool:
        order_id = pool.next_id()          # no round trip: from the local block

The pool holds one reservation of `block_size` IDs in the process and hands
them out one by one under a lock, so any number of threads may share it.
When `prefetch_at` (80%) of the reservation is handed out, a background
thread reserves the next one on the pool's own connection
(`SELECT first, last FROM segment_reserve(tag, block_size)`); when the
current reservation runs out, the pool switches to the next one, already in
hand. A caller waits for the database only if that fetch is not back yet
(counted in `pool.waits`).

What it guarantees:

* Never twice. The IDs come from the tag's ranges in shared memory, the
  same ones `segment_nextval(tag)` and every other pool draw from, so no
  pool, no session calling `segment_nextval`, and no program running the
  classic version CAS on the `id_segment` row hands out one of its IDs.
* Strictly increasing per pool. Every reservation is made on the same
  connection, and segment_reserve puts each call's blocks above that
  backend's earlier IDs of the tag; the pool consumes a reservation's
  blocks in order (a reservation that crosses a range boundary is several
  blocks, with a gap between them). After a reconnect (a new backend), and
  behind a pooler in transaction mode (where each call may run on another
  backend), the pool also drops any ID not above the last one it handed
  out, so the order holds whatever the backend returns.
* Unused IDs are a gap, not a loss of uniqueness: `close()` (or the
  process dying) simply forgets the rest of the reservation.

What goes wrong in the article's version. Its `DoubleBufferSegmentGenerator`
keeps, after a successful CAS, `next_current = old_max` and later switches
with `current_id = next_current` and *returns that value* (its synchronous
fallback `_load_segment` does the same). `old_max` is the row's `max_id`
before the update: the last ID of the range the previous holder took, not an
ID of the new range `(old_max, old_max + step]`. So on every switch the
article's client hands out an ID of the previous holder's range: its own
previous range's last ID when it is alone on the row (it hands that ID out
twice itself), or the last ID of another allocator's range — another
instance, or pg_idgen's refill worker — which that allocator hands out too.
Besides: its background thread sets `next_ready` and `loading` outside the
lock, shares one database handle between threads, and measures the 80% mark
against its own `step` even when the row's `step` differs. Here a switch
goes to `first` of the next reservation, and the fetch runs on a connection
no other thread touches.

Behind a connection pooler. The pool keeps no state in the database
session, so it works behind PgBouncer in transaction mode too (tested with
a real one; docs/poolers.md). Its connection runs without psycopg's
automatic prepared statements (`prepare_threshold = None`): psycopg would
prepare the reservation statement at its 6th call, under the name
`_pg3_0`, which another client on the same server connection has
prepared already (DuplicatePreparedStatement), or which the next server
connection does not have. One statement per block gains nothing from
being prepared anyway.
"""

import math
import threading

import psycopg

RESERVE = "SELECT first, last FROM segment_reserve(%s, %s) ORDER BY first"


class PoolClosed(RuntimeError):
    """next_id() on a pool that was closed."""


class IdPool:
    """Thread-safe IDs of one tag, reserved `block_size` at a time.

    `connect` is a libpq connection string, or a function returning a new
    psycopg connection (the pool puts it in autocommit mode, turns its
    automatic prepared statements off, and closes it in `close()`). The first reservation is made in the constructor, so a bad
    tag or connection fails here.
    """

    def __init__(self, connect, tag, block_size=10000, prefetch_at=0.8):
        if not 1 <= block_size <= 1_000_000:
            raise ValueError("block_size must be between 1 and 1,000,000 (segment_reserve's limit)")
        if not 0 < prefetch_at <= 1:
            raise ValueError("prefetch_at must be above 0 and at most 1")
        self.tag = tag
        self.block_size = block_size
        # The call that hands out this many IDs of a reservation asks for the next.
        self._mark = max(1, math.ceil(block_size * prefetch_at))
        self._connect = connect if callable(connect) else (lambda: psycopg.connect(connect))
        self._cond = threading.Condition(threading.Lock())
        self._conn = None            # used by the fetcher only (and by the constructor, before it starts)
        self._next, self._end = -2**63, -2**63 - 1  # the block IDs are handed out from: next ..= end
        self._rest = []              # the current reservation's other blocks, in order
        self._used = 0               # IDs handed out from the current reservation
        self._ahead = None           # the next reservation, once fetched
        self._wanted = False         # the fetcher has been asked for the next reservation
        self._done = 0               # fetches finished, well or not
        self._error = None           # the last fetch's failure, if it failed
        self._closed = False
        self.reserve_calls = 0       # segment_reserve calls that returned a reservation
        self.waits = 0               # next_id calls that had to wait for a fetch
        self._take(self._reserve())
        self._fetcher = threading.Thread(target=self._fetch_loop, name=f"IdPool({tag}) fetcher", daemon=True)
        self._fetcher.start()

    # -- callers ----------------------------------------------------------

    def next_id(self):
        """The next ID: strictly above every ID this pool handed out before."""
        with self._cond:
            value = self._next
            if value <= self._end and not self._closed:     # the fast path: a counter
                self._next = value + 1
                self._used += 1
                if self._used == self._mark and self._ahead is None:
                    self._want()
                return value
            return self._next_slow()

    def _next_slow(self):
        waited = False
        while True:
            if self._closed:
                raise PoolClosed(f"the ID pool of tag {self.tag!r} is closed")
            if self._next <= self._end:
                value = self._next
                self._next = value + 1
                self._used += 1
                if self._used == self._mark and self._ahead is None:
                    self._want()
                return value
            if self._rest:                    # the reservation's next block
                self._next, self._end = self._rest.pop(0)
                continue
            if self._ahead is not None:       # the next reservation, fetched ahead
                self._take(self._ahead)
                self._ahead = None
                continue
            # Nothing in hand: the fetch is late, or failed. A failure of a
            # fetch this call waited for is raised; an older one (of a
            # prefetch) is retried first.
            if waited and self._error is not None:
                raise self._error
            if not waited:
                self.waits += 1
            self._want()
            done = self._done
            self._cond.wait_for(lambda: self._done != done or self._closed)
            waited = True

    def wait_ahead(self, timeout=None):
        """Blocks until the next reservation is in hand (True), or the
        timeout passes, its fetch fails or the pool closes (False)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._ahead is not None or self._closed or (self._error is not None and not self._wanted),
                timeout,
            ) and self._ahead is not None and not self._closed

    @property
    def fetch_requested(self):
        """Whether a fetch of the next reservation is asked for or in flight."""
        with self._cond:
            return self._wanted

    def close(self):
        """Stops the fetcher and closes the connection; the IDs not handed
        out are a gap."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._fetcher.join()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- inside the lock ----------------------------------------------------

    def _want(self):
        if not self._wanted:
            self._wanted = True
            self._cond.notify_all()

    def _take(self, reservation):
        """Makes a fetched reservation the current one, without any ID at or
        below the last one handed out (possible only after a reconnect)."""
        floor = self._next - 1                # the last ID handed out (or below every bigint)
        self._rest = [(max(first, floor + 1), last) for first, last in reservation if last > floor]
        self._next, self._end = floor + 1, floor   # empty: the next call takes the first block
        self._used = 0

    # -- the fetcher thread -------------------------------------------------

    def _reserve(self):
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
            self._conn.autocommit = True
            # No server-side prepared statements: behind a transaction
            # pooler they land on other clients' server connections.
            self._conn.prepare_threshold = None
        rows = self._conn.execute(RESERVE, (self.tag, self.block_size)).fetchall()
        self.reserve_calls += 1
        return [(first, last) for first, last in rows]

    def _fetch_loop(self):
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._wanted or self._closed)
                if self._closed:
                    return
            try:
                reservation, error = self._reserve(), None
            except Exception as e:  # handed to the caller that waits for it
                reservation, error = None, e
                if self._conn is not None:
                    self._conn.close()   # a fresh connection next time
                    self._conn = None
            with self._cond:
                self._wanted = False
                self._done += 1
                self._error = error
                if error is None:
                    self._ahead = reservation
                self._cond.notify_all()
