"""The last step of bash tests/bench.sh: checks that the results in --out
come from one run (the same start time, commit, command, mode and machine in
every part), prints the summary table, and with --write (a full run's
--update-docs) puts the run into the docs:

- docs/benchmarks.md: the blocks <!-- bench:start -->, <!-- bench-fastpath:start -->,
  <!-- bench-scaling:start -->, <!-- bench-remote:start -->, <!-- bench-citus:start -->,
  <!-- bench-bulk:start --> and <!-- bench-release:start --> (each ... :end -->),
  each the table its part wrote (the Citus part's says, on PostgreSQL 15, that
  it was not measured), the scaling part's with its plot below the table;
- README.md: <!-- bench-summary:start --> ... <!-- bench-summary:end -->, the
  summary: per generator, its cost per ID in one backend, INSERT TPS at 8
  clients and a bulk INSERT ... SELECT, each beside the reference, every
  figure the same cell as in docs/benchmarks.md's tables; then a line on
  pgEdge's snowflake: its version and commit when the run measured it
  (bench.sh --pgedge-snowflake DIR), else that it was not, and why;
- docs/img/bench/: the plots (tps.png, latency.png, tail.png, bulk.png,
  scaling.png).

Every marker is looked for before anything is written: one missing, and
nothing is. A quick run's results are never written.

  python tests/bench/publish.py --out DIR [--write] [--no-release REASON]

--no-release: bench.sh did not run the release comparison (it needs a
relocatable PostgreSQL, 16, 17 or 18); its block then says so under the
run's header instead of keeping another run's numbers.
tests/integration/test_bench_blocks.py checks what this writes.
"""

import argparse
import json
import os
import shutil
import sys

# bench.py puts tests/lib on the path: import it first.
from bench import (PGEDGE_SNOWFLAKE, PGEDGE_SNOWFLAKE_NODE, PGEDGE_SNOWFLAKE_SOURCE, REFERENCE, REPO, UUIDV4,
                   UUIDV7, header, insert_cells, marginal_cells, pgedge_snowflake_version)
from bulk import BASELINE, bulk_cells

README = os.path.join(REPO, "README.md")
DOCS = os.path.join(REPO, "docs", "benchmarks.md")
PLOTS_DIR = os.path.join(REPO, "docs", "img", "bench")
PLOTS = ["tps.png", "latency.png", "tail.png", "bulk.png", "scaling.png"]

# (marker, the part's file stem): the blocks of docs/benchmarks.md.
PARTS = [("bench", "bench"), ("bench-fastpath", "fast_path"), ("bench-scaling", "scaling"),
         ("bench-remote", "remote"), ("bench-citus", "citus"), ("bench-bulk", "bulk"),
         ("bench-release", "release_delta")]
# Plots that go inside a part's block, below its table: {marker: (file, alt
# text)}. Inside, so that the page never shows a plot before a run that
# made it was published (mkdocs's strict build fails on a missing image).
BLOCK_PLOTS = {"bench-scaling": ("scaling.png", "IDs per second as clients are added")}
SUMMARY = "bench-summary"

# The summary's rows: (label, bench.py's marginal-cost label or None, its
# INSERT label, bulk.py's label). tests/integration/test_bench_blocks.py
# holds the same map, to check the README's cells against the docs' tables.
ROWS = [
    ("segment_nextval(tag), step 1,000", "segment_nextval, step 1,000", "segment_nextval (step 1,000)",
     "segment_nextval (step 1,000)"),
    ("snowflake_nextval()", "snowflake_nextval()", "snowflake_nextval()", "snowflake_nextval()"),
    (PGEDGE_SNOWFLAKE, PGEDGE_SNOWFLAKE, PGEDGE_SNOWFLAKE, PGEDGE_SNOWFLAKE),
    ("bigserial (nextval, CACHE 1)", REFERENCE, "bigserial", BASELINE),
    ("identity", None, "identity", "identity"),
    (UUIDV4, UUIDV4, UUIDV4, UUIDV4),
    (UUIDV7, UUIDV7, UUIDV7, UUIDV7),
]

# The summary's line on pgEdge's snowflake, measured or not (bench.sh
# builds it only from a source it is given).
PGEDGE_NOT_MEASURED = (f"pgEdge's snowflake: not measured — this run was not given its source "
                       f"({PGEDGE_SNOWFLAKE_SOURCE}), which the benchmark machines cannot download: pass "
                       "--pgedge-snowflake DIR with its source to measure it.")


def pgedge_line(pgedge):
    if not pgedge:
        return PGEDGE_NOT_MEASURED
    return (f"pgEdge's snowflake: version {pgedge_snowflake_version(pgedge)} of {PGEDGE_SNOWFLAKE_SOURCE}, built "
            f"from source for this run (`--pgedge-snowflake DIR`), `snowflake.node = {PGEDGE_SNOWFLAKE_NODE}`: "
            f"the row {PGEDGE_SNOWFLAKE}.")


def fail(message):
    raise SystemExit(f"publish.py: {message}")


def load(out, stem):
    """(results, table) of one part, or None when its files are not there."""
    json_path, md_path = (os.path.join(out, f"{stem}.{ext}") for ext in ("json", "md"))
    if not (os.path.exists(json_path) and os.path.exists(md_path)):
        return None
    with open(json_path) as f:
        results = json.load(f)
    with open(md_path) as f:
        return results, f.read()


def run_header(results):
    return header(results["machine"], results["command"], results.get("mode", "full"))


def check_one_run(parts):
    """Every part's header is the first part's, and the run is the one
    bench.sh started (its PG_IDGEN_BENCH_STARTED and _COMMIT, when set):
    results left in the directory by an earlier run fail here."""
    first_stem, (first, _) = next(iter(parts.items()))
    expected = run_header(first)
    started, commit = os.environ.get("PG_IDGEN_BENCH_STARTED"), os.environ.get("PG_IDGEN_BENCH_COMMIT")
    for stem, (results, table) in parts.items():
        m = results["machine"]
        if started and (m["date"], m["commit"]) != (started, commit):
            fail(f"{stem}.json is of the run at {m['date']}, commit {m['commit']}, not of this one "
                 f"({started}, commit {commit})")
        if run_header(results) != expected:
            fail(f"{stem} and {first_stem} are not of one run:\n  {run_header(results)}\n  {expected}")
        if table.splitlines()[0] != expected:
            fail(f"{stem}.md does not start with the run's header:\n  {table.splitlines()[0]}\n  {expected}")


def not_measured_release(bench, reason):
    return (run_header(bench) + "\n\n**This tree against the release before it** (`tests/bench/release_delta.py`): "
            f"not measured in this run — {reason}.\n")


def summary(bench, bulk):
    """The README's block: one row per generator, every cell as the docs'
    tables print it."""
    marginal, inserts, bulk_ns = bench["marginal_ns"], bench["insert"], bulk["bulk_ns"]
    lines = [
        run_header(bench),
        "",
        "| generator | ns per ID, one backend | × cheaper than nextval CACHE 1 | INSERT TPS, 8 clients "
        "| TPS vs bigserial | bulk INSERT ... SELECT, ns per row | time vs bigserial |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    measured = {UUIDV7: UUIDV7 in inserts, PGEDGE_SNOWFLAKE: bool(bench.get("pgedge_snowflake"))}
    for label, marginal_label, insert_label, bulk_label in ROWS:
        if not measured.get(label, True):
            continue        # uuidv7() on a server without it; pgEdge's snowflake without its source
        for where, found in [("bench.json's marginal costs", marginal_label is None or marginal_label in marginal),
                             ("bench.json's INSERT runs", insert_label in inserts),
                             ("bulk.json's loads", bulk_label in bulk_ns)]:
            if not found:
                fail(f"{where} have no {label}")
        cells = marginal_cells(marginal, marginal_label) if marginal_label else ("—", "—")
        cells += insert_cells(inserts, insert_label) + bulk_cells(bulk_ns, bulk_label)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"ns per ID: the call's cost over a bare `SELECT count(*) FROM generate_series(1, N)` in one backend, "
        f"N = {bench['n']:,} (identity has no call of its own: it draws from a sequence, as bigserial does). "
        f"INSERT TPS: pgbench, one row per INSERT, `synchronous_commit = off`; above 1× bigserial is faster. "
        f"Bulk: {bulk['rows']:,} rows in one `INSERT ... SELECT`, time per row; below 1× bigserial is faster. "
        "Medians of interleaved rounds; spreads, latencies and the method: "
        "[docs/benchmarks.md](docs/benchmarks.md).",
        "",
    ]
    if UUIDV7 not in inserts:
        lines += [f"uuidv7(): not measured — {bench['machine']['postgres'].split(' (')[0]} has no built-in "
                  "uuidv7() (PostgreSQL 18 and later have).", ""]
    lines.append(pgedge_line(bench.get("pgedge_snowflake")))
    return "\n".join(lines) + "\n"


def replace_block(text, marker, block, path):
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        fail(f"{os.path.relpath(path, REPO)} has no single {start} ... {end} pair: add the markers where "
             "the table belongs")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + start + "\n" + block + end + tail


def write(blocks, summary_block, out):
    """Checks every marker first; writes only when all are there."""
    if not os.path.exists(DOCS):
        fail("docs/benchmarks.md does not exist")
    with open(DOCS) as f:
        docs = f.read()
    with open(README) as f:
        readme = f.read()
    for marker, block in blocks.items():
        docs = replace_block(docs, marker, block, DOCS)
    readme = replace_block(readme, SUMMARY, summary_block, README)
    missing = [name for name in PLOTS if not os.path.exists(os.path.join(out, name))]
    if missing:
        fail(f"the plots {', '.join(missing)} are not in {out}")
    os.makedirs(PLOTS_DIR, exist_ok=True)
    for name in PLOTS:
        if os.path.abspath(os.path.join(out, name)) != os.path.join(PLOTS_DIR, name):
            shutil.copyfile(os.path.join(out, name), os.path.join(PLOTS_DIR, name))
    with open(DOCS, "w") as f:
        f.write(docs)
    with open(README, "w") as f:
        f.write(readme)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the run's results (bench.sh's --out)")
    parser.add_argument("--write", action="store_true", help="put the run into docs/benchmarks.md and README.md")
    parser.add_argument("--no-release", metavar="REASON", default=None,
                        help="the release comparison was not part of this run, and why")
    args = parser.parse_args()

    parts = {}
    for marker, stem in PARTS:
        if stem == "release_delta" and args.no_release:
            continue
        loaded = load(args.out, stem)
        if loaded is None:
            fail(f"{stem}.json or {stem}.md is missing in {args.out}: publish needs every part of one run")
        parts[stem] = loaded
    check_one_run(parts)
    bench, bulk = parts["bench"][0], parts["bulk"][0]
    # The parts that measure pgEdge's snowflake measured the same build, or
    # all did without it.
    for stem in ("scaling", "bulk"):
        other = parts[stem][0]
        if bench.get("pgedge_snowflake") != other.get("pgedge_snowflake"):
            fail(f"bench and {stem} did not measure the same pgEdge snowflake: {bench.get('pgedge_snowflake')} "
                 f"and {other.get('pgedge_snowflake')}")
    blocks = {marker: parts[stem][1] for marker, stem in PARTS if stem in parts}
    for marker, (name, alt) in BLOCK_PLOTS.items():
        blocks[marker] += f"\n![{alt}](img/bench/{name})\n"
    if args.no_release:
        blocks["bench-release"] = not_measured_release(bench, args.no_release)
    summary_block = summary(bench, bulk)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(summary_block)
    print(summary_block)
    if args.write:
        if bench.get("mode") != "full":
            fail("only a full run goes into the docs; these results are from a quick run")
        write(blocks, summary_block, args.out)
        print(f"publish.py: wrote {len(blocks)} blocks into docs/benchmarks.md, the summary into README.md, "
              f"the plots into docs/img/bench/")
    else:
        print(f"publish.py: the run's summary is {os.path.join(args.out, 'summary.md')}; docs not written")


if __name__ == "__main__":
    sys.exit(main())
