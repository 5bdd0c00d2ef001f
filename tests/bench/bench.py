"""pg_idgen's benchmark: every competitor measured in the same run, on a
throwaway cluster, interleaved, reported as ratios and marginal costs.

  python tests/bench/bench.py [--quick] [--out DIR]

1. Marginal cost per ID inside one backend: time of
   `SELECT count(f()) FROM generate_series(1, N)` minus the bare
   `SELECT count(*) FROM generate_series(1, N)`, divided by N, over several
   interleaved rounds (median and spread). One tag is attached to a second
   throwaway cluster (the central server, through postgres_fdw) and
   measured beside the local tag of the same step: the fast path with
   either source of ranges. UUIDs: UUIDv4 (`gen_random_uuid()`) and, where
   the server has it (PostgreSQL 18 and later), UUIDv7 (`uuidv7()`), here
   and in part 2; pgEdge's snowflake (`snowflake.nextval()`) too, here and
   in part 2, when bash tests/bench.sh --pgedge-snowflake DIR built it for
   this run (pgedge_snowflake()).
2. INSERT throughput with pgbench at 1, 2, 8 and 32 clients into
   `id <type> PRIMARY KEY DEFAULT <generator>` plus a small payload; TPS
   and latency percentiles from pgbench's per-transaction log.
3. The refill in the tail: `SELECT segment_nextval(tag)` at 8 clients with
   step 100 and step 100,000, latency percentiles side by side.
4. The first INSERT after a pause: one session per generator, each
   sleeping PAUSE_SECONDS and then timing one INSERT (with
   `synchronous_commit = on`, the default, unlike part 2), in interleaved
   rounds; the median of each against bigserial's.
5. The ceiling without PostgreSQL: tests/bench/ceiling (Rust).

Writes bench.md (the table), bench.json (every figure) and three PNG plots
(matplotlib) to --out. The docs are not written here: `bash tests/bench.sh
--update-docs` runs every part and then tests/bench/publish.py, which puts
the tables of that one run into docs/benchmarks.md and README.md.

This module also holds what the other parts share: the run's identity and
the header line every table starts with (run_identity, describe_machine,
header), the command line (parse_run_args), the UUID competitors and
pgEdge's snowflake.
"""

import argparse
import glob
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
from cluster import PG_BIN, Cluster  # noqa: E402

MODES = {
    "full": dict(n=5_000_000, rounds=5, insert_seconds=8, tail_seconds=15, pause_rounds=9),
    "quick": dict(n=300_000, rounds=2, insert_seconds=2, tail_seconds=3, pause_rounds=2),
}

STARTED = time.monotonic()


def progress(message):
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", flush=True)


# --------------------------------------------------------------------------
# The run, and the competitors every part shares

def run_identity():
    """(date, commit) of this run. bash tests/bench.sh fixes them once, at
    its start, for all its steps (PG_IDGEN_BENCH_STARTED, a UTC time to the
    minute, and PG_IDGEN_BENCH_COMMIT), so that every table of one run names
    the same run; a script run alone takes the time it starts and HEAD."""
    date = os.environ.get("PG_IDGEN_BENCH_STARTED") or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    commit = os.environ.get("PG_IDGEN_BENCH_COMMIT") or subprocess.run(
        ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return date, commit


UUIDV4 = "UUIDv4 (gen_random_uuid())"
UUIDV7 = "UUIDv7 (uuidv7())"


def uuid_generators(cluster, dbname="bench"):
    """{label: function call} of the UUID competitors this server has:
    gen_random_uuid() always (core since PostgreSQL 13), uuidv7() where the
    server has it built in (18 and later)."""
    (has_v7,), = cluster.sql("SELECT to_regprocedure('uuidv7()') IS NOT NULL", dbname=dbname)
    return {UUIDV4: "gen_random_uuid()", **({UUIDV7: "uuidv7()"} if has_v7 else {})}


PGEDGE_SNOWFLAKE = "pgEdge snowflake (snowflake.nextval())"
PGEDGE_SNOWFLAKE_CALL = "snowflake.nextval()"
PGEDGE_SNOWFLAKE_NODE = 1
PGEDGE_SNOWFLAKE_SOURCE = "github.com/pgEdge/snowflake"
# After it in every table: the generator it competes with.
PGEDGE_SNOWFLAKE_AFTER = "snowflake_nextval()"


def pgedge_snowflake():
    """pgEdge's snowflake extension, when this run measures it:
    {"version": its control file's default_version, "commit": the commit
    built or None}; None when it does not. Only bash tests/bench.sh
    --pgedge-snowflake DIR builds and installs it (its source is on GitHub,
    which the benchmark machines do not reach), and says so in
    PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_VERSION and _COMMIT; an extension of
    that name found installed otherwise is not measured."""
    version = os.environ.get("PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_VERSION")
    if not version:
        return None
    return {"version": version, "commit": os.environ.get("PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_COMMIT") or None}


def pgedge_snowflake_conf(pgedge):
    """postgresql.conf lines of a cluster that measures it: its node number.
    No shared_preload_libraries: the library defines snowflake.node when a
    backend loads it (at its first call), and takes the value set here,
    held until then as a placeholder; pgedge_snowflake_setup checks that it
    did."""
    return [f"snowflake.node = {PGEDGE_SNOWFLAKE_NODE}"] if pgedge else []


def pgedge_snowflake_setup(cluster, pgedge, dbname="bench"):
    """CREATE EXTENSION snowflake in the database, when this run measures it;
    checks that it is the version built and that its IDs carry the node of
    pgedge_snowflake_conf. Returns {label: function call}, empty when not
    measured."""
    if not pgedge:
        return {}
    cluster.sql("CREATE EXTENSION snowflake", dbname=dbname)
    (version,), = cluster.sql("SELECT extversion FROM pg_extension WHERE extname = 'snowflake'", dbname=dbname)
    if version != pgedge["version"]:
        raise SystemExit(f"pgEdge's snowflake: the server has version {version}, but {pgedge['version']} was built")
    (node,), = cluster.sql(f"SELECT snowflake.get_node({PGEDGE_SNOWFLAKE_CALL})", dbname=dbname)
    if node != PGEDGE_SNOWFLAKE_NODE:
        raise SystemExit(f"pgEdge's snowflake: its IDs carry node {node}, not snowflake.node = "
                         f"{PGEDGE_SNOWFLAKE_NODE} from postgresql.conf")
    return {PGEDGE_SNOWFLAKE: PGEDGE_SNOWFLAKE_CALL}


def pgedge_snowflake_version(pgedge):
    """"2.6.0 (commit ebbdae83a49b)": the version measured, as the tables
    name it."""
    return pgedge["version"] + (f" (commit {pgedge['commit']})" if pgedge.get("commit") else "")


def pgedge_snowflake_note(pgedge):
    """The sentence each table of a run that measured it carries."""
    return (f"{PGEDGE_SNOWFLAKE}: version {pgedge_snowflake_version(pgedge)} of pgEdge's snowflake extension, "
            f"{PGEDGE_SNOWFLAKE_SOURCE}, built from source for this run "
            f"(`bash tests/bench.sh --pgedge-snowflake DIR`), `snowflake.node = {PGEDGE_SNOWFLAKE_NODE}`; "
            "each call locks its sequence's (snowflake.id_seq) buffer, no IDs cached.")


def with_after(items, after, extra):
    """items (a list of (label, ...) tuples, or a dict) with extra's entries
    right after the entry labelled `after` (at the end without it)."""
    pairs = list(items.items()) if isinstance(items, dict) else list(items)
    extra = list(extra.items()) if isinstance(extra, dict) else list(extra)
    at = next((i + 1 for i, pair in enumerate(pairs) if pair[0] == after), len(pairs))
    pairs[at:at] = extra
    return dict(pairs) if isinstance(items, dict) else pairs


# --------------------------------------------------------------------------
# 1. Marginal cost per ID

REMOTE_LABEL = "segment_nextval, step 100,000, attached to a central server"
LOCAL_TWIN = "segment_nextval, step 100,000"

# (label, expression, share of N): the JavaScript-safe layout holds 256 IDs
# per ms, so it runs on a smaller N to stay within its lead. The UUIDs are
# added by scalar_competitors().
BASE_SCALAR_COMPETITORS = [
    ("floor: pgrx function, one atomic add", "idgen_floor()", 1.0),
    ("segment_nextval, step 100", "segment_nextval('step100')", 1.0),
    ("segment_nextval, step 1,000", "segment_nextval('step1000')", 1.0),
    ("segment_nextval, step 100,000", "segment_nextval('step100000')", 1.0),
    (REMOTE_LABEL, "segment_nextval('remote100000')", 1.0),
    ("snowflake_nextval()", "snowflake_nextval()", 1.0),
    ("snowflake_js_nextval()", "snowflake_js_nextval()", 0.1),
    ("nextval, CACHE 1", "nextval('seq_cache1')", 1.0),
    ("nextval, CACHE 100", "nextval('seq_cache100')", 1.0),
]
SETOF_LABEL = "segment_nextval(tag, n), step 1,000"
REFERENCE = "nextval, CACHE 1"


def scalar_competitors(uuids, pgedge=None):
    """BASE_SCALAR_COMPETITORS, pgEdge's snowflake ({label: call} from
    pgedge_snowflake_setup, empty when not measured) after
    snowflake_nextval()'s, and the UUIDs this server has."""
    extra = [(label, call, 1.0) for label, call in (pgedge or {}).items()]
    return with_after(BASE_SCALAR_COMPETITORS, "snowflake_js_nextval()", extra) + \
        [(label, call, 1.0) for label, call in uuids.items()]


def marginal_cells(costs, label):
    """The median ns per ID and the × cheaper than nextval CACHE 1, as the
    table prints them (publish.py's summary prints the same cells)."""
    median = statistics.median(costs[label])
    reference = statistics.median(costs[REFERENCE])
    ratio = reference / median if median > 0 else float("inf")
    return f"{median:.1f}", f"{ratio:.1f}×"


def bench_command(quick, script="bench.py"):
    """The command that made a table: bench.sh says how it was called."""
    command = os.environ.get("PG_IDGEN_BENCH_COMMAND", f"python tests/bench/{script}")
    return command + (" --quick" if quick else "")


def attach_central(cluster, central):
    """A tag whose ranges come from the central cluster's id_segment."""
    central.sql("CREATE DATABASE ids")
    central.sql("CREATE EXTENSION pg_idgen", dbname="ids")
    central.sql("SELECT segment_create('remote100000', step => 100000)", dbname="ids")
    for statement in [
        "CREATE EXTENSION postgres_fdw",
        f"CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{central.dir}', "
        "dbname 'ids', connect_timeout '5', "
        "options '-c synchronous_commit=on -c lock_timeout=10ms -c idle_in_transaction_session_timeout=5s')",
        "CREATE USER MAPPING FOR CURRENT_USER SERVER central OPTIONS (user 'postgres')",
        "SELECT segment_attach('remote100000', 'central')",
    ]:
        cluster.sql(statement, dbname="bench")


def timed(conn, query):
    started = time.perf_counter()
    conn.execute(query).fetchall()
    return time.perf_counter() - started


def marginal_costs(cluster, competitors, n, rounds, dbname="bench", setof=True):
    """Per-ID cost over the bare query, ns: {label: [one figure per round]}.
    With setof, segment_nextval('step1000', n) (SETOF_LABEL) runs beside
    the competitors (the Citus part, tests/bench/citus.py, has no such
    tag)."""
    costs = {label: [] for label, _, _ in competitors}
    if setof:
        costs[SETOF_LABEL] = []
    bare_ns = []
    snowflake_rates = []
    with cluster.connect(dbname) as conn:
        # Each tag's first range (and the attached tag's connection to the
        # central server) is taken here, not in round 1.
        for _, expr, _ in competitors:
            if expr.startswith("segment_nextval("):
                conn.execute(f"SELECT {expr}").fetchall()
        bare = lambda count: timed(conn, f"SELECT count(*) FROM generate_series(1, {count})")
        for round_no in range(1, rounds + 1):
            work = list(competitors)
            if setof:
                work.append((SETOF_LABEL, None, 1.0))
            random.shuffle(work)
            round_bare = [bare(n) / n]
            for label, expr, share in work:
                count = max(1000, int(n * share))
                if expr is None:
                    seconds = timed(conn, f"SELECT count(*) FROM segment_nextval('step1000', {count})")
                else:
                    seconds = timed(conn, f"SELECT count({expr}) FROM generate_series(1, {count})")
                per_id = seconds / count
                costs[label].append(per_id)
                if expr == "snowflake_nextval()":
                    snowflake_rates.append(count / seconds)
                progress(f"round {round_no}/{rounds}: {label}: {per_id * 1e9:.1f} ns per call")
            round_bare.append(bare(n) / n)
            bare_now = statistics.mean(round_bare)
            bare_ns.append(bare_now * 1e9)
            for label in costs:
                costs[label][-1] = (costs[label][-1] - bare_now) * 1e9
    return costs, bare_ns, snowflake_rates


# --------------------------------------------------------------------------
# 2 and 3. pgbench

BASE_INSERT_TABLES = {
    "segment_nextval (step 1,000)": "bigint PRIMARY KEY DEFAULT segment_nextval('insert')",
    "snowflake_nextval()": "bigint PRIMARY KEY DEFAULT snowflake_nextval()",
    "bigserial": "bigserial PRIMARY KEY",
    "identity": "bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
}
CLIENTS = [1, 2, 8, 32]


def insert_tables(uuids, pgedge=None):
    """{label: the id column} of the INSERT part: the integer keys (pgEdge's
    snowflake after snowflake_nextval(), when measured) and the UUIDs this
    server has."""
    keys = with_after(BASE_INSERT_TABLES, PGEDGE_SNOWFLAKE_AFTER,
                      {label: f"bigint PRIMARY KEY DEFAULT {call}" for label, call in (pgedge or {}).items()})
    return {**keys, **{label: f"uuid PRIMARY KEY DEFAULT {call}" for label, call in uuids.items()}}


def insert_cells(inserts, label):
    """TPS at 8 clients and its ratio to bigserial's, as the table prints
    them (publish.py's summary prints the same cells)."""
    tps = inserts[label]["8"]["tps"]
    return f"{tps:,.0f}", f"{tps / inserts['bigserial']['8']['tps']:.2f}×"
PERCENTILES = [50, 99, 99.9, 99.99]


def table_name(label):
    return "t_" + re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def pgbench(cluster, script, clients, seconds, workdir, tag, dbname="bench", during=None):
    """Runs pgbench with one thread per client against the database of the
    cluster (on its Unix socket, at its port); returns (tps, [latencies in
    µs]). pgbench reads the clock lazily, so on an oversubscribed machine a
    call finished while its client thread was descheduled reads as 0 µs:
    the median is a floor, the upper percentiles (waits, stalls) are real.
    during: called with the pgbench process (a subprocess.Popen) while it
    runs, to watch the server meanwhile; it returns once the process ended
    (tests/bench/scaling.py reads a tag's block size so)."""
    script_path = os.path.join(workdir, f"{tag}.sql")
    with open(script_path, "w") as f:
        f.write(script + "\n")
    prefix = os.path.join(workdir, f"log_{tag}")
    for old in glob.glob(prefix + ".*"):
        os.remove(old)
    command = [f"{PG_BIN}/pgbench", "-h", cluster.dir, "-p", str(cluster.port), "-U", "postgres", "-n",
               "-c", str(clients), "-j", str(clients), "-T", str(seconds), "-l", f"--log-prefix={prefix}",
               "-f", script_path, dbname]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir) as proc:
        if during:
            during(proc)
        stdout, stderr = proc.communicate()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, command, stdout, stderr)
    tps = float(re.search(r"tps = ([0-9.]+) \(without initial connection time\)", stdout).group(1))
    latencies = []
    for path in glob.glob(prefix + ".*"):
        with open(path) as f:
            latencies.extend(int(line.split()[2]) for line in f if line.strip())
    return tps, latencies


def percentiles(latencies_us):
    ordered = sorted(latencies_us)
    pick = lambda p: ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] / 1000.0
    return {str(p): pick(p) for p in PERCENTILES}


def insert_throughput(cluster, tables, seconds, workdir):
    results = {label: {} for label in tables}
    for clients in CLIENTS:
        order = list(tables)
        random.shuffle(order)
        for label in order:
            table = table_name(label)
            cluster.sql(f"TRUNCATE {table}", dbname="bench")
            cluster.sql("CHECKPOINT", dbname="bench")
            tps, latencies = pgbench(cluster, f"INSERT INTO {table} (payload) VALUES ('order-0123456789abcdef');",
                                     clients, seconds, workdir, f"{table}_{clients}")
            results[label][str(clients)] = {"tps": tps, "latency_ms": percentiles(latencies),
                                            "transactions": len(latencies)}
            progress(f"INSERT, {clients} clients: {label}: {tps:,.0f} TPS")
    return results


TAIL_QUERIES = {
    "segment_nextval, step 100": "SELECT segment_nextval('tail100');",
    "segment_nextval, step 100,000": "SELECT segment_nextval('tail100000');",
    "nextval, CACHE 1": "SELECT nextval('seq_cache1');",
}


def refill_tail(cluster, seconds, workdir):
    results = {}
    order = list(TAIL_QUERIES)
    random.shuffle(order)
    for label in order:
        tps, latencies = pgbench(cluster, TAIL_QUERIES[label], 8, seconds, workdir, table_name(label))
        results[label] = {"tps": tps, "latency_ms": percentiles(latencies), "calls": len(latencies)}
        progress(f"SELECT at 8 clients: {label}: p99.99 {results[label]['latency_ms']['99.99']:.3f} ms")
    waits = cluster.sql("SELECT tag, waits, refills FROM segment_status WHERE tag LIKE 'tail%' ORDER BY tag",
                        dbname="bench")
    return results, {tag: {"waits": w, "refills": r} for tag, w, r in waits}


# --------------------------------------------------------------------------
# 4. The first INSERT after a pause

PAUSE_SECONDS = 4
PAUSE_TABLES = ["snowflake_nextval()", "segment_nextval (step 1,000)", "bigserial"]


def first_insert_after_pause(cluster, rounds):
    """ms of the first INSERT after PAUSE_SECONDS idle: {label: [one per round]}."""
    results = {label: [] for label in PAUSE_TABLES}
    conns = {label: cluster.connect("bench") for label in PAUSE_TABLES}
    try:
        for label, conn in conns.items():
            conn.execute("SET synchronous_commit = on")
            conn.execute(f"INSERT INTO {table_name(label)} (payload) VALUES ('warm-up')")
        for round_no in range(1, rounds + 1):
            order = list(PAUSE_TABLES)
            random.shuffle(order)
            for label in order:
                time.sleep(PAUSE_SECONDS)
                ms = timed(conns[label], f"INSERT INTO {table_name(label)} (payload) VALUES ('after a pause') "
                                         "RETURNING id") * 1000
                results[label].append(ms)
                progress(f"pause round {round_no}/{rounds}: {label}: {ms:.3f} ms")
    finally:
        for conn in conns.values():
            conn.close()
    return results


# --------------------------------------------------------------------------
# 5. The ceiling

# Lines of the ceiling that are not ops per second: the IDs a backend's
# block gave per take from the chain, on average.
CEILING_IDS_PER_TAKE = "backend_block_ids_per_take"
CEILING_NOT_OPS = {CEILING_IDS_PER_TAKE}


def ceiling():
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(REPO, "target", "ceiling"))
    out = subprocess.run(["cargo", "run", "--release", "-q", "--manifest-path",
                          os.path.join(HERE, "ceiling", "Cargo.toml")],
                         check=True, capture_output=True, text=True, env=env).stdout
    results = {}
    for line in out.splitlines():
        name, threads, ops = line.split()
        results.setdefault(name, {})[threads] = float(ops)
    progress("ceiling: " + ", ".join(f"{k} {v['1'] / 1e6:.0f}M/s" for k, v in results.items()
                                     if k not in CEILING_NOT_OPS))
    return results


# --------------------------------------------------------------------------
# Output

def describe_machine(cluster, dbname="bench"):
    """The machine, the versions and the run (run_identity): what header()
    prints."""
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    (pg_version,), = cluster.sql("SELECT version()", dbname=dbname)[0:1]
    (version_num,), = cluster.sql("SELECT current_setting('server_version_num')::int", dbname=dbname)[0:1]
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    date, commit = run_identity()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(os.sysconf("SC_PAGE_SIZE") *
            os.sysconf("SC_PHYS_PAGES") / 2**30), "postgres": pg_version.split(" on ")[0],
            "postgres_major": version_num // 10000, "rustc": rustc, "commit": commit, "date": date}


def header(machine, command, mode):
    """The first line of every table of a run, the same in all of them:
    when the run started, the commit, the command, the machine and the
    versions (tests/integration/test_bench_blocks.py checks it)."""
    m = machine
    return (f"Measured {m['date']} at commit `{m['commit']}` with `{command}` ({mode} mode): "
            f"{m['cores']} cores ({m['cpu']}), {m['memory_gb']} GB, {m['postgres']}, {m['rustc']}.")


def finish_figure(plt, fig, machine, out, filename):
    """Writes a plot: the run (date, commit, PostgreSQL) in its corner,
    laid out, saved as `out/filename`, closed."""
    label = f"{machine['date']}, commit {machine['commit']}, {machine['postgres'].split(' (')[0]}"
    fig.text(0.995, 0.005, label, ha="right", va="bottom", fontsize=6, color="gray")
    fig.tight_layout()
    fig.savefig(os.path.join(out, filename), dpi=110)
    plt.close(fig)


def write_results(out, part, results, table, plots=None, plot_names=""):
    """What every part of the benchmark leaves in --out: PART.json (the
    measurements), PART.md (its table), its plots if it has any; and the
    table on the terminal."""
    with open(os.path.join(out, f"{part}.json"), "w") as f:
        json.dump(results, f, indent=2, default=str)
    with open(os.path.join(out, f"{part}.md"), "w") as f:
        f.write(table)
    if plots:
        plots()
    print()
    print(table)
    progress(f"wrote {out}/{part}.md, {part}.json" + (f", {plot_names}" if plot_names else ""))


def spread(values):
    return f"{min(values):.1f} – {max(values):.1f}"


def markdown(results, mode):
    lines = [
        header(results["machine"], results["command"], mode),
        "",
        f"**Marginal cost per ID in one backend** (N = {results['n']:,}, {results['rounds']} interleaved rounds; "
        f"bare query {statistics.median(results['bare_ns']):.0f} ns per row):",
        "",
        "| generator | ns per ID (median) | spread (min – max) | × cheaper than nextval CACHE 1 |",
        "|---|---:|---:|---:|",
    ]
    costs = results["marginal_ns"]
    for label, values in costs.items():
        median, ratio = marginal_cells(costs, label)
        lines.append(f"| {label} | {median} | {spread(values)} | {ratio} |")
    rates = results["snowflake_ids_per_second"]
    local, remote = (statistics.median(costs[k]) for k in (LOCAL_TWIN, REMOTE_LABEL))
    bare = statistics.median(results["bare_ns"])
    lines += [
        "",
        f"The tag attached to a central server (`segment_attach`, postgres_fdw to a second cluster) costs "
        f"{remote:.1f} ns per ID against {local:.1f} ns for the local tag of the same step, in the same run: "
        f"{remote - local:+.1f} ns, a ratio of "
        + (f"{remote / local:.2f}×" if local > 0 and remote > 0
           else "— (a median at or below zero: the noise is larger than the cost)")
        + " on the marginal cost "
        f"({(bare + remote) / (bare + local):.2f}× on the whole call with the bare query). The calls "
        "themselves never reach the central server; only the refill worker does.",
        "",
        f"snowflake_nextval() in one backend over {results['n']:,} IDs: "
        f"{statistics.median(rates) / 1e6:.1f} M IDs/s ({statistics.median(rates) / 4_096_000:.0%} of the layout's "
        "4.096 M/s; above it, time runs ahead of the clock within `pg_idgen.snowflake_max_lead`). "
        "snowflake_js_nextval() is capped by its layout at 256,000 IDs/s.",
        "",
    ]
    if results.get("pgedge_snowflake"):
        lines += [pgedge_snowflake_note(results["pgedge_snowflake"]), ""]
    lines += [
        "**INSERT throughput** (pgbench, `INSERT INTO t (payload) VALUES (...)`, "
        f"{results['insert_seconds']} s per run, `synchronous_commit = off`):",
        "",
        "| generator | " + " | ".join(f"TPS, {c} client{'s' if c > 1 else ''}" for c in CLIENTS)
        + " | P50 / P99 / P99.9 / P99.99 ms at 8 clients | TPS vs bigserial at 8 |",
        "|---|" + "---:|" * len(CLIENTS) + "---:|---:|",
    ]
    inserts = results["insert"]
    for label, by_clients in inserts.items():
        tps = " | ".join(f"{by_clients[str(c)]['tps']:,.0f}" for c in CLIENTS)
        p = by_clients["8"]["latency_ms"]
        _, ratio = insert_cells(inserts, label)
        lines.append(f"| {label} | {tps} | {p['50']:.3f} / {p['99']:.3f} / {p['99.9']:.3f} / {p['99.99']:.3f} "
                     f"| {ratio} |")
    lines += [
        "",
        f"**The refill in the tail** (`SELECT f()` at 8 clients, {results['tail_seconds']} s each):",
        "",
        "| query | calls/s | P50 ms | P99 ms | P99.9 ms | P99.99 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, r in results["tail"].items():
        p = r["latency_ms"]
        lines.append(f"| {label} | {r['tps']:,.0f} | {p['50']:.3f} | {p['99']:.3f} | {p['99.9']:.3f} | {p['99.99']:.3f} |")
    tail = results["tail"]
    small, big = (tail[k]["latency_ms"]["99.99"] for k in ("segment_nextval, step 100", "segment_nextval, step 100,000"))
    waits = results["tail_waits"]
    lines += [
        "",
        "Latencies come from pgbench's per-transaction log; pgbench reads its clock lazily, so on these "
        "2 cores a call that completed while its client thread was descheduled reads as 0: P50 is a floor, "
        "the upper percentiles are real.",
        "",
        f"P99.99 at step 100 is {small / big:.2f}× that at step 100,000; calls that waited for a refill: "
        + ", ".join(f"{tag} {v['waits']} ({v['refills']} refills)" for tag, v in waits.items()) + ".",
        "",
        f"**The first INSERT after a {PAUSE_SECONDS} s pause** (one session per generator, "
        f"`synchronous_commit = on`, {len(results['pause_ms']['bigserial'])} interleaved rounds):",
        "",
        "| generator | ms (median) | spread (min – max) | vs bigserial |",
        "|---|---:|---:|---:|",
    ]
    pause = results["pause_ms"]
    bigserial = statistics.median(pause["bigserial"])
    for label, values in pause.items():
        median = statistics.median(values)
        lines.append(f"| {label} | {median:.3f} | {min(values):.3f} – {max(values):.3f} | "
                     f"{median / bigserial:.2f}× |")
    lines += [
        "",
        "Through a pause the snowflake keeper keeps its high-water mark ahead of the clock (for up to "
        "5 minutes after the last ID), so the first call after it does not wait for a WAL flush and an fsync.",
        "",
        "**The ceiling without PostgreSQL** (`tests/bench/ceiling`, ops per second):",
        "",
        "| operation | 1 thread | 2 threads |",
        "|---|---:|---:|",
    ]
    names = {"atomic_fetch_add": "bare `AtomicU64::fetch_add`",
             "segment_chain_take": "segment range chain take (one `fetch_add` per ID)",
             "backend_block_take": "segment range chain, each thread with a block of its own (`BackendBlock`)",
             "locked_double_buffer": "Leaf-style double buffer behind a `parking_lot::Mutex`",
             "snowflake_state_machine": "snowflake state machine (clock stopped)",
             "snowflake_exact_clock": "snowflake with an exact clock read per ID"}
    for key, label in names.items():
        r = results["ceiling"][key]
        lines.append(f"| {label} | {r['1'] / 1e6:,.1f} M | {r['2'] / 1e6:,.1f} M |")
    per_take = results["ceiling"][CEILING_IDS_PER_TAKE]
    lines += [
        "",
        "With a block of its own, a thread takes from the chain as `segment_nextval` does (`take_one`): "
        "single IDs while it draws alone, a block of up to 256 while another thread took in between; "
        f"IDs per take from the chain, on average: {per_take['1']:.1f} on 1 thread, {per_take['2']:.1f} on 2.",
    ]
    return "\n".join(lines) + "\n"


def plots(results, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, by_clients in results["insert"].items():
        ax.plot(CLIENTS, [by_clients[str(c)]["tps"] for c in CLIENTS], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(CLIENTS, [str(c) for c in CLIENTS])
    ax.set_xlabel("pgbench clients")
    ax.set_ylabel("INSERT transactions per second")
    ax.set_title("INSERT throughput by key generator")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    finish_figure(plt, fig, results["machine"], out, "tps.png")

    def percentile_bars(series, title, filename):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        width = 0.8 / len(series)
        for i, (label, p) in enumerate(series.items()):
            xs = [j + i * width for j in range(len(PERCENTILES))]
            ax.bar(xs, [p[str(q)] for q in PERCENTILES], width=width, label=label)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(PERCENTILES))], [f"P{q}" for q in PERCENTILES])
        ax.set_yscale("log")
        ax.set_ylabel("latency, ms (log scale)")
        ax.set_title(title)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
        finish_figure(plt, fig, results["machine"], out, filename)

    percentile_bars({label: r["8"]["latency_ms"] for label, r in results["insert"].items()},
                    "INSERT latency percentiles at 8 clients", "latency.png")
    percentile_bars({label: r["latency_ms"] for label, r in results["tail"].items()},
                    "SELECT f() latency at 8 clients: the refill in the tail", "tail.png")


def parse_run_args(doc, quick_help, temp_prefix):
    """The command line every benchmark script takes: --quick and --out.
    Returns the arguments, the mode ("quick" or "full") and the directory
    results go to (made if need be): tests/bench/results for a full run, a
    temporary one for a quick run unless --out says. (No script writes the
    docs itself: publish.py does, from one whole run of bench.sh.)"""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--out", default=None, help="where results go (default: tests/bench/results)")
    args = parser.parse_args()
    mode = "quick" if args.quick else "full"
    out = args.out or (os.path.join(HERE, "results") if mode == "full" else tempfile.mkdtemp(prefix=temp_prefix))
    os.makedirs(out, exist_ok=True)
    return args, mode, out


def main():
    args, mode, out = parse_run_args(__doc__, "a smoke run: small N, short runs", "pg_idgen-bench.")
    settings = MODES[mode]
    random.seed(20261130)

    pgedge = pgedge_snowflake()
    cluster = Cluster(conf=["shared_buffers = '512MB'", "synchronous_commit = off", "max_wal_size = '8GB'",
                            "checkpoint_timeout = '30min'", "max_connections = 100",
                            *pgedge_snowflake_conf(pgedge)], name="pg_idgen-bench.")
    central = Cluster(name="pg_idgen-bench-central.")
    workdir = tempfile.mkdtemp(prefix="pg_idgen-bench-work.")
    os.chmod(workdir, 0o777)
    try:
        cluster.start()
        # pg_idgen.snowflake_database: where the snowflake mark is WAL-logged.
        cluster.sql("CREATE EXTENSION pg_idgen")
        central.start()
        cluster.sql("CREATE DATABASE bench")
        uuids = uuid_generators(cluster)
        pgedge_calls = pgedge_snowflake_setup(cluster, pgedge)
        competitors, tables = scalar_competitors(uuids, pgedge_calls), insert_tables(uuids, pgedge_calls)
        setup = ["CREATE EXTENSION pg_idgen", "CREATE EXTENSION idgen_floor",
                 "CREATE SEQUENCE seq_cache1", "CREATE SEQUENCE seq_cache100 CACHE 100"]
        for tag, step in [("step100", 100), ("step1000", 1000), ("step100000", 100000), ("insert", 1000),
                          ("tail100", 100), ("tail100000", 100000)]:
            setup.append(f"SELECT segment_create('{tag}', step => {step})")
        for label, column in tables.items():
            setup.append(f"CREATE TABLE {table_name(label)} (id {column}, payload text NOT NULL)")
        for statement in setup:
            cluster.sql(statement, dbname="bench")
        attach_central(cluster, central)
        progress(f"{mode} run; cluster in {cluster.dir}; results to {out}")

        results = {"command": bench_command(args.quick), "mode": mode,
                   "n": settings["n"], "rounds": settings["rounds"],
                   "insert_seconds": settings["insert_seconds"], "tail_seconds": settings["tail_seconds"],
                   "uuids": uuids, "pgedge_snowflake": pgedge}
        results["machine"] = describe_machine(cluster)
        results["ceiling"] = ceiling()
        costs, bare_ns, rates = marginal_costs(cluster, competitors, settings["n"], settings["rounds"])
        results.update(marginal_ns=costs, bare_ns=bare_ns, snowflake_ids_per_second=rates)
        results["insert"] = insert_throughput(cluster, tables, settings["insert_seconds"], workdir)
        results["tail"], results["tail_waits"] = refill_tail(cluster, settings["tail_seconds"], workdir)
        results["pause_ms"] = first_insert_after_pause(cluster, settings["pause_rounds"])
    finally:
        cluster.destroy()
        central.destroy()
        subprocess.run(["rm", "-rf", workdir])

    write_results(out, "bench", results, markdown(results, mode), plots=lambda: plots(results, out),
                  plot_names="tps.png, latency.png, tail.png")


if __name__ == "__main__":
    main()
