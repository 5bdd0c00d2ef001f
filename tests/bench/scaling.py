"""pg_idgen's benchmark, the scaling part: IDs per second as clients are
added, in one run on a throwaway cluster.

  python tests/bench/scaling.py [--quick] [--out DIR]

pgbench runs `SELECT count(f) FROM generate_series(1, 500000)` for SECONDS
at 1 and 2 clients (and 4, 8, ... up to the machine's cores when it has
more than 2: os.cpu_count()), one backend per client, for:

- the floor: the bare `SELECT count(*) FROM generate_series(1, 500000)`,
  which scales with clients as far as the machine lets any query scale;
- `segment_nextval('hot')`, one hot tag with step 100,000;
- `snowflake_nextval()` (its layout caps one server at 4.096 M IDs/s);
- `nextval` on a sequence with CACHE 1 and with CACHE 100;
- pgEdge's `snowflake.nextval()`, when bash tests/bench.sh --pgedge-snowflake
  DIR built it for this run (bench.py's pgedge_snowflake()).

Every (query, client count) runs once per round, in a shuffled order, over
ROUNDS rounds; IDs/s = pgbench's transactions per second × 500,000, the
median over the rounds. The scaling of a query is its IDs/s at k clients
over its IDs/s at 1, read against the floor's scaling in the same run:
issue 39 asks the hot tag for at least 0.85× the floor's from 1 to 2
clients. Whether the backends took blocks of their own (up to 256) while
they contended, and single IDs alone, is seen two ways: `segment_status`'s
block_size, read every BLOCK_SIZE_EVERY seconds while the hot tag runs;
and, after the rounds, in the IDs themselves: k sessions draw runs_n IDs
each at once, and each counts the runs of consecutive IDs it got (a block
is one run; single IDs with another backend's between are runs of 1). The
second does not need a core of its own while the backends run: on a
machine with no more cores than backends, a read of block_size takes a
core from one of them, and the other, alone, goes back to single IDs
within microseconds.

Writes scaling.md, scaling.json and scaling.png (matplotlib) to --out (the
docs' <!-- bench-scaling:start --> block is put in by publish.py, from a
whole run of bash tests/bench.sh --update-docs).
"""

import collections
import os
import random
import shutil
import statistics
import tempfile
import threading
import time

# bench.py puts tests/lib on the path: import it first.
from bench import (PGEDGE_SNOWFLAKE_AFTER, bench_command, describe_machine, header, parse_run_args,
                   pgbench, pgedge_snowflake, pgedge_snowflake_conf, pgedge_snowflake_note,
                   pgedge_snowflake_setup, progress, finish_figure, table_name, with_after, write_results)
from cluster import Cluster

MODES = {
    "full": dict(rounds=3, seconds=4, runs_n=3_000_000),
    "quick": dict(rounds=2, seconds=1, runs_n=1_000_000),
}
# IDs per transaction: long enough that a transaction's own cost (parse,
# plan, round trip) is noise, short enough for many per run.
N = 500_000
DBNAME = "postgres"
HOT_TAG, HOT_STEP = "hot", 100_000
BLOCK_SIZE_EVERY = 0.2      # seconds between two reads of the hot tag's block_size
# The block size a backend takes at most (src/segment/backend_block.rs's
# MAX_BLOCK), for the table's sentence.
MAX_BLOCK = 256
GOAL = 0.85                 # the hot tag's scaling over the floor's, from 1 to 2 clients (issue 39)

FLOOR = "bare `count(*)` (the floor)"
HOT = f"segment_nextval('{HOT_TAG}'), step {HOT_STEP:,}"
SNOWFLAKE = "snowflake_nextval()"
# {label: what count() counts}: the floor counts rows (count(*)).
BASE_QUERIES = {
    FLOOR: "*",
    HOT: f"segment_nextval('{HOT_TAG}')",
    "nextval, CACHE 100": "nextval('seq_cache100')",
    "nextval, CACHE 1": "nextval('seq_cache1')",
    SNOWFLAKE: "snowflake_nextval()",
}
assert PGEDGE_SNOWFLAKE_AFTER == SNOWFLAKE


def queries(pgedge_calls):
    """{label: the pgbench script}: BASE_QUERIES, pgEdge's snowflake after
    snowflake_nextval() when measured."""
    counted = with_after(BASE_QUERIES, PGEDGE_SNOWFLAKE_AFTER, pgedge_calls)
    return {label: f"SELECT count({what}) FROM generate_series(1, {N});" for label, what in counted.items()}


def client_counts(cores):
    """1 and 2 clients, then doubling up to the machine's cores, and the
    core count itself."""
    counts, clients = [1, 2], 4
    while clients <= cores:
        counts.append(clients)
        clients *= 2
    if cores > 2 and cores not in counts:
        counts.append(cores)
    return counts


def hot_counters(conn):
    (waits, refills, size), = conn.execute(
        "SELECT waits, refills, block_size FROM segment_status WHERE database = current_database() AND tag = %s",
        (HOT_TAG,)).fetchall()
    return {"waits": waits, "refills": refills, "block_size": size}


def block_size_reader(conn, samples):
    """pgbench's `during`: appends the hot tag's block_size to samples every
    BLOCK_SIZE_EVERY seconds while the process runs."""
    def during(proc):
        while True:
            time.sleep(BLOCK_SIZE_EVERY)
            if proc.poll() is not None:
                return
            samples.append(hot_counters(conn)["block_size"])
    return during


# The runs of consecutive IDs one session takes, {length: how many runs}:
# the IDs of one run share id - row_number() (gaps and islands). The IDs
# are all drawn before the sort, the window's, begins.
RUNS_QUERY = ("SELECT length, count(*) FROM (SELECT count(*) AS length FROM ("
              "SELECT id - row_number() OVER (ORDER BY id) AS run FROM ("
              f"SELECT segment_nextval('{HOT_TAG}') AS id FROM generate_series(1, {{n}})) ids) numbered "
              "GROUP BY run) runs GROUP BY length")
# Run lengths as the table sorts them: (first, last, what they are).
RUN_BUCKETS = [(1, 1, "runs of 1"), (2, 15, "runs of 2 – 15"), (16, MAX_BLOCK, f"runs of 16 – {MAX_BLOCK}"),
               (MAX_BLOCK + 1, None, f"runs longer than {MAX_BLOCK}")]


def runs_of_ids(cluster, clients, n):
    """{run length: IDs in runs of that length}, over `clients` sessions
    that each draw n IDs of the hot tag at once (untimed)."""
    start = threading.Barrier(clients)
    found, errors = [], []

    def draw():
        try:
            with cluster.connect(DBNAME) as conn:
                conn.execute("SET work_mem = '1GB'")     # the window's sort, in memory
                start.wait()
                found.append(conn.execute(RUNS_QUERY.format(n=n)).fetchall())
        except Exception as e:     # noqa: BLE001 — raised again below, in the caller's thread
            errors.append(e)
            start.abort()

    threads = [threading.Thread(target=draw) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    ids = collections.Counter()
    for rows in found:
        for length, count in rows:
            ids[length] += length * count
    return {str(length): count for length, count in sorted(ids.items())}


def measure(cluster, scripts, counts, rounds, seconds, workdir):
    """{label: {clients: [IDs/s, one per round]}}, {clients: [block_size
    reads of the hot tag's runs at that many clients]}, and the hot tag's
    waits and refills over the measured rounds."""
    ids = {label: {str(c): [] for c in counts} for label in scripts}
    block_sizes = {str(c): [] for c in counts}
    with cluster.connect(DBNAME) as probe:
        # Untimed: every query once in one backend (the hot tag's first
        # range), then the hot tag at the most clients, so that its refill
        # worker has learned the demand before round 1.
        for script in scripts.values():
            probe.execute(script.rstrip(";")).fetchall()
        pgbench(cluster, scripts[HOT], counts[-1], 1, workdir, "warm_up", dbname=DBNAME)
        before = hot_counters(probe)
        for round_no in range(1, rounds + 1):
            runs = [(label, clients) for label in scripts for clients in counts]
            random.shuffle(runs)
            for label, clients in runs:
                during = block_size_reader(probe, block_sizes[str(clients)]) if label == HOT else None
                tps, _ = pgbench(cluster, scripts[label], clients, seconds, workdir,
                                 f"{table_name(label)}_{clients}", dbname=DBNAME, during=during)
                ids[label][str(clients)].append(tps * N)
                progress(f"round {round_no}/{rounds}, {clients} client{'s' if clients > 1 else ''}: {label}: "
                         f"{tps * N / 1e6:.2f} M IDs/s")
        after = hot_counters(probe)
    hot = {key: after[key] - before[key] for key in ("waits", "refills")}
    return ids, block_sizes, hot


# --------------------------------------------------------------------------
# Output

def medians(results):
    """{label: {clients: median IDs/s}}."""
    return {label: {c: statistics.median(v) for c, v in by_clients.items()}
            for label, by_clients in results["ids_per_second"].items()}


def scaling(results):
    """{label: {clients: median IDs/s at clients over the median at 1}},
    clients above 1."""
    return {label: {c: m[c] / m["1"] for c in m if c != "1"} for label, m in medians(results).items()}


def block_size_reads(reads):
    """"median 256, 1 – 256 over 40 reads, 35 above 1"."""
    if not reads:
        return "no read fell within a run"
    above = sum(1 for size in reads if size > 1)
    return (f"median {statistics.median(reads):g}, {min(reads)} – {max(reads)} over {len(reads)} reads, "
            f"{above} above 1")


def run_shares(runs):
    """"12% in runs of 1, ...": the IDs in each of RUN_BUCKETS."""
    total = sum(runs.values())
    shares = []
    for first, last, what in RUN_BUCKETS:
        ids = sum(count for length, count in runs.items()
                  if first <= int(length) and (last is None or int(length) <= last))
        shares.append(f"{ids / total:.0%} in {what}")
    return ", ".join(shares)


def millions(value):
    return f"{value / 1e6:,.1f} M"


def markdown(results, mode):
    counts = [str(c) for c in results["clients"]]
    more = counts[1:]
    med, scale = medians(results), scaling(results)
    floor = scale[FLOOR]
    lines = [
        header(results["machine"], results["command"], mode),
        "",
        f"**IDs per second as clients are added** (`tests/bench/scaling.py`): pgbench running `SELECT count(f) "
        f"FROM generate_series(1, {N:,})` (the floor: `count(*)`), one backend per client, {results['seconds']} s "
        f"per run; every query and client count once per round in a shuffled order, the median of "
        f"{results['rounds']} rounds (min – max); IDs/s = transactions per second × {N:,}. k ÷ 1: the median at "
        "k clients over the median at 1; × the floor's: that over the floor's own.",
        "",
        "| query | " + " | ".join(f"IDs/s, {c} client{'s' if c != '1' else ''}" for c in counts) + " | "
        + " | ".join(f"{c} ÷ 1 | × the floor's" for c in more) + " |",
        "|---|" + "---:|" * (len(counts) + 2 * len(more)),
    ]
    for label, by_clients in results["ids_per_second"].items():
        cells = [f"{millions(med[label][c])} ({min(v) / 1e6:,.1f} – {max(v) / 1e6:,.1f})"
                 for c, v in by_clients.items()]
        for c in more:
            cells += [f"{scale[label][c]:.2f}×", f"{scale[label][c] / floor[c]:.2f}×"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    hot, relative = scale[HOT]["2"], scale[HOT]["2"] / floor["2"]
    lines += [
        "",
        f"From 1 to 2 clients the hot tag scales {hot:.2f}×, the floor {floor['2']:.2f}×: "
        f"{relative:.2f}× the floor's scaling (the goal: at least {GOAL:.2f}×, "
        + ("met" if relative >= GOAL else "not met") + " in this run).",
        "",
        f"`segment_status.block_size` of the hot tag, read every {BLOCK_SIZE_EVERY} s while it ran "
        f"(1: single IDs, as a backend drawing alone takes them; up to {MAX_BLOCK} while backends contend; "
        "the size some backend took last, so a read can show a backend that has just stopped): "
        + "; ".join(f"{c} client{'s' if c != '1' else ''}, {block_size_reads(results['block_sizes'][c])}"
                    for c in counts[1:] + counts[:1])
        + ". On a machine with no more cores than backends a read takes a core from one of them, and the "
        "other, alone, goes back to single IDs within microseconds: what they took together shows in the "
        "IDs themselves.",
        "",
        f"The IDs each session got, as runs of consecutive IDs, when sessions each drew "
        f"{results['runs_n']:,} IDs of the hot tag at once after the rounds (untimed; a block is one run, "
        "single IDs with another backend's between are runs of 1, a run longer than a block is a backend "
        "that drew alone meanwhile): "
        + "; ".join(f"{c} sessions, {run_shares(results['runs'][c])}" for c in counts[1:])
        + f". Calls that waited for a refill of the hot tag over the measured runs: "
        f"{results['hot_tag']['waits']} ({results['hot_tag']['refills']} ranges published).",
    ]
    load = results["load_average"]
    lines += [
        "",
        f"`snowflake_nextval()` gives at most 4.096 M IDs/s per server (its layout: 4,096 per ms), at any number "
        "of clients. Load average (1 min) of the machine at the start and the end of this part: "
        f"{load['start']:.2f} and {load['end']:.2f}, on {results['machine']['cores']} cores: the runs share "
        "the machine with whatever else ran, every query alike.",
    ]
    if results.get("pgedge_snowflake"):
        lines += ["", pgedge_snowflake_note(results["pgedge_snowflake"])]
    return "\n".join(lines) + "\n"


def plot(results, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = results["clients"]
    med, scale = medians(results), scaling(results)
    top = str(counts[-1])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    for label in med:
        left.plot(counts, [med[label][str(c)] / 1e6 for c in counts], marker="o", label=label,
                  linestyle="--" if label == FLOOR else "-")
    left.set_xticks(counts, [str(c) for c in counts])
    left.set_xlabel("pgbench clients (one backend each)")
    left.set_ylabel("million IDs per second")
    left.set_ylim(bottom=0)
    left.set_title("IDs per second by clients")
    left.grid(alpha=0.3)
    left.legend(fontsize=7)

    labels = list(scale)
    bars = right.barh(range(len(labels)), [scale[label][top] for label in labels], color="tab:blue", alpha=0.8)
    right.bar_label(bars, fmt="%.2f×", fontsize=7, padding=2)
    right.set_xlim(0, max(max(scale[label][top] for label in labels), 1.0) * 1.2)
    right.axvline(scale[FLOOR][top], color="gray", linestyle="--", label="the floor's")
    if top == "2":
        right.axvline(GOAL * scale[FLOOR]["2"], color="tab:red", linestyle=":",
                      label=f"{GOAL}× the floor's (the goal)")
    right.set_yticks(range(len(labels)), labels, fontsize=7)
    right.invert_yaxis()
    right.set_xlabel(f"IDs/s at {top} clients ÷ IDs/s at 1")
    right.set_title(f"Scaling, 1 → {top} clients")
    right.grid(alpha=0.3, axis="x")
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    finish_figure(plt, fig, results["machine"], out, "scaling.png")


def main():
    args, mode, out = parse_run_args(__doc__, "a smoke run: two rounds of 1 s runs", "pg_idgen-bench-scaling.")
    settings = MODES[mode]
    random.seed(20261207)
    counts = client_counts(os.cpu_count() or 1)
    pgedge = pgedge_snowflake()
    cluster = Cluster(conf=["synchronous_commit = off", f"max_connections = {max(60, counts[-1] + 20)}",
                            # One plan, one process per query: what is measured is the calls.
                            "max_parallel_workers_per_gather = 0", "jit = off",
                            *pgedge_snowflake_conf(pgedge)], name="pg_idgen-bench-scaling.")
    workdir = tempfile.mkdtemp(prefix="pg_idgen-bench-scaling-work.")
    os.chmod(workdir, 0o777)
    results = {"command": bench_command(args.quick, "scaling.py"), "mode": mode, **settings, "n": N,
               "clients": counts, "hot_step": HOT_STEP, "pgedge_snowflake": pgedge,
               "load_average": {"start": os.getloadavg()[0]}}
    try:
        cluster.start()
        for statement in ["CREATE EXTENSION pg_idgen", f"SELECT segment_create('{HOT_TAG}', step => {HOT_STEP})",
                          "CREATE SEQUENCE seq_cache1", "CREATE SEQUENCE seq_cache100 CACHE 100"]:
            cluster.sql(statement, dbname=DBNAME)
        scripts = queries(pgedge_snowflake_setup(cluster, pgedge, dbname=DBNAME))
        progress(f"{mode} run at {', '.join(map(str, counts))} clients; cluster in {cluster.dir}; results to {out}")
        results["machine"] = describe_machine(cluster, dbname=DBNAME)
        results["ids_per_second"], results["block_sizes"], results["hot_tag"] = measure(
            cluster, scripts, counts, settings["rounds"], settings["seconds"], workdir)
        results["runs"] = {}
        for clients in counts[1:]:
            results["runs"][str(clients)] = runs_of_ids(cluster, clients, settings["runs_n"])
            progress(f"runs of consecutive IDs, {clients} sessions at once: "
                     + run_shares(results["runs"][str(clients)]))
        results["load_average"]["end"] = os.getloadavg()[0]
    finally:
        cluster.destroy()
        shutil.rmtree(workdir, ignore_errors=True)

    results["scaling"] = scaling(results)
    write_results(out, "scaling", results, markdown(results, mode), plots=lambda: plot(results, out),
                  plot_names="scaling.png")


if __name__ == "__main__":
    main()
