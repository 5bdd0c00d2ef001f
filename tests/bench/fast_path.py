"""pg_idgen's benchmark, the call-site cache: the marginal cost per ID of
segment_nextval with a constant tag (never compared), with a tag read from a
column (compared with the previous one on every call), the pgrx floor
(idgen_floor(), one atomic add) and nextval CACHE 1, interleaved in one run
on a throwaway cluster.

  python tests/bench/fast_path.py [--quick] [--out DIR]

Needs pg_idgen and idgen_floor installed (bash tests/bench.sh does both, and
runs this as part of its full run). Each figure is the median query time
less the median of its bare query (`SELECT count(*) FROM generate_series(1,
N)`, or `SELECT count(tag) FROM tags` for the tag read from a column),
divided by N, over the rounds after a first one that warms up and is not
counted. Writes fast_path.md and fast_path.json to --out (the docs'
<!-- bench-fastpath:start --> block is put in by publish.py, from a whole run
of bash tests/bench.sh --update-docs).
"""

import statistics
import time

# bench.py puts tests/lib on the path: import it first.
from bench import bench_command, describe_machine, header, parse_run_args, progress, write_results
from cluster import Cluster

MODES = {"full": dict(n=5_000_000, rounds=7), "quick": dict(n=300_000, rounds=2)}

# (label, query, its bare query)
MEASURED = [
    ("segment_nextval('t'), a constant tag", "SELECT count(segment_nextval('t')) FROM generate_series(1, {n})",
     "bare"),
    ("floor: pgrx function, one atomic add", "SELECT count(idgen_floor()) FROM generate_series(1, {n})", "bare"),
    ("segment_nextval(tag), the tag read from a column", "SELECT count(segment_nextval(tag)) FROM tags",
     "bare (table)"),
    ("nextval, CACHE 1", "SELECT count(nextval('s1')) FROM generate_series(1, {n})", "bare"),
]
BARE = {"bare": "SELECT count(*) FROM generate_series(1, {n})", "bare (table)": "SELECT count(tag) FROM tags"}


def measure(cluster, n, rounds):
    """Seconds per query: {name: [one per round]}, the bare queries
    included; each round runs every query once, each bare query just before
    the ones measured over it."""
    queries = {}
    for bare, bare_query in BARE.items():
        queries[bare] = bare_query.format(n=n)
        queries.update({label: q.format(n=n) for label, q, over in MEASURED if over == bare})
    times = {name: [] for name in queries}
    with cluster.connect() as conn:
        conn.execute("SET max_parallel_workers_per_gather = 0")
        conn.execute("SELECT count(segment_nextval('t')) FROM generate_series(1, 1000000)")
        for round_no in range(0, rounds + 1):      # round 0 warms up, and is not counted
            for name, query in queries.items():
                started = time.perf_counter()
                conn.execute(query).fetchall()
                if round_no:
                    times[name].append(time.perf_counter() - started)
            progress(f"round {round_no}/{rounds} done" if round_no else "warm-up round done")
    return times


def marginal(results):
    """ns per ID over its bare query: {label: median}."""
    n, med = results["n"], {name: statistics.median(v) for name, v in results["seconds"].items()}
    return {label: (med[label] - med[bare]) / n * 1e9 for label, _, bare in MEASURED}


def markdown(results, mode):
    ns = marginal(results)
    n = results["n"]
    bare = statistics.median(results["seconds"]["bare"]) / n * 1e9
    const, floor, column, seq = (ns[label] for label, _, _ in MEASURED)
    lines = [
        header(results["machine"], results["command"], mode),
        "",
        f"**The call-site cache** (`tests/bench/fast_path.py`): marginal cost per ID over the bare query, "
        f"N = {n:,}, median of {results['rounds']} rounds in one session; bare query {bare:.0f} ns per row.",
        "",
        "| call | ns per ID (median) |",
        "|---|---:|",
    ]
    lines += [f"| {label} | {ns[label]:.1f} |" for label, _, _ in MEASURED]
    lines += [
        "",
        f"A constant tag costs {const:.1f} ns per ID against {floor:.1f} ns for the pgrx floor in the same run "
        f"({const - floor:+.1f} ns); a tag read from a column, compared with the previous one on every call, "
        f"{column:.1f} ns; `nextval` CACHE 1, {seq:.1f} ns.",
    ]
    return "\n".join(lines) + "\n"


def main():
    args, mode, out = parse_run_args(__doc__, "a smoke run: small N, two rounds", "pg_idgen-bench-fastpath.")
    settings = MODES[mode]
    n = settings["n"]
    cluster = Cluster(name="pg_idgen-bench-fastpath.")
    try:
        cluster.start()
        for statement in ["CREATE EXTENSION pg_idgen", "CREATE EXTENSION idgen_floor",
                          "SELECT segment_create('t', step => 100000)", "CREATE SEQUENCE s1 CACHE 1",
                          f"CREATE TABLE tags AS SELECT 't'::text AS tag, g FROM generate_series(1, {n}) g"]:
            cluster.sql(statement)
        progress(f"{mode} run; cluster in {cluster.dir}; results to {out}")
        results = {"command": bench_command(args.quick, "fast_path.py"), "mode": mode, **settings}
        results["machine"] = describe_machine(cluster, dbname="postgres")
        results["seconds"] = measure(cluster, n, settings["rounds"])
    finally:
        cluster.destroy()

    results["marginal_ns"] = marginal(results)
    write_results(out, "fast_path", results, markdown(results, mode))


if __name__ == "__main__":
    main()
