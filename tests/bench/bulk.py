"""pg_idgen's benchmark, part three: bulk loads, and IDs from a client.

  python tests/bench/bulk.py [--quick] [--out DIR]

1. Bulk loads: ROWS rows into `t (id <key>, payload text)`, by one
   `INSERT INTO t (payload) SELECT ... FROM generate_series(1, ROWS)` and by
   one `COPY t (payload) FROM STDIN`, for each key: `DEFAULT
   segment_nextval('bulk')` (step 1,000), `DEFAULT snowflake_nextval()`,
   bigserial, identity, `DEFAULT gen_random_uuid()` (UUIDv4) and, where
   the server has it (PostgreSQL 18 and later), `DEFAULT uuidv7()`, and
   pgEdge's snowflake (`DEFAULT snowflake.nextval()`) when bash
   tests/bench.sh --pgedge-snowflake DIR built it for this run. Each load
   runs into a table just truncated and checkpointed; time per row is the whole
   statement's, commit included, divided by ROWS, and each key is compared
   with bigserial's time in the same run.
2. From a client: IDs per second that one psycopg connection over the Unix
   socket gets with one `SELECT segment_nextval(tag)` per round trip, with
   `SELECT segment_nextval(tag, 1000)` (1,000 rows per round trip), and
   through examples/id_pool.py (`segment_reserve(tag, 10000)` on the pool's
   connection, the IDs handed out in the process by `next_id()`); one
   `SELECT nextval(seq)` per round trip as a reference.

Every competitor runs once per round, in a shuffled order, and the tables
give the median over the rounds (and the spread), so a noisy machine hits
all alike. Writes bulk.md, bulk.json and bulk.png to --out (the docs'
<!-- bench-bulk:start --> block is put in by publish.py, from a whole run of
bash tests/bench.sh --update-docs).
"""

import os
import random
import statistics
import sys
import time

# bench.py puts tests/lib on the path: import it first.
from bench import (PGEDGE_SNOWFLAKE_AFTER, REPO, bench_command, describe_machine, header, parse_run_args,
                   pgedge_snowflake, pgedge_snowflake_conf, pgedge_snowflake_note, pgedge_snowflake_setup,
                   progress, finish_figure, uuid_generators, with_after, write_results)
from cluster import Cluster

sys.path.insert(0, os.path.join(REPO, "examples"))
from id_pool import IdPool  # noqa: E402


MODES = {
    "full": dict(rows=1_000_000, bulk_rounds=5, client_rounds=3,
                 round_trips=50_000, batch_ids=2_000_000, pool_ids=3_000_000),
    "quick": dict(rows=100_000, bulk_rounds=2, client_rounds=2,
                  round_trips=5_000, batch_ids=200_000, pool_ids=300_000),
}

BASE_KEYS = {
    "segment_nextval (step 1,000)": "bigint PRIMARY KEY DEFAULT segment_nextval('bulk')",
    "snowflake_nextval()": "bigint PRIMARY KEY DEFAULT snowflake_nextval()",
    "bigserial": "bigserial PRIMARY KEY",
    "identity": "bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
}
BASELINE = "bigserial"
METHODS = ["INSERT ... SELECT", "COPY FROM STDIN"]
PAYLOAD = "order-0123456789abcdef"
COPY_CHUNK = 10_000      # rows per write to the COPY stream

ONE = "one segment_nextval(tag) per round trip"
BATCH = "segment_nextval(tag, 1000) per round trip"
POOL = "segment_reserve(tag, 10000) through examples/id_pool.py"
SEQ = "one nextval(seq) per round trip (reference)"
CLIENT_METHODS = [ONE, BATCH, POOL, SEQ]


def keys(uuids, pgedge=None):
    """{label: the id column}: the integer keys (pgEdge's snowflake after
    snowflake_nextval(), when measured: bench.pgedge_snowflake_setup) and
    the UUIDs this server has (bench.uuid_generators)."""
    integers = with_after(BASE_KEYS, PGEDGE_SNOWFLAKE_AFTER,
                          {label: f"bigint PRIMARY KEY DEFAULT {call}" for label, call in (pgedge or {}).items()})
    return {**integers, **{label: f"uuid PRIMARY KEY DEFAULT {call}" for label, call in uuids.items()}}


def bulk_cells(bulk_ns, label, method="INSERT ... SELECT"):
    """A key's median ns per row and its ratio to bigserial's, as the table
    prints them (publish.py's summary prints the same cells)."""
    median = statistics.median(bulk_ns[label][method])
    return f"{median:,.0f}", f"{median / statistics.median(bulk_ns[BASELINE][method]):.2f}×"


def table_name(label):
    return "bulk_" + "".join(c if c.isalnum() else "_" for c in label.lower()).strip("_")


def load(cluster, label, method, rows):
    """Seconds for one load of `rows` rows into the key's table, just
    truncated and checkpointed."""
    table = table_name(label)
    with cluster.connect("bench") as conn:
        conn.execute(f"TRUNCATE {table}")
        conn.execute("CHECKPOINT")
        if method == "INSERT ... SELECT":
            started = time.perf_counter()
            conn.execute(f"INSERT INTO {table} (payload) SELECT %s FROM generate_series(1, {rows})", (PAYLOAD,))
        else:
            chunk = (PAYLOAD + "\n").encode() * COPY_CHUNK
            started = time.perf_counter()
            with conn.cursor().copy(f"COPY {table} (payload) FROM STDIN") as copy:
                left = rows
                while left:
                    take = min(left, COPY_CHUNK)
                    copy.write(chunk if take == COPY_CHUNK else chunk[:take * (len(PAYLOAD) + 1)])
                    left -= take
        seconds = time.perf_counter() - started
        (count,), = conn.execute(f"SELECT count(*) FROM {table}").fetchall()
        if count != rows:
            raise SystemExit(f"{label}, {method}: {count} rows loaded, not {rows}")
    return seconds


def bulk_loads(cluster, labels, rows, rounds):
    """ns per row: {label: {method: [one figure per round]}}."""
    ns = {label: {method: [] for method in METHODS} for label in labels}
    for round_no in range(1, rounds + 1):
        work = [(label, method) for label in labels for method in METHODS]
        random.shuffle(work)
        for label, method in work:
            per_row = load(cluster, label, method, rows) / rows * 1e9
            ns[label][method].append(per_row)
            progress(f"bulk round {round_no}/{rounds}: {label}, {method}: {per_row:.0f} ns per row")
    return ns


def client_rate(cluster, method, settings):
    """IDs per second one connection gets by `method`."""
    if method == POOL:
        with IdPool(lambda: cluster.connect("bench"), "client_pool", block_size=10_000) as pool:
            count = settings["pool_ids"]
            next_id = pool.next_id
            first = next_id()
            started = time.perf_counter()
            for _ in range(count):
                last = next_id()
            seconds = time.perf_counter() - started
        if last <= first:
            raise SystemExit(f"the pool went backwards: {last} after {first}")
        return count / seconds
    with cluster.connect("bench") as conn:
        query, calls = {
            ONE: ("SELECT segment_nextval('client_one')", settings["round_trips"]),
            BATCH: ("SELECT segment_nextval('client_batch', 1000)", settings["batch_ids"] // 1000),
            SEQ: ("SELECT nextval('client_seq')", settings["round_trips"]),
        }[method]
        for _ in range(10):     # past psycopg's prepare threshold before the clock starts
            conn.execute(query).fetchall()
        ids = 0
        started = time.perf_counter()
        for _ in range(calls):
            ids += len(conn.execute(query).fetchall())
        seconds = time.perf_counter() - started
    return ids / seconds


def client_rates(cluster, settings):
    rates = {method: [] for method in CLIENT_METHODS}
    rounds = settings["client_rounds"]
    for round_no in range(1, rounds + 1):
        order = list(CLIENT_METHODS)
        random.shuffle(order)
        for method in order:
            rate = client_rate(cluster, method, settings)
            rates[method].append(rate)
            progress(f"client round {round_no}/{rounds}: {method}: {rate:,.0f} IDs/s")
    return rates


# --------------------------------------------------------------------------
# Output

def summary(results):
    bulk = {label: {method: statistics.median(v) for method, v in by.items()}
            for label, by in results["bulk_ns"].items()}
    client = {method: statistics.median(v) for method, v in results["client_ids_per_second"].items()}
    return bulk, client


def markdown(results, mode):
    bulk, client = summary(results)
    lines = [
        header(results["machine"], results["command"], mode),
        "",
        f"**Bulk loads** (`tests/bench/bulk.py`): {results['rows']:,} rows in one statement into "
        "`t (id <key>, payload text)`, the table truncated and checkpointed before each load; time per "
        f"row, commit included, median of {results['bulk_rounds']} interleaved rounds (spread: min – max); "
        "× bigserial is the key's time over bigserial's (below 1: faster).",
        "",
        "| key | INSERT ... SELECT, ns per row | spread | × bigserial | COPY FROM STDIN, ns per row | spread "
        "| × bigserial |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label in results["bulk_ns"]:
        cells = []
        for method in METHODS:
            v = results["bulk_ns"][label][method]
            median, ratio = bulk_cells(results["bulk_ns"], label, method)
            cells += [median, f"{min(v):,.0f} – {max(v):,.0f}", ratio]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if results.get("pgedge_snowflake"):
        lines += ["", pgedge_snowflake_note(results["pgedge_snowflake"])]
    lines += [
        "",
        f"**IDs from a client** (one psycopg connection over the Unix socket, median of "
        f"{results['client_rounds']} interleaved rounds; {results['round_trips']:,} single-ID round trips, "
        f"{results['batch_ids']:,} IDs in batches of 1,000, {results['pool_ids']:,} IDs from the pool, whose "
        "next reservation is fetched by its background thread at 80% of the current one):",
        "",
        "| method | IDs per second | spread | × one per round trip |",
        "|---|---:|---:|---:|",
    ]
    for method in CLIENT_METHODS:
        v = results["client_ids_per_second"][method]
        lines.append(f"| {method} | {client[method]:,.0f} | {min(v):,.0f} – {max(v):,.0f} "
                     f"| {client[method] / client[ONE]:,.1f}× |")
    lines += [
        "",
        "The pool's rate is Python's: `next_id()` takes a lock and increments a counter, with one "
        "round trip per 10,000 IDs made by another thread; the two round-trip methods are bound by the "
        "round trip and, for the batch, by reading 1,000 rows.",
    ]
    return "\n".join(lines) + "\n"


def plot(results, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bulk, client = summary(results)
    labels = list(results["bulk_ns"])
    # About 1.3 inches per key, so that their names (7 with uuidv7() and
    # pgEdge's snowflake) do not run into each other.
    left_width = 1.3 * len(labels)
    fig, (left, right) = plt.subplots(1, 2, figsize=(left_width + 5.2, 4.8),
                                      gridspec_kw={"width_ratios": [left_width, 4.8]})
    width = 0.38
    for i, method in enumerate(METHODS):
        xs = [j + (i - 0.5) * width for j in range(len(labels))]
        bars = left.bar(xs, [bulk[label][method] for label in labels], width=width, label=method)
        left.bar_label(bars, fmt="%.0f", fontsize=7)
    left.set_xticks(range(len(labels)), [label.replace(" (", "\n(") for label in labels], fontsize=7)
    left.set_ylabel("ns per row (median)")
    left.set_title(f"Bulk load of {results['rows']:,} rows by key")
    left.grid(alpha=0.3, axis="y")
    left.legend(fontsize=8)

    short = {ONE: "segment_nextval\nper round trip", BATCH: "segment_nextval\n(tag, 1000)",
             POOL: "id_pool.py\n(segment_reserve\n10,000)", SEQ: "nextval\nper round trip"}
    bars = right.bar(range(len(CLIENT_METHODS)), [client[m] for m in CLIENT_METHODS],
                     color=["C2", "C2", "C2", "C7"])
    right.bar_label(bars, labels=[f"{client[m]:,.0f}" for m in CLIENT_METHODS], fontsize=7)
    right.set_xticks(range(len(CLIENT_METHODS)), [short[m] for m in CLIENT_METHODS], fontsize=8)
    right.set_yscale("log")
    right.set_ylabel("IDs per second, one connection (log scale)")
    right.set_title("IDs from a client")
    right.grid(alpha=0.3, axis="y")
    finish_figure(plt, fig, results["machine"], out, "bulk.png")


def main():
    args, mode, out = parse_run_args(__doc__, "a smoke run: fewer rows and IDs", "pg_idgen-bench-bulk.")
    settings = MODES[mode]
    random.seed(20261201)

    pgedge = pgedge_snowflake()
    cluster = Cluster(conf=["shared_buffers = '512MB'", "max_wal_size = '8GB'", "checkpoint_timeout = '30min'",
                            *pgedge_snowflake_conf(pgedge)],
                      name="pg_idgen-bench-bulk.")
    try:
        cluster.start()
        # pg_idgen.snowflake_database: where the snowflake mark is WAL-logged.
        cluster.sql("CREATE EXTENSION pg_idgen")
        cluster.sql("CREATE DATABASE bench")
        uuids = uuid_generators(cluster)
        key_columns = keys(uuids, pgedge_snowflake_setup(cluster, pgedge))
        setup = ["CREATE EXTENSION pg_idgen", "CREATE SEQUENCE client_seq"]
        for tag in ("bulk", "client_one", "client_batch", "client_pool"):
            setup.append(f"SELECT segment_create('{tag}', step => 1000)")
        for label, column in key_columns.items():
            setup.append(f"CREATE TABLE {table_name(label)} (id {column}, payload text NOT NULL)")
        for statement in setup:
            cluster.sql(statement, dbname="bench")
        progress(f"{mode} run; cluster in {cluster.dir}; results to {out}")
        results = {"command": bench_command(args.quick, "bulk.py"), "mode": mode, **settings, "uuids": uuids,
                   "pgedge_snowflake": pgedge}
        results["machine"] = describe_machine(cluster)
        results["bulk_ns"] = bulk_loads(cluster, list(key_columns), settings["rows"], settings["bulk_rounds"])
        results["client_ids_per_second"] = client_rates(cluster, settings)
    finally:
        cluster.destroy()

    write_results(out, "bulk", results, markdown(results, mode), plots=lambda: plot(results, out),
                  plot_names="bulk.png")


if __name__ == "__main__":
    main()
