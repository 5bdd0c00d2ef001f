"""Adaptive prefetch against a real server: a jump from a trickle to full
speed stops causing waits within a second, the cached amount shrinks back
when demand falls, and table updates per million IDs fall as the rate
rises. (A waiting backend's wait event: test_segment.py, on every version.)"""

import threading
import time

from helpers import wait_for


def status(cluster, db, tag, *columns):
    return cluster.sql(f"SELECT {', '.join(columns)} FROM segment_status WHERE tag = %s", (tag,), dbname=db)[0]


def draw_for(cluster, db, tag, seconds, batch, pause=0.0):
    """Draws batches for `seconds`; returns IDs drawn."""
    drawn = 0
    with cluster.connect(db) as conn:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            (n,), = conn.execute(f"SELECT count(segment_nextval(%s)) FROM generate_series(1, {batch})", (tag,))
            drawn += n
            if pause:
                time.sleep(pause)
    return drawn


def test_a_jump_from_a_trickle_to_full_speed_stops_waiting_within_a_second(cluster, db):
    cluster.sql("SELECT segment_create('jump', step => 100)", dbname=db)
    trickle = draw_for(cluster, db, "jump", 1.0, batch=20, pause=0.05)  # a trickle: ~400 IDs/s
    waits_at_jump, = status(cluster, db, "jump", "waits")
    samples = {}

    def sample():
        time.sleep(1.0)
        samples[1.0] = status(cluster, db, "jump", "waits")[0]
        # While the session still draws (after it stops, the worker's
        # estimate of the demand decays), every quarter second: on a busy
        # machine a sample window the session spent descheduled lowers the
        # estimate for a moment, so the largest reading is the one that
        # says whether the distance followed the demand.
        samples["distances"] = []
        for _ in range(7):
            time.sleep(0.25)
            samples["distances"].append(status(cluster, db, "jump", "safe_distance")[0])

    sampler = threading.Thread(target=sample)
    sampler.start()
    drawn = draw_for(cluster, db, "jump", 3.0, batch=100_000)  # as fast as one session draws
    sampler.join()
    waits_at_end, refills = status(cluster, db, "jump", "waits", "refills")
    distance = max(samples["distances"])
    # The demand jumped (a ratio of two rates in one run, not a speed): a
    # session drawing batches with no pause takes far more than the trickle.
    assert drawn / 3 > 50 * trickle, f"{drawn} IDs in 3 s after {trickle} in 1 s: the load did not jump"
    assert samples[1.0] - waits_at_jump < 20, "adapting took too many waits"
    assert waits_at_end == samples[1.0], \
        f"{waits_at_end - samples[1.0]} calls still waited after the first second"
    # The worker keeps a quarter second of demand cached (policy.rs's
    # HORIZON_MS): at least half of that at the rate this session drew —
    # a ratio to the measured rate, not a speed (a fixed 100,000 failed on
    # a loaded machine that drew 360,000 IDs/s).
    assert distance >= drawn / 3 * 0.25 / 2, f"safe distance {distance} did not follow the demand ({drawn} IDs in 3 s)"
    assert refills < drawn / 10_000, f"{refills} refills for {drawn} IDs at step 100"


def test_the_cached_amount_shrinks_back_when_demand_falls(cluster, db):
    cluster.sql("SELECT segment_create('ebb', step => 100)", dbname=db)
    draw_for(cluster, db, "ebb", 1.5, batch=100_000)
    busy, = status(cluster, db, "ebb", "safe_distance")
    assert busy >= 100_000
    # A trickle keeps the worker looking at the tag; its distance decays.
    trickle = threading.Thread(target=lambda: draw_for(cluster, db, "ebb", 6.0, batch=5, pause=0.05))
    trickle.start()
    try:
        shrunk = wait_for(lambda: status(cluster, db, "ebb", "safe_distance")[0] <= max(busy // 100, 1000),
                          timeout=6.0, interval=0.2)
    finally:
        trickle.join()
    idle, = status(cluster, db, "ebb", "safe_distance")
    assert shrunk, f"safe distance stayed at {idle} after demand fell (was {busy})"


def test_table_updates_per_million_ids_fall_as_the_rate_rises(cluster, db):
    cluster.sql("SELECT segment_create('slow', step => 100)", dbname=db)
    cluster.sql("SELECT segment_create('fast', step => 100)", dbname=db)
    slow_ids = draw_for(cluster, db, "slow", 2.0, batch=200, pause=0.01)
    fast_ids = draw_for(cluster, db, "fast", 2.0, batch=100_000)
    (slow_refills,), (fast_refills,) = (status(cluster, db, t, "refills") for t in ("slow", "fast"))
    slow_per_million = slow_refills * 1e6 / slow_ids
    fast_per_million = fast_refills * 1e6 / fast_ids
    assert fast_ids > 20 * slow_ids, "the fast load was not faster"
    assert fast_per_million * 10 < slow_per_million, \
        f"{fast_per_million:.1f} updates per million IDs when fast vs {slow_per_million:.1f} when slow"
