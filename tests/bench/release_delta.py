"""This tree against the release before it, in one run: the marginal cost
of snowflake_nextval(), of segment_nextval() one ID per call and a batch
of N in one call, and of segment_reserve(), in release BEFORE (built from
this repository's history with the release profile) and in this tree, on
throwaway clusters of the same PostgreSQL, rounds interleaved in a
shuffled order, every server started again several times (MODES). A
second server of this tree, timed in the same rounds, gives the noise: the
ratio two copies of one library make.

  python tests/bench/release_delta.py [--quick] [--out DIR]

Two servers cannot load two libraries of one name from one installation, so
each side gets a copy of the relocatable PostgreSQL's tree (16, 17 or 18;
PG_BIN names it) with its own pg_idgen.so. The cost is measured as in
bench.py — `SELECT count(f()) FROM generate_series(1, N)` (FUNCTIONS has
each query) less the bare query, divided by N — but in the backend's CPU time (/proc/PID/schedstat),
not wall time: the difference sought is a few ns per ID, and on a shared
2-core machine wall time swings by tens. CPU time still moves by several
ns from run to run, so each side's server then runs once more under
callgrind, which counts the instructions of a call: the same at every run
but for a few tens in segment_reserve's thousands (valgrind, from
tests/setup.sh). Writes release_delta.md and
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
import time

import psycopg

from bench import PG_BIN, bench_command, describe_machine, header, parse_run_args, progress, spread, write_results
from cluster import Cluster
from releases import RELEASES, build_release, pg_config_value

BEFORE = "0.3.0"
# A second server of this tree, on a copy of its own, timed in the same
# rounds: the ratio of the two copies of one library is what the
# comparison's noise alone makes of a ratio (memory layouts, the machine).
AGAIN = "this tree, second copy"
# rounds = starts × rounds per start: both servers are started again before
# each start's rounds, so that each side's figure pools several memory
# layouts (of the server and of its backend) rather than the one draw of
# a single start, which moved one row of one run by up to 1.6×.
MODES = {"full": dict(n=1_000_000, starts=9, rounds=9), "quick": dict(n=300_000, starts=2, rounds=1)}
# label → the query that makes N of them: one ID per call, one call per
# row; a batch of N IDs in one call; a reservation of 10 IDs per row (in
# the select list: a LATERAL call with constant arguments runs once).
FUNCTIONS = {"snowflake_nextval()": "SELECT count(snowflake_nextval()) FROM generate_series(1, {n})",
             "segment_nextval, step 1,000": "SELECT count(segment_nextval('step1000')) FROM generate_series(1, {n})",
             "segment_nextval(tag, n), per ID": "SELECT count(*) FROM segment_nextval('step1000', {n})",
             "segment_reserve(tag, 10), per call": "SELECT count(*) FROM (SELECT segment_reserve('counted', 10) "
                                                   "FROM generate_series(1, {n})) r"}
CONF = ["shared_buffers = '256MB'", "synchronous_commit = off"]
# What `counted` counts: each function's C entry point, where callgrind
# counts, and the query that calls it N times. The counted tag's step is so large that no refill
# falls in the count: its waits are not the call's cost.
COUNTED = {"snowflake_nextval()": ("snowflake_nextval_wrapper",
                                    "SELECT count(snowflake_nextval()) FROM generate_series(1, {n})"),
           "segment_nextval, step 10,000,000": ("segment_nextval_fast",
                                                "SELECT count(segment_nextval('counted')) FROM generate_series(1, {n})"),
           "segment_nextval(tag, n), per ID": ("segment_nextval_many_wrapper",
                                               "SELECT count(*) FROM segment_nextval('counted', {n})"),
           "segment_reserve(tag, 10), per call": ("segment_reserve_wrapper",
                                                  "SELECT count(*) FROM (SELECT segment_reserve('counted', 10) "
                                                  "FROM generate_series(1, {n})) r")}
# The calls of the two counted sessions: the difference leaves out what a
# session's first call costs (resolving the tag, the call site).
COUNTED_CALLS = {"full": (10_000, 110_000), "quick": (1_000, 11_000)}


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


def counted(cluster, work, mode):
    """Instructions per call of each function, as callgrind counts them:
    unlike time, the same at every run and whatever else the machine does
    (but for a per-backend random hash seed: see markdown()),
    so it resolves the few instructions a change adds or saves, which the
    timed rounds cannot on a shared machine. The server runs under
    valgrind (its backends too, as forks), counting only inside the
    function's entry point; after a first session, two sessions make
    COUNTED_CALLS calls, and the difference of their counts is divided by
    the difference of their calls. Leaves the cluster running as it found it."""
    cluster.stop()
    out = tempfile.mkdtemp(prefix="callgrind.", dir=work)
    shutil.chown(out, "postgres", "postgres")
    short, long = COUNTED_CALLS[mode]
    per_call = {}
    for label, (symbol, query) in COUNTED.items():
        server = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", "valgrind", "--tool=callgrind", f"--toggle-collect={symbol}",
             f"--callgrind-out-file={out}/{symbol}.%p", f"{cluster.pg_bin}/postgres", "-D", cluster.data],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        counts = []
        try:
            deadline = time.monotonic() + 300
            while True:
                try:
                    cluster.sql("SELECT 1")
                    break
                except psycopg.OperationalError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise
                    time.sleep(0.5)
            # A first session, not counted, takes the waits of a server just
            # started (its first range, the keeper's first mark).
            pids = []
            for n in (short, short, long):
                with cluster.connect() as conn:
                    pids.append(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
                    conn.execute(query.format(n=n)).fetchall()
            pids = pids[1:]
        finally:
            cluster.stop()
            server.wait(timeout=300)
        for pid in pids:
            with open(os.path.join(out, f"{symbol}.{pid}")) as f:
                counts.append(next(int(line.split()[1]) for line in f if line.startswith("totals:")))
        per_call[label] = (counts[1] - counts[0]) / (long - short)
    cluster.start()
    return per_call


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
        again_config = copy_of_postgres(work, "again")
        progress(f"building {BEFORE} (commit {RELEASES[BEFORE]}) with the release profile")
        install_release(before_config, work)
        sides = {BEFORE: (before_config, f"VERSION '{BEFORE}'"), "this tree": (after_config, ""),
                 AGAIN: (again_config, "")}
        for side, (pg_config, version) in sides.items():
            cluster = Cluster(conf=CONF, name="pg_idgen-release-delta.", pg_bin=os.path.dirname(pg_config))
            clusters[side] = cluster
            cluster.start()
            cluster.sql(f"CREATE EXTENSION pg_idgen {version}")
            cluster.sql("SELECT segment_create('step1000', step => 1000)")
            cluster.sql("SELECT segment_create('counted', step => 10000000)")
            cluster.sql("SELECT segment_nextval('step1000')")
        costs = {side: {label: [] for label in FUNCTIONS} for side in clusters}
        per_start = {side: {label: [] for label in FUNCTIONS} for side in clusters}
        n = settings["n"]
        waits = {side: {} for side in clusters}
        for start_no in range(settings["starts"]):
            conns, pids = {}, {}
            for side, cluster in clusters.items():
                if start_no:
                    cluster.restart()
                conns[side] = cluster.connect()
                pids[side] = conns[side].execute("SELECT pg_backend_pid()").fetchone()[0]
                # Out of the timed rounds: a started server's first range.
                conns[side].execute("SELECT segment_nextval('step1000')")
            this_start = {side: {label: [] for label in FUNCTIONS} for side in clusters}
            for _ in range(settings["rounds"]):
                work_items = [(side, label) for side in clusters for label in FUNCTIONS]
                random.shuffle(work_items)
                for side, label in work_items:
                    conn, pid = conns[side], pids[side]
                    bare = cpu_timed(conn, pid, f"SELECT count(*) FROM generate_series(1, {n})")
                    seconds = cpu_timed(conn, pid, FUNCTIONS[label].format(n=n))
                    bare = (bare + cpu_timed(conn, pid, f"SELECT count(*) FROM generate_series(1, {n})")) / 2
                    this_start[side][label].append((seconds - bare) / n * 1e9)
            for side in clusters:
                for label in FUNCTIONS:
                    costs[side][label] += this_start[side][label]
                    per_start[side][label].append(statistics.median(this_start[side][label]))
            # Whether calls waited for the keeper's mark (a WAL commit since
            # 0.3.0) or for the clock, and the timed tag's calls that waited
            # for a refill and its refills (a wait costs the caller CPU time
            # its instructions do not show): summed over the starts (the
            # counters start at zero with the server).
            for side, conn in conns.items():
                row = conn.execute("SELECT persist_waits, lead_waits FROM snowflake_status "
                                   "WHERE generator = 'default'").fetchone()
                row += conn.execute("SELECT waits, refills FROM segment_status WHERE tag = 'step1000'").fetchone()
                for key, value in zip(("persist_waits", "lead_waits", "segment_waits", "segment_refills"), row):
                    waits[side][key] = waits[side].get(key, 0) + value
                conn.close()
        progress("counting instructions per call under callgrind")
        instructions = {side: counted(cluster, work, mode) for side, cluster in clusters.items()
                        if side != AGAIN}
        results = {"instructions": instructions, "counted_calls": COUNTED_CALLS[mode], "waits": waits, "command": bench_command(args.quick, "release_delta.py"), "mode": mode, "n": n,
                   "rounds": settings["rounds"] * settings["starts"],
                   "starts": settings["starts"], "per_start_ns": per_start, "before": BEFORE, "commit_before": RELEASES[BEFORE],
                   "machine": describe_machine(clusters["this tree"], dbname="postgres"), "marginal_ns": costs}
    finally:
        for cluster in clusters.values():
            cluster.destroy()
        shutil.rmtree(work, ignore_errors=True)

    write_results(out, "release_delta", results, markdown(results, mode))


def sides(results, key, labels):
    """(label, the release's figure, this tree's) of each label under key."""
    return [(label, results[key][results["before"]][label], results[key]["this tree"][label]) for label in labels]


def markdown(results, mode):
    before = results["before"]
    lines = [header(results["machine"], results["command"], mode),
             "",
             f"**This tree against {before}** (`tests/bench/release_delta.py`, commit {results['commit_before']}, "
             f"built with the release profile; a copy of the same PostgreSQL for each server): marginal cost (per ID, or per call where it says so), "
             f"N = {results['n']:,}, backend CPU time, median of {results['rounds']} interleaved rounds "
             f"in {results['starts']} starts of every server, and in brackets the range of the "
             f"{results['starts']} starts' medians (each start draws the memory layout of the server and "
             f"its backend anew).",
             "",
             f"The last column is the noise: a second server of this tree, on a copy of its own, timed in "
             f"the same rounds, against the first. A ratio to {before} inside the band the two copies of "
             f"one library make is within this comparison's noise.",
             "",
             f"| over the bare query | {before} | this tree | this tree / {before} | second copy / this tree |",
             "|---|---:|---:|---:|---:|"]
    starts = results["per_start_ns"]
    for label, old, new in sides(results, "marginal_ns", FUNCTIONS):
        ratio = statistics.median(new) / statistics.median(old)
        noise = ""
        if AGAIN in results["marginal_ns"]:
            noise = f"{statistics.median(results['marginal_ns'][AGAIN][label]) / statistics.median(new):.2f}"
        higher = sum(n > o for o, n in zip(starts[before][label], starts["this tree"][label]))
        lines.append(f"| `{label}` | {statistics.median(old):.1f} ns ({spread(starts[before][label])}) | "
                     f"{statistics.median(new):.1f} ns ({spread(starts['this tree'][label])}) | {ratio:.2f} "
                     f"(higher in {higher} of {len(starts[before][label])} starts) | {noise} |")
    short, long = results["counted_calls"]
    lines += ["", f"Instructions per call, counted by callgrind (`valgrind --tool=callgrind`, inside the "
                  f"function's entry point; a session of {long:,} calls less one of {short:,}): the same at "
                  f"every run, where the times above move by several ns from run to run — but for "
                  f"`segment_reserve`'s, which moves by tens of its thousands (it looks its tag up in a "
                  f"hash table whose hash is seeded at random in each backend).",
              "",
              f"| instructions per call | {before} | this tree | difference |",
              "|---|---:|---:|---:|"]
    for label, old, new in sides(results, "instructions", COUNTED):
        lines.append(f"| `{label}` | {old:,.0f} | {new:,.0f} | {round(new) - round(old):+,} |")
    waits = results["waits"]
    lines += ["", "Waits of `snowflake_nextval()` over the run (`snowflake_status`): " + "; ".join(
        f"{side}: {w['persist_waits']:,} for the keeper's mark, {w['lead_waits']:,} for the clock"
        for side, w in waits.items()) + "."]
    if all("segment_waits" in w for w in waits.values()):
        lines += ["", "Calls of the timed tag (`step1000`) that waited for a refill over the run, and its "
                      "refills (`segment_status`): " + "; ".join(
                          f"{side}: {w['segment_waits']:,} waits, {w['segment_refills']:,} refills"
                          for side, w in waits.items()) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
