"""This tree against the release before it, in one run: the marginal cost
per ID of snowflake_nextval() and segment_nextval() in 0.2.0 (commit
0a85b84, built from this repository's history with the release profile)
and in this tree, on two throwaway clusters of the same PostgreSQL, rounds
interleaved in a shuffled order.

  python tests/bench/release_delta.py [--quick] [--out DIR]

Two servers cannot load two libraries of one name from one installation, so
each side gets a copy of the relocatable PostgreSQL's tree (16, 17 or 18;
PG_BIN names it) with its own pg_idgen.so. The cost is measured as in
bench.py — `SELECT count(f()) FROM generate_series(1, N)` less the bare
query, divided by N — but in the backend's CPU time (/proc/PID/schedstat),
not wall time: the difference sought is a few ns per ID, and on a shared
2-core machine wall time swings by tens. Writes release_delta.md and
release_delta.json to --out (the docs' <!-- bench-release:start --> block is
put in by publish.py, from a whole run of bash tests/bench.sh --update-docs
with --pg 16, 17 or 18; a run on 15, Debian's PostgreSQL, which cannot be
copied, writes that block as not measured)."""

import os
import random
import shutil
import statistics
import subprocess
import tempfile

from bench import PG_BIN, bench_command, describe_machine, header, parse_run_args, progress, spread, write_results
from cluster import Cluster
from releases import RELEASES, build_release, pg_config_value

BEFORE = "0.2.0"
MODES = {"full": dict(n=1_000_000, rounds=81), "quick": dict(n=300_000, rounds=2)}
FUNCTIONS = {"snowflake_nextval()": "snowflake_nextval()",
             "segment_nextval, step 1,000": "segment_nextval('step1000')"}
CONF = ["shared_buffers = '256MB'", "synchronous_commit = off"]


def cpu_timed(conn, pid, query):
    """CPU seconds the backend `pid` spent on `query` (/proc/PID/schedstat,
    in ns): unlike wall time, not inflated when another process takes the
    core (the two sides share two cores with everything else)."""
    def cpu_ns():
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    started = cpu_ns()
    conn.execute(query).fetchall()
    return (cpu_ns() - started) / 1e9


def copy_of_postgres(work, side):
    """A copy of PG_BIN's PostgreSQL tree with this tree's pg_idgen in it
    (bench.sh installed it there); returns its pg_config."""
    root = os.path.join(work, side)
    shutil.copytree(os.path.dirname(os.path.abspath(PG_BIN)), root, symlinks=True)
    subprocess.run(["chmod", "-R", "a+rX", work], check=True)
    return os.path.join(root, "bin", "pg_config")


def install_release(pg_config, work):
    """Puts release BEFORE's library and install script into the copy."""
    library, script = build_release(BEFORE, os.path.join(work, "build"), pg_config, debug=False)
    shutil.copy(library, os.path.join(pg_config_value(pg_config, "--pkglibdir"), "pg_idgen.so"))
    shutil.copy(script, os.path.join(pg_config_value(pg_config, "--sharedir"), "extension",
                                     f"pg_idgen--{BEFORE}.sql"))


def main():
    args, mode, out = parse_run_args(__doc__, "a smoke run: small N, two rounds", "pg_idgen-release-delta.")
    settings = MODES[mode]
    random.seed(20261202)
    if not os.path.exists(os.path.join(os.path.dirname(os.path.abspath(PG_BIN)), "include")):
        raise SystemExit("release_delta.py copies a relocatable PostgreSQL: run it with --pg 16, 17 or 18")
    work = tempfile.mkdtemp(prefix="pg_idgen-release-delta.")
    clusters = {}
    try:
        before_config = copy_of_postgres(work, "before")
        after_config = copy_of_postgres(work, "after")
        progress(f"building {BEFORE} (commit {RELEASES[BEFORE]}) with the release profile")
        install_release(before_config, work)
        sides = {BEFORE: (before_config, f"VERSION '{BEFORE}'"), "this tree": (after_config, "")}
        for side, (pg_config, version) in sides.items():
            cluster = Cluster(conf=CONF, name="pg_idgen-release-delta.", pg_bin=os.path.dirname(pg_config))
            clusters[side] = cluster
            cluster.start()
            cluster.sql(f"CREATE EXTENSION pg_idgen {version}")
            cluster.sql("SELECT segment_create('step1000', step => 1000)")
            cluster.sql("SELECT segment_nextval('step1000')")
        costs = {side: {label: [] for label in FUNCTIONS} for side in clusters}
        n = settings["n"]
        conns = {side: cluster.connect() for side, cluster in clusters.items()}
        pids = {side: conn.execute("SELECT pg_backend_pid()").fetchone()[0] for side, conn in conns.items()}
        for round_no in range(1, settings["rounds"] + 1):
            work_items = [(side, label) for side in clusters for label in FUNCTIONS]
            random.shuffle(work_items)
            for side, label in work_items:
                conn, pid = conns[side], pids[side]
                bare = cpu_timed(conn, pid, f"SELECT count(*) FROM generate_series(1, {n})")
                seconds = cpu_timed(conn, pid, f"SELECT count({FUNCTIONS[label]}) FROM generate_series(1, {n})")
                bare = (bare + cpu_timed(conn, pid, f"SELECT count(*) FROM generate_series(1, {n})")) / 2
                costs[side][label].append((seconds - bare) / n * 1e9)
        # Whether calls waited for the keeper's mark (a WAL commit since
        # 0.3.0) or for the clock, on the whole run.
        waits = {side: dict(zip(("persist_waits", "lead_waits"), conn.execute(
            "SELECT persist_waits, lead_waits FROM snowflake_status WHERE generator = 'default'").fetchone()))
            for side, conn in conns.items()}
        for conn in conns.values():
            conn.close()
        results = {"waits": waits, "command": bench_command(args.quick, "release_delta.py"), "mode": mode, "n": n,
                   "rounds": settings["rounds"], "before": BEFORE, "commit_before": RELEASES[BEFORE],
                   "machine": describe_machine(clusters["this tree"], dbname="postgres"), "marginal_ns": costs}
    finally:
        for cluster in clusters.values():
            cluster.destroy()
        shutil.rmtree(work, ignore_errors=True)

    write_results(out, "release_delta", results, markdown(results, mode))


def markdown(results, mode):
    before = results["before"]
    lines = [header(results["machine"], results["command"], mode),
             "",
             f"**This tree against {before}** (`tests/bench/release_delta.py`, commit {results['commit_before']}, "
             f"built with the release profile; two copies of the same PostgreSQL): marginal cost per ID, "
             f"N = {results['n']:,}, backend CPU time, median (and range) of {results['rounds']} interleaved rounds.",
             "",
             f"| per ID, over the bare query | {before} | this tree | this tree / {before} |",
             "|---|---:|---:|---:|"]
    for label in FUNCTIONS:
        old = results["marginal_ns"][before][label]
        new = results["marginal_ns"]["this tree"][label]
        ratio = statistics.median(new) / statistics.median(old)
        lines.append(f"| `{label}` | {statistics.median(old):.1f} ns ({spread(old)}) | "
                     f"{statistics.median(new):.1f} ns ({spread(new)}) | {ratio:.2f} |")
    waits = results["waits"]
    lines += ["", "Waits of `snowflake_nextval()` over the run (`snowflake_status`): " + "; ".join(
        f"{side}: {w['persist_waits']:,} for the keeper's mark, {w['lead_waits']:,} for the clock"
        for side, w in waits.items()) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
