"""pg_idgen's benchmark, the Citus part: IDs on a Citus cluster.

  python tests/bench/citus.py [--quick] [--out DIR]

A coordinator and WORKERS workers on 127.0.0.1 (tests/lib/citus_cluster.py),
each a throwaway cluster with default settings but for the Citus set-up
docs/citus.md asks for (`shared_preload_libraries = 'citus,pg_idgen'`,
`pg_idgen.machine_id = 'citus'`), all on this machine. Competitors are
measured in the same run, interleaved, as ratios and marginal costs:

1. Per ID on a worker: bench.py's marginal cost (the time of
   `SELECT count(f()) FROM generate_series(1, N)` minus the bare query's,
   over N), in one session on worker 1, of `segment_nextval` of a tag of
   the coordinator (the worker's refill worker takes its ranges from the
   coordinator ahead of need, docs/citus.md), of a tag of the worker's own
   of the same step (`segment_create(..., force => true)` on the worker)
   and of `snowflake_nextval()` (the worker's Citus group as machine id);
   the calls that waited for a refill come from segment_status.
2. INSERT throughput: pgbench at CLIENTS clients, one row per INSERT with
   a random customer_id, into three distributed tables keyed by
   (customer_id, id) and distributed by customer_id: `id DEFAULT
   segment_nextval('orders')`, `DEFAULT snowflake_nextval()` and Citus's
   own `bigserial` (each node group draws from a slice of its own, g * 2^48
   upwards); through the coordinator and directly on worker 1, every
   (route, key) once per round in a shuffled order, the median TPS and its
   ratio to bigserial's on the same route; and the length in digits of the
   IDs each run gave.

Citus 14 supports PostgreSQL 16 to 18, and tests/setup.sh builds it into
those trees only: on PostgreSQL 15 this part measures nothing, and its
table says so (under the run's header, so that the docs still hold one
whole run).

Writes citus.md and citus.json to --out (the docs' <!-- bench-citus:start
--> block is put in by publish.py, from a whole run of bash tests/bench.sh
--update-docs).
"""

import random
import shutil
import statistics
import tempfile

# bench.py puts tests/lib on the path: import it first.
from bench import (bench_command, describe_machine, header, marginal_costs, parse_run_args, percentiles,
                   pgbench, progress, spread, table_name, write_results)
from citus_cluster import CitusCluster, citus_available
from cluster import PG_BIN, Cluster

MODES = {
    "full": dict(n=5_000_000, rounds=5, insert_rounds=3, insert_seconds=5),
    "quick": dict(n=300_000, rounds=2, insert_rounds=1, insert_seconds=2),
}
WORKERS = 2
# The one setting of the benchmark's own, on every node: docs/citus.md's.
NODE_CONF = ("pg_idgen.machine_id = 'citus'",)
DBNAME = "postgres"     # where CitusCluster creates Citus and pg_idgen
STEP = 1000
CITUS_MAJORS = (16, 17, 18)

# 1. Per ID on a worker: (label, expression, share of N) as bench.py's
# marginal_costs takes them.
COORDINATOR_TAG = "segment_nextval('coordinator_tag'), the coordinator's tag"
LOCAL_TAG = "segment_nextval('local_tag'), a tag of the worker's own (force => true)"
SNOWFLAKE = "snowflake_nextval(), machine id: the worker's Citus group"
PER_ID = [
    (COORDINATOR_TAG, "segment_nextval('coordinator_tag')", 1.0),
    (LOCAL_TAG, "segment_nextval('local_tag')", 1.0),
    (SNOWFLAKE, "snowflake_nextval()", 1.0),
]
TAGS = {COORDINATOR_TAG: "coordinator_tag", LOCAL_TAG: "local_tag"}

# 2. INSERT throughput: {label: the id column}.
KEYS = {
    "segment_nextval('orders')": "bigint NOT NULL DEFAULT segment_nextval('orders')",
    "snowflake_nextval()": "bigint NOT NULL DEFAULT snowflake_nextval()",
    "bigserial": "bigserial",
}
BASELINE = "bigserial"
CLIENTS = 8
CUSTOMERS = 1_000_000
COORDINATOR, WORKER = "via the coordinator", "on worker 1"
ROUTE_FILES = {COORDINATOR: "coordinator", WORKER: "worker"}     # pgbench's script and log names


def insert_script(table):
    return (f"\\set customer random(1, {CUSTOMERS})\n"
            f"INSERT INTO {table} (customer_id, payload) VALUES (:customer, 'order-0123456789abcdef');")


# --------------------------------------------------------------------------
# Set-up

def setup(cluster):
    """The tags and tables, and checks that the cluster is what the table
    will say it is: the worker draws the coordinator's tag from the
    coordinator, its own tag from its own id_segment, and snowflake IDs
    under its Citus group."""
    c, worker = cluster.coordinator, cluster.workers[0]
    c.sql(f"SELECT segment_create('coordinator_tag', step => {STEP})")
    c.sql(f"SELECT segment_create('orders', step => {STEP})")
    worker.sql(f"SELECT segment_create('local_tag', step => {STEP}, force => true)")
    for label, column in KEYS.items():
        table = table_name(label)
        c.sql(f"CREATE TABLE {table} (customer_id int NOT NULL, id {column}, payload text NOT NULL, "
              "PRIMARY KEY (customer_id, id))")
        c.sql(f"SELECT create_distributed_table('{table}', 'customer_id')")
    # Each tag's first range, and the snowflake keeper's group, before
    # anything is timed (marginal_costs takes the first range again).
    for expr in ("segment_nextval('coordinator_tag')", "segment_nextval('local_tag')", "snowflake_nextval()"):
        worker.sql(f"SELECT {expr}")
    sources = dict(worker.sql("SELECT tag, source FROM segment_status WHERE database = current_database() "
                              "AND tag IN ('coordinator_tag', 'local_tag')"))
    if sources != {"coordinator_tag": "citus coordinator", "local_tag": "local"}:
        raise SystemExit(f"citus.py: worker 1's tags come from {sources}, not the coordinator and the worker")
    (machine,), = worker.sql("SELECT machine_id FROM snowflake_status WHERE generator = 'default'")
    group = cluster.group_of(worker)
    if machine != group:
        raise SystemExit(f"citus.py: worker 1's snowflake machine id is {machine}, not its Citus group {group}")
    (shards,), = c.sql("SELECT current_setting('citus.shard_count')::int")
    (citus_version,), = c.sql("SELECT extversion FROM pg_extension WHERE extname = 'citus'")
    return {"worker_group": group, "shard_count": shards, "citus_version": citus_version}


def segment_counters(worker):
    return {tag: {"waits": w, "refills": r} for tag, w, r in worker.sql(
        "SELECT tag, waits, refills FROM segment_status WHERE database = current_database() "
        "AND tag IN ('coordinator_tag', 'local_tag')")}


# --------------------------------------------------------------------------
# 1. Per ID on a worker

def per_id(cluster, n, rounds):
    """bench.py's marginal costs on worker 1, after a warm-up draw of N from
    each tag (its refill worker learns the demand; not counted), and the
    calls that waited for a refill in the measured rounds."""
    worker = cluster.workers[0]
    with worker.connect(DBNAME) as conn:
        for tag in TAGS.values():
            conn.execute(f"SELECT count(segment_nextval('{tag}')) FROM generate_series(1, {n})").fetchall()
    before = segment_counters(worker)
    costs, bare_ns, _ = marginal_costs(worker, PER_ID, n, rounds, dbname=DBNAME, setof=False)
    after = segment_counters(worker)
    counters = {label: {key: after[tag][key] - before[tag][key] for key in ("waits", "refills")}
                for label, tag in TAGS.items()}
    return costs, bare_ns, counters


# --------------------------------------------------------------------------
# 2. INSERT throughput

def inserts(cluster, rounds, seconds, workdir):
    """{route: {key: [{"tps", "latency_ms", "rows", "min_id", "max_id"}, one
    per round]}}. Each run starts on an emptied table, checkpointed on
    every node; its rows are counted and its IDs' range read through the
    coordinator."""
    routes = {COORDINATOR: cluster.coordinator, WORKER: cluster.workers[0]}
    results = {route: {label: [] for label in KEYS} for route in routes}
    c = cluster.coordinator
    for round_no in range(1, rounds + 1):
        runs = [(route, label) for route in routes for label in KEYS]
        random.shuffle(runs)
        for route, label in runs:
            table = table_name(label)
            c.sql(f"TRUNCATE {table}")
            for node in cluster.nodes:
                node.sql("CHECKPOINT")
            tps, latencies = pgbench(routes[route], insert_script(table), CLIENTS, seconds, workdir,
                                     f"{table}_{ROUTE_FILES[route]}", dbname=DBNAME)
            (rows, low, high), = c.sql(f"SELECT count(*), min(id), max(id) FROM {table}")
            results[route][label].append({"tps": tps, "latency_ms": percentiles(latencies), "rows": rows,
                                          "min_id": low, "max_id": high})
            progress(f"INSERT round {round_no}/{rounds}, {route}: {label}: {tps:,.0f} TPS, "
                     f"IDs {low} – {high}")
    return results


# --------------------------------------------------------------------------
# Output

def digits(runs):
    """The length in digits of the IDs of the last run, shortest – longest."""
    low, high = (len(str(abs(runs[-1][key]))) for key in ("min_id", "max_id"))
    return str(low) if low == high else f"{low} – {high}"


def markdown(results, mode):
    lines = [header(results["machine"], results["command"], mode), ""]
    if not results["measured"]:
        lines.append(f"**Citus** (`tests/bench/citus.py`): not measured in this run — {results['not_measured']}.")
        return "\n".join(lines) + "\n"
    costs, counters = results["marginal_ns"], results["segment_counters"]
    bare = statistics.median(results["bare_ns"])
    lines += [
        f"**Per ID on a Citus worker** (`tests/bench/citus.py`, Citus {results['citus_version']}): a "
        f"coordinator and {results['workers']} workers on this machine, each a cluster with default settings "
        "but `shared_preload_libraries = 'citus,pg_idgen'` and `pg_idgen.machine_id = 'citus'`; in one "
        f"session on worker 1, the marginal cost per ID over the bare query, N = {results['n']:,}, "
        f"{results['rounds']} interleaved rounds after a draw of N from each tag (not counted); bare query "
        f"{bare:.0f} ns per row. Both tags have step {STEP:,}.",
        "",
        "| on worker 1 | ns per ID (median) | spread (min – max) | calls that waited for a refill | "
        "ranges taken |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, values in costs.items():
        c = counters.get(label)
        waits, refills = (c["waits"], c["refills"]) if c else ("—", "—")
        lines.append(f"| {label} | {statistics.median(values):.1f} | {spread(values)} | {waits} | {refills} |")
    remote, local = (statistics.median(costs[k]) for k in (COORDINATOR_TAG, LOCAL_TAG))
    lines += [
        "",
        f"The coordinator's tag costs {remote:.1f} ns per ID on the worker against {local:.1f} ns for the "
        f"worker's own tag of the same step, in the same run: {remote - local:+.1f} ns, a ratio of "
        + (f"{remote / local:.2f}×" if local > 0 and remote > 0
           else "— (a median at or below zero: the noise is larger than the cost)")
        + f" on the marginal cost ({(bare + remote) / (bare + local):.2f}× on the whole call with the bare "
        "query). A call never leaves the worker: the coordinator's ranges are taken ahead by the worker's "
        "refill worker (ranges taken: `segment_status.refills` over the measured rounds).",
        "",
        f"**INSERT throughput on Citus** (pgbench, {CLIENTS} clients, `INSERT INTO t (customer_id, payload) "
        f"VALUES (<random 1 – {CUSTOMERS:,}>, ...)` into `t (customer_id int, id <key>, payload text, "
        "PRIMARY KEY (customer_id, id))`, distributed by customer_id in "
        f"{results['shard_count']} shards; {results['insert_seconds']} s per run, "
        f"{results['insert_rounds']} interleaved round{'s' if results['insert_rounds'] > 1 else ''}, "
        "`synchronous_commit = on`, the default):",
        "",
        f"| key | TPS {COORDINATOR} (median) | spread | vs bigserial | TPS {WORKER} (median) | spread "
        f"| vs bigserial | digits of the IDs, {COORDINATOR} | digits, {WORKER} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    runs = results["insert"]
    for label in KEYS:
        cells = []
        for route in (COORDINATOR, WORKER):
            tps = [r["tps"] for r in runs[route][label]]
            base = statistics.median(r["tps"] for r in runs[route][BASELINE])
            cells += [f"{statistics.median(tps):,.0f}", f"{min(tps):,.0f} – {max(tps):,.0f}",
                      f"{statistics.median(tps) / base:.2f}×"]
        cells += [digits(runs[COORDINATOR][label]), digits(runs[WORKER][label])]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    group = results["worker_group"]
    lines += [
        "",
        "Through the coordinator, Citus evaluates the default there and sends the row to its shard's "
        "worker; on a worker, the worker evaluates it and sends a row whose shard is on the other worker "
        "there. Digits: of the IDs of each route's last run (shortest – longest), read through the "
        f"coordinator. Citus's bigserial gives worker 1 (group {group}) IDs from {group} · 2^48 "
        f"({group * 2**48:,}) upwards; `segment_nextval('orders')` draws every node's IDs from the "
        "coordinator's one sequence; snowflake IDs carry the time and the node's group.",
    ]
    return "\n".join(lines) + "\n"


def not_measured(results):
    """PostgreSQL 15: no Citus to measure. The run's header still needs the
    server's version, so a plain throwaway cluster (without pg_idgen: it
    only answers version()) is started for it."""
    node = Cluster(preload=False, name="pg_idgen-bench-citus.")
    try:
        node.start()
        results["machine"] = describe_machine(node, dbname=DBNAME)
    finally:
        node.destroy()
    major = results["machine"]["postgres_major"]
    if major in CITUS_MAJORS:
        raise SystemExit(f"citus.py: Citus is not built into {PG_BIN} (PostgreSQL {major}): tests/setup.sh "
                         "builds it into PostgreSQL 16 to 18")
    results["not_measured"] = (f"this run was on PostgreSQL {major}, and Citus 14 supports PostgreSQL 16 to 18 "
                               "only (`tests/setup.sh` builds it into those): `bash tests/bench.sh --pg 16`, "
                               "`17` or `18` measures it")
    progress(f"Citus: not measured — {results['not_measured']}")


def main():
    args, mode, out = parse_run_args(__doc__, "a smoke run: small N, one short INSERT round",
                                     "pg_idgen-bench-citus.")
    settings = MODES[mode]
    random.seed(20261206)
    results = {"command": bench_command(args.quick, "citus.py"), "mode": mode, **settings,
               "workers": WORKERS, "clients": CLIENTS, "step": STEP, "measured": citus_available()}
    if not results["measured"]:
        not_measured(results)
        write_results(out, "citus", results, markdown(results, mode))
        return

    made = []

    def make(**kwargs):
        node = Cluster(name="pg_idgen-bench-citus.", **kwargs)
        made.append(node)
        return node

    workdir = tempfile.mkdtemp(prefix="pg_idgen-bench-citus-work.")
    try:
        cluster = CitusCluster(make, workers=WORKERS, conf=NODE_CONF)
        results.update(setup(cluster))
        progress(f"{mode} run; coordinator in {cluster.coordinator.dir}, workers in "
                 + ", ".join(w.dir for w in cluster.workers))
        results["machine"] = describe_machine(cluster.coordinator, dbname=DBNAME)
        costs, bare_ns, counters = per_id(cluster, settings["n"], settings["rounds"])
        results.update(marginal_ns=costs, bare_ns=bare_ns, segment_counters=counters)
        results["insert"] = inserts(cluster, settings["insert_rounds"], settings["insert_seconds"], workdir)
    finally:
        for node in made:
            node.destroy()
        shutil.rmtree(workdir, ignore_errors=True)

    write_results(out, "citus", results, markdown(results, mode))


if __name__ == "__main__":
    main()
