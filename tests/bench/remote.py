"""pg_idgen's benchmark, part two: tags attached to a slow central server.

  python tests/bench/remote.py [--quick] [--out DIR]

One central cluster whose id_segment answers every refill 5 ms late (a
BEFORE UPDATE trigger running pg_sleep(0.005)); two shards, each a
throwaway cluster of its own with default settings, whose tag `orders`
(step 100) is attached to it through postgres_fdw (segment_attach). On each
shard SESSIONS sessions draw IDs at once: first a warm-up (the refill
worker learns the demand and fills its cache), then a fixed number of IDs
per session. Per shard it reports the IDs drawn after the warm-up, the
calls that waited for a refill in that time (segment_status.waits, before
and after), the refills — each one UPDATE of the central row — per million
IDs, and IDs per second. The central row's version, read before and after,
counts the same updates from the other side.

It reports numbers and asserts nothing: on a busy machine the rates vary
from run to run, and so may the waits.

Writes remote.md and remote.json to --out (the docs' <!-- bench-remote:start
--> block is put in by publish.py, from a whole run of bash tests/bench.sh
--update-docs).
"""

import threading
import time

# bench.py puts tests/lib on the path: import it first.
from bench import bench_command, describe_machine, header, parse_run_args, progress, write_results
from cluster import Cluster


MODES = {
    "full": dict(warmup_seconds=3.0, ids_per_session=10_000_000),
    "quick": dict(warmup_seconds=1.0, ids_per_session=500_000),
}
SHARDS = 2
SESSIONS = 2
STEP = 100
DELAY_S = 0.005
BATCH = 100_000
DRAW = f"SELECT count(segment_nextval('orders')) FROM generate_series(1, {BATCH})"

# postgres_fdw's sessions run with search_path = pg_catalog: everything
# is schema-qualified. Each shard's server names it in application_name; the
# trigger logs who updated the row, in the updating transaction, so a log
# row stands for exactly one committed update.
SLOW_CENTRAL = f"""
CREATE TABLE public.central_updates (shard text NOT NULL);
CREATE FUNCTION public.slow_refill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.pg_sleep({DELAY_S});
    INSERT INTO public.central_updates VALUES (pg_catalog.current_setting('application_name'));
    RETURN NEW;
END$$;
CREATE TRIGGER slow_refill BEFORE UPDATE ON public.id_segment
    FOR EACH ROW EXECUTE FUNCTION public.slow_refill();
"""

STATUS = """SELECT waits, wait_ms, refills, cas_conflicts, refill_failures, ids_taken,
                   last_refill_ms, steps_per_refill, safe_distance, ids_ahead + remaining_in_range,
                   ranges_ahead, last_error
              FROM segment_status WHERE tag = 'orders' AND database = current_database()"""
STATUS_KEYS = ["waits", "wait_ms", "refills", "cas_conflicts", "refill_failures", "ids_taken",
               "last_refill_ms", "steps_per_refill", "safe_distance", "cached", "ranges_ahead", "last_error"]


def status(shard):
    row, = shard.sql(STATUS, dbname="bench")
    return dict(zip(STATUS_KEYS, row))


def central_counts(central):
    """The central row's version, and its updates so far by shard name."""
    (version,), = central.sql("SELECT version FROM id_segment WHERE biz_tag = 'orders'", dbname="ids")
    by_shard = dict(central.sql("SELECT shard, count(*) FROM central_updates GROUP BY shard", dbname="ids"))
    return version, by_shard


def setup(central, shards):
    central.start()
    central.sql("CREATE DATABASE ids")
    central.sql("CREATE EXTENSION pg_idgen", dbname="ids")
    central.sql(f"SELECT segment_create('orders', step => {STEP})", dbname="ids")
    central.sql(SLOW_CENTRAL, dbname="ids")
    for number, shard in enumerate(shards, 1):
        shard.start()
        shard.sql("CREATE DATABASE bench")
        for statement in [
            "CREATE EXTENSION pg_idgen",
            "CREATE EXTENSION postgres_fdw",
            f"CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{central.dir}', "
            f"dbname 'ids', connect_timeout '5', application_name 'shard{number}', "
            "options '-c synchronous_commit=on -c lock_timeout=10ms -c idle_in_transaction_session_timeout=5s')",
            "CREATE USER MAPPING FOR CURRENT_USER SERVER central OPTIONS (user 'postgres')",
            "SELECT segment_attach('orders', 'central')",
        ]:
            shard.sql(statement, dbname="bench")


def run(central, shards, warmup_seconds, ids_per_session):
    """Warm-up, a snapshot, the measured draws, a snapshot."""
    sessions = [(s, i) for s in range(len(shards)) for i in range(SESSIONS)]
    warmed = threading.Barrier(len(sessions) + 1)
    go = threading.Barrier(len(sessions) + 1)
    finished, failures = {}, []

    def session(s, i):
        try:
            with shards[s].connect("bench") as conn:
                until = time.monotonic() + warmup_seconds
                conn.execute(DRAW).fetchall()
                while time.monotonic() < until:
                    conn.execute(DRAW).fetchall()
                warmed.wait()
                go.wait()
                drawn = 0
                while drawn < ids_per_session:
                    drawn += conn.execute(DRAW).fetchall()[0][0]
                finished[(s, i)] = (time.monotonic(), drawn)
        except Exception as e:  # reported below
            failures.append(e)
            warmed.abort()
            go.abort()

    version_at_start, _ = central_counts(central)
    threads = [threading.Thread(target=session, args=key) for key in sessions]
    for t in threads:
        t.start()
    try:
        warmed.wait()
        before = [status(shard) for shard in shards]
        version_before, central_before = central_counts(central)
        started = time.monotonic()
        go.wait()
    except threading.BrokenBarrierError:
        pass
    for t in threads:
        t.join()
    if failures:
        raise SystemExit(f"a session failed: {failures[0]!r}")
    after = [status(shard) for shard in shards]
    version_after, central_after = central_counts(central)

    results = []
    for s in range(len(shards)):
        ends = [finished[(s, i)] for i in range(SESSIONS)]
        ids = sum(drawn for _, drawn in ends)
        seconds = max(end for end, _ in ends) - started
        delta = {k: after[s][k] - before[s][k] for k in ("waits", "wait_ms", "refills", "cas_conflicts",
                                                          "refill_failures", "ids_taken")}
        name = f"shard{s + 1}"
        updates = central_after.get(name, 0) - central_before.get(name, 0)
        results.append({
            "shard": s + 1, "ids": ids, "seconds": seconds, "ids_per_second": ids / seconds,
            # The shard's slot for `orders` was made by this run's first
            # call: its counters before the measured part are the warm-up's.
            "warmup_waits": before[s]["waits"], "warmup_refills": before[s]["refills"],
            "waits": delta["waits"], "wait_ms": delta["wait_ms"], "refills": delta["refills"],
            "cas_conflicts": delta["cas_conflicts"], "refill_failures": delta["refill_failures"],
            "central_updates": updates, "updates_per_million": updates * 1e6 / ids,
            "ids_per_update": ids / updates if updates else None,
            "last_refill_ms": after[s]["last_refill_ms"], "safe_distance": after[s]["safe_distance"],
            "cached_after": after[s]["cached"], "last_error": after[s]["last_error"],
            "before": before[s], "after": after[s],
        })
        progress(f"shard {s + 1}: {ids:,} IDs in {seconds:.2f} s, {delta['waits']} waits, "
                 f"{updates} central-row updates, {delta['refills']} refills, "
                 f"{delta['refill_failures']} refill failures")
    return results, {"version_at_start": version_at_start, "version_before": version_before, "version_after": version_after,
                     "updates": version_after - version_before}


def markdown(results, mode):
    m = results["machine"]
    shards = results["shards"]
    central = results["central"]
    total_ids = sum(r["ids"] for r in shards)
    lines = [
        header(m, results["command"], mode),
        "",
        f"**Tags attached to a slow central server** (`tests/bench/remote.py`): the central server's "
        f"`id_segment` answers every refill {DELAY_S * 1000:.0f} ms late (a `BEFORE UPDATE` trigger running "
        f"`pg_sleep({DELAY_S})`); {SHARDS} shards, each a cluster of its own with default settings "
        "(`remote_cache_ahead` 60 s, `max_ids_ahead` 10,000,000), attach `orders` (step "
        f"{STEP}) to it through postgres_fdw; {SESSIONS} sessions per shard, all at once, draw "
        f"`count(segment_nextval('orders'))` over {BATCH:,}-row batches: {results['warmup_seconds']:g} s of "
        f"warm-up, then {results['ids_per_session']:,} IDs each.",
        "",
        "| shard | IDs after warm-up | waits after warm-up | waits in warm-up | central-row updates "
        "| central-row updates per million IDs | ranges published | refill failures | last refill ms | IDs/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in shards:
        last = f"{r['last_refill_ms']:.1f}" if r["last_refill_ms"] is not None else "—"
        lines.append(f"| {r['shard']} | {r['ids']:,} | {r['waits']} | {r['warmup_waits']} | {r['central_updates']} "
                     f"| {r['updates_per_million']:.2f} | {r['refills']} | {r['refill_failures']} | {last} "
                     f"| {r['ids_per_second']:,.0f} |")
    conflicts = sum(r["cas_conflicts"] for r in shards)
    lines += [
        "",
        "Central-row updates are counted on the central server (the trigger records the shard's "
        "`application_name` in the updating transaction) between the end of the warm-up and the end of the "
        f"run; the row's `version` rose by {central['updates']} in that time "
        f"({central['updates'] * 1e6 / total_ids:.2f} per million IDs, both shards). Ranges published and "
        "refill failures are the shard's `segment_status.refills` and `refill_failures` over the same time, "
        "read a moment apart from the central count, so a refill in flight at either end may fall on one "
        "side only; an update with no range published for it is a refill that failed after the central "
        f"commit, and its IDs are a gap. {conflicts} version checks were lost to the other shard and "
        f"retried. IDs/s is per shard, its {SESSIONS} sessions together, on a machine the shards and the "
        "central server share; last refill ms is the worker's whole refill, the central server's delay and "
        "both commits included.",
    ]
    errors = [(r["shard"], r["last_error"]) for r in shards if r["refill_failures"] and r["last_error"]]
    if errors:
        lines += ["", "Last refill error: " + "; ".join(f"shard {n}: `{e}`" for n, e in errors) + "."]
    return "\n".join(lines) + "\n"


def main():
    args, mode, out = parse_run_args(__doc__, "a smoke run: short warm-up, fewer IDs", "pg_idgen-bench-remote.")
    settings = MODES[mode]

    central = Cluster(name="pg_idgen-bench-central.")
    shards = [Cluster(conf=[f"pg_idgen.machine_id = {i + 1}"], name=f"pg_idgen-bench-shard{i + 1}.")
              for i in range(SHARDS)]
    try:
        setup(central, shards)
        progress(f"{mode} run; central server in {central.dir}, shards in "
                 + ", ".join(s.dir for s in shards))
        results = {"command": bench_command(args.quick, "remote.py"), "mode": mode, **settings,
                   "shards_count": SHARDS, "sessions_per_shard": SESSIONS, "step": STEP,
                   "central_delay_ms": DELAY_S * 1000}
        results["machine"] = describe_machine(shards[0])
        results["shards"], results["central"] = run(central, shards, settings["warmup_seconds"],
                                                    settings["ids_per_session"])
    finally:
        for cluster in [*shards, central]:
            cluster.destroy()

    write_results(out, "remote", results, markdown(results, mode))


if __name__ == "__main__":
    main()
