"""The benchmark's numbers in the docs come from one run, and none is typed
by hand. No server: this reads README.md and docs/benchmarks.md.

- Every block between <!-- bench...:start --> and <!-- bench...:end --> (in
  either file) starts with the header the benchmark writes: "Measured <UTC
  start time> at commit `<commit>` with `bash tests/bench.sh ...` (full mode):
  <machine and versions>."
- All blocks carry the same header: one start time, one commit, one command,
  one machine — one run of `bash tests/bench.sh --update-docs`, which writes
  them all (tests/bench/publish.py).
- docs/benchmarks.md holds every block such a run writes, README.md the
  summary.
- Every number of the README's summary equals the same cell of
  docs/benchmarks.md's tables: ns per ID and × nextval CACHE 1 from the
  marginal-cost table, INSERT TPS at 8 clients and × bigserial from the
  INSERT table, bulk INSERT ... SELECT ns per row and × bigserial from the
  bulk table. A hand edit of either side fails.
- pgEdge's snowflake: either its row (measured: bench.sh --pgedge-snowflake
  DIR), checked like the others, and a line naming its version; or no row
  and a line saying it was not measured.

Skipped only while docs/benchmarks.md does not exist.
"""

import os
import re

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
README = os.path.join(REPO, "README.md")
DOCS = os.path.join(REPO, "docs", "benchmarks.md")

DOCS_BLOCKS = {"bench", "bench-fastpath", "bench-scaling", "bench-remote", "bench-citus", "bench-bulk",
               "bench-release"}
SUMMARY = "bench-summary"

HEADER = re.compile(
    r"Measured (?P<date>\d{4}-\d\d-\d\d \d\d:\d\d UTC) at commit `(?P<commit>[0-9a-f]{7,40})` "
    r"with `(?P<command>bash tests/bench\.sh[^`]*)` \((?P<mode>\w+) mode\): (?P<machine>.+)")

# The summary's rows: its label -> (the marginal-cost table's label, or None
# where there is no call to measure alone; the INSERT table's; the bulk
# table's). tests/bench/publish.py writes from the same map.
SUMMARY_ROWS = {
    "segment_nextval(tag), step 1,000": ("segment_nextval, step 1,000", "segment_nextval (step 1,000)",
                                         "segment_nextval (step 1,000)"),
    "snowflake_nextval()": ("snowflake_nextval()", "snowflake_nextval()", "snowflake_nextval()"),
    "pgEdge snowflake (snowflake.nextval())": ("pgEdge snowflake (snowflake.nextval())",) * 3,
    "bigserial (nextval, CACHE 1)": ("nextval, CACHE 1", "bigserial", "bigserial"),
    "identity": (None, "identity", "identity"),
    "UUIDv4 (gen_random_uuid())": ("UUIDv4 (gen_random_uuid())",) * 3,
    "UUIDv7 (uuidv7())": ("UUIDv7 (uuidv7())",) * 3,
}
UUIDV7 = "UUIDv7 (uuidv7())"
PGEDGE = "pgEdge snowflake (snowflake.nextval())"


@pytest.fixture(autouse=True)
def docs_exist():
    if not os.path.exists(DOCS):
        pytest.skip("docs/benchmarks.md does not exist yet: nothing to check the README's summary against")


def blocks(path):
    """[(marker, text)] of every bench block in the file, in order; a start
    without its end fails."""
    text = open(path).read()
    found = []
    for marker in re.findall(r"<!-- (bench[\w-]*):start -->", text):
        start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
        assert end in text.split(start, 1)[1], f"{os.path.relpath(path, REPO)}: {start} has no {end}"
        found.append((marker, text.split(start, 1)[1].split(end, 1)[0].strip("\n")))
    return found


def all_blocks():
    return [(os.path.relpath(path, REPO), marker, text) for path in (README, DOCS) for marker, text in blocks(path)]


def block(path, marker):
    matches = [text for m, text in blocks(path) if m == marker]
    assert len(matches) == 1, f"{os.path.relpath(path, REPO)} has {len(matches)} <!-- {marker}:start --> blocks"
    return matches[0]


def tables(text):
    """Every Markdown table in the text: [(header cells, [row cells])]."""
    found, current = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if current is None:
            current = (cells, [])
            found.append(current)
        elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
            current[1].append(cells)
    return found


def table(text, first_columns, where):
    """The one table whose header starts with `first_columns`, as
    (header, {row label: cells})."""
    matches = [(h, rows) for h, rows in tables(text) if h[:len(first_columns)] == first_columns]
    assert len(matches) == 1, f"{where}: no single table headed {' | '.join(first_columns)}"
    head, rows = matches[0]
    return head, {row[0]: row for row in rows}


def test_every_block_starts_with_the_runs_header():
    found = all_blocks()
    assert found, "no <!-- bench...:start --> block in README.md or docs/benchmarks.md"
    for path, marker, text in found:
        first = text.splitlines()[0] if text else ""
        match = HEADER.fullmatch(first)
        assert match, f"{path}, {marker}: the first line is not the run's header " \
                      f"(\"Measured ... at commit `...` with `...` (full mode): ...\"): {first!r}"
        assert match["mode"] == "full", f"{path}, {marker}: a {match['mode']} run's numbers in the docs"


def test_all_blocks_come_from_one_run():
    headers = {}
    for path, marker, text in all_blocks():
        match = HEADER.fullmatch(text.splitlines()[0] if text else "")
        if match:
            headers[f"{path}: {marker}"] = match
    assert headers
    for field in ("commit", "date", "command", "machine"):
        seen = {}
        for where, match in headers.items():
            seen.setdefault(match[field], []).append(where)
        assert len(seen) == 1, f"the blocks name more than one {field}: " + "; ".join(
            f"{value!r} in {', '.join(wheres)}" for value, wheres in seen.items())


def test_the_docs_hold_every_block_of_a_run():
    in_docs = [marker for marker, _ in blocks(DOCS)]
    missing = DOCS_BLOCKS - set(in_docs)
    assert not missing, f"docs/benchmarks.md lacks the blocks {sorted(missing)}"
    assert SUMMARY in [marker for marker, _ in blocks(README)], \
        f"README.md has no <!-- {SUMMARY}:start --> block"


def test_the_readme_summary_repeats_the_docs_tables():
    summary = block(README, SUMMARY)
    bench, bulk = block(DOCS, "bench"), block(DOCS, "bench-bulk")
    _, marginal = table(bench, ["generator", "ns per ID (median)"], "docs/benchmarks.md, bench")
    insert_head, inserts = table(bench, ["generator", "TPS, 1 client"], "docs/benchmarks.md, bench")
    bulk_head, loads = table(bulk, ["key", "INSERT ... SELECT, ns per row"], "docs/benchmarks.md, bench-bulk")
    _, rows = table(summary, ["generator", "ns per ID, one backend"], "README.md, bench-summary")
    tps, tps_ratio = insert_head.index("TPS, 8 clients"), insert_head.index("TPS vs bigserial at 8")
    load_ns = bulk_head.index("INSERT ... SELECT, ns per row")
    load_ratio = bulk_head.index("× bigserial", load_ns)

    unknown = set(rows) - set(SUMMARY_ROWS)
    assert not unknown, f"README.md's summary has rows this test cannot check: {sorted(unknown)}"
    # The optional competitors: a row where the run measured them.
    expected = set(SUMMARY_ROWS) - {label for label in (UUIDV7, PGEDGE) if label not in inserts}
    assert set(rows) == expected, f"README.md's summary rows {sorted(rows)}, not {sorted(expected)}"
    if UUIDV7 not in inserts:
        assert "uuidv7(): not measured" in summary, "the summary does not say uuidv7() was not measured"
    if PGEDGE in inserts:
        assert re.search(r"pgEdge's snowflake: version \S+", summary), \
            "the summary has pgEdge's snowflake's row but does not name the version measured"
        assert PGEDGE in loads and PGEDGE in marginal, \
            "docs/benchmarks.md has pgEdge's snowflake in its INSERT table but not in every table"
    else:
        assert "pgEdge's snowflake: not measured" in summary, \
            "the summary does not say what became of pgEdge's snowflake"

    for label, (marginal_label, insert_label, bulk_label) in SUMMARY_ROWS.items():
        if label not in rows:
            continue
        row = rows[label]
        assert len(row) == 7, f"README.md's summary, {label}: {len(row)} cells, not 7"
        for name, docs_table, docs_label in [("marginal-cost", marginal, marginal_label),
                                             ("INSERT", inserts, insert_label), ("bulk", loads, bulk_label)]:
            assert docs_label is None or docs_label in docs_table, \
                f"docs/benchmarks.md's {name} table has no row {docs_label!r} for the summary's {label!r}"
        want = (
            ([marginal[marginal_label][1], marginal[marginal_label][3]] if marginal_label else ["—", "—"])
            + [inserts[insert_label][tps], inserts[insert_label][tps_ratio]]
            + [loads[bulk_label][load_ns], loads[bulk_label][load_ratio]]
        )
        columns = ["ns per ID", "× nextval CACHE 1", "INSERT TPS at 8 clients", "× bigserial (TPS)",
                   "bulk INSERT ... SELECT ns per row", "× bigserial (bulk)"]
        for column, readme_cell, docs_cell in zip(columns, row[1:], want):
            assert readme_cell == docs_cell, \
                f"{label}, {column}: README.md's summary says {readme_cell}, docs/benchmarks.md {docs_cell}"
