"""The SQL of the README and of the docs site runs as written.

Every ```sql block of README.md and docs/*.md runs, in page order, through
psql in one session per page, in the database `postgres` of a fresh
cluster of the page's own, as a new user's first psql session would (the
suite's settings: `shared_preload_libraries = 'pg_idgen'`,
`pg_idgen.machine_id = 1`, postgres_fdw available; `CREATE EXTENSION
pg_idgen` not yet run, so a page shows it). A block may be marked on the line just before it:

    <!-- snippet: error 2BP01 -->       it must fail with that SQLSTATE
    <!-- snippet: not run (REASON) -->  skipped; the reason is required

A block with no mark must succeed; a marked error block must fail with its
SQLSTATE (a success fails the test too). psql runs the blocks exactly as a
user pasting them would: one statement at a time, meta-commands included.
No server output is compared: what is asserted is that each block runs, or
fails as the page says it does."""

import glob
import os
import re
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PAGES = ["README.md"] + sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[^\s`]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.M | re.S)
MARK = re.compile(r"<!--\s*snippet:\s*(?P<what>error\s+(?P<sqlstate>[0-9A-Z]{5})|not run\s*\((?P<why>[^)]+)\))\s*-->\s*$")
ANY_MARK = re.compile(r"<!--\s*snippet:")


# Fences the runner would not see as SQL: another spelling of the
# language, a tilde fence, a fence in a block quote. Refused, so that SQL
# cannot hide from the test by its fence.
HIDDEN_SQL = re.compile(r"^[ \t>]*(```+|~~~+)[ \t]*(?!sql\b)(?i:sql|pgsql|psql|postgres\w*|plpgsql)\b"
                        r"|^[ \t]*~~~|^[ \t]*>[ \t]*```|^[ \t]*````", re.M)


def statements_in(sql):
    """How many statements psql would send for `sql`: semicolons outside
    quotes, dollar quotes and comments, plus a last one not ended by one."""
    count, i, n, pending = 0, 0, len(sql), False
    while i < n:
        c = sql[i]
        if sql.startswith("--", i):
            i = sql.find("\n", i)
            i = n if i < 0 else i
            continue
        if sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if c in "'\"":
            end = i + 1
            while end < n and not (sql[end] == c and not sql.startswith(c * 2, end)):
                end += 2 if sql.startswith(c * 2, end) else 1
            i, pending = end + 1, True
            continue
        m = re.match(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$", sql[i:])
        if m:
            end = sql.find(m.group(0), i + len(m.group(0)))
            i, pending = (n if end < 0 else end + len(m.group(0))), True
            continue
        if c == ";":
            count, pending = count + 1, False
        elif not c.isspace():
            pending = True
        i += 1
    return count + (1 if pending else 0)


def test_statements_are_counted_as_psql_splits_them():
    assert statements_in("SELECT 1;") == 1
    assert statements_in("SELECT 'a;b'; -- x;y\nSELECT $f$ ; $f$;") == 2
    assert statements_in("SELECT 1; SELECT 1/0;") == 2
    assert statements_in("SELECT \"a;\" /* ; */ FROM t") == 1


class Block:
    def __init__(self, page, line, body, sqlstate=None, skip_reason=None):
        self.page, self.line, self.body = page, line, body
        self.sqlstate, self.skip_reason = sqlstate, skip_reason

    def __repr__(self):
        return f"{self.page}:{self.line}"


def blocks_of(page):
    """The page's ```sql blocks with their marks; refuses a malformed or
    stray mark, so a typo cannot silently skip a block."""
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        text = f.read()
    hidden = HIDDEN_SQL.search(text)
    if hidden:
        line = text.count("\n", 0, hidden.start()) + 1
        raise AssertionError(f"{page}:{line}: SQL in a fence the test does not run ({hidden.group(0).strip()}): "
                             "fence it as ```sql at the start of a line or list item")
    blocks, marks_used = [], set()
    for m in FENCE.finditer(text):
        if m.group("lang") != "sql":
            continue
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        body = "\n".join(l[len(m.group("indent")):] for l in m.group("body").splitlines())
        mark = MARK.search(before)
        if ANY_MARK.search(before) and not mark:
            raise AssertionError(f"{page}:{line - 1}: a snippet mark that is neither "
                                 "'error SQLSTATE' nor 'not run (reason)': {before}")
        if mark:
            marks_used.add(line - 1)
        if mark and mark.group("sqlstate") and statements_in(body) != 1:
            raise AssertionError(f"{page}:{line}: a block marked to fail must hold one statement, "
                                 f"so that the error checked is the one meant; it holds {statements_in(body)}")
        blocks.append(Block(page, line, body,
                            sqlstate=mark and mark.group("sqlstate"),
                            skip_reason=mark and mark.group("why") and mark.group("why").strip()))
    for n, l in enumerate(text.splitlines(), 1):
        if ANY_MARK.search(l) and n + 1 not in {b.line for b in blocks} and n not in marks_used:
            raise AssertionError(f"{page}:{n}: a snippet mark that is not on the line just before a ```sql block")
    return blocks


def script_for(blocks):
    """A psql script that runs the blocks in order and, after each, prints
    a marker with the block's number and the SQLSTATE of its last
    statement (psql sets LAST_ERROR_SQLSTATE and SQLSTATE)."""
    parts = ["\\set ON_ERROR_STOP 1", "\\set VERBOSITY verbose", "\\pset pager off"]
    for n, b in enumerate(blocks):
        parts.append(f"\\echo '@@start {n}'")
        if b.sqlstate:
            parts += ["\\set ON_ERROR_STOP 0", b.body.rstrip(), ";" if not b.body.rstrip().endswith(";") else "",
                      f"\\echo '@@error {n}' :SQLSTATE", "\\set ON_ERROR_STOP 1"]
        else:
            parts += [b.body.rstrip(), f"\\echo '@@done {n}'"]
    return "\n".join(parts) + "\n"


def test_every_page_is_found_and_every_mark_is_well_formed():
    assert "docs/index.md" in PAGES, "no docs site: docs/index.md is missing"
    total = skipped = 0
    for page in PAGES:
        for b in blocks_of(page):
            total += 1
            if b.skip_reason is not None:
                skipped += 1
                assert len(b.skip_reason) >= 10, f"{b}: say why the block is not run"
    assert total >= 30, f"only {total} SQL blocks found: is the fence parser broken?"
    # Most of what the docs show must be SQL a user can paste.
    assert skipped * 3 <= total, f"{skipped} of {total} SQL blocks are not run"


@pytest.mark.parametrize("page", [p for p in PAGES if any(b.skip_reason is None for b in blocks_of(p))])
def test_the_sql_of_the_page_runs_as_written(page, make_cluster):
    blocks = [b for b in blocks_of(page) if b.skip_reason is None]
    c = make_cluster(conf=("pg_idgen.machine_id = 1",))
    c.start()
    result = subprocess.run(
        [f"{c.pg_bin}/psql", "-X", "-h", c.dir, "-p", str(c.port), "-U", "postgres", "-d", "postgres", "-f", "-"],
        input=script_for(blocks), capture_output=True, text=True, timeout=600)
    out = result.stdout
    started = [int(n) for n in re.findall(r"^@@start (\d+)$", out, re.M)]
    done = {int(n) for n in re.findall(r"^@@done (\d+)$", out, re.M)}
    errors = {int(n): s for n, s in re.findall(r"^@@error (\d+) (\S+)$", out, re.M)}
    if result.returncode != 0:
        failed = blocks[started[-1]] if started else blocks[0]
        pytest.fail(f"{failed} failed as written:\n{failed.body}\n--- psql said:\n{result.stderr[-3000:]}")
    for n, b in enumerate(blocks):
        if b.sqlstate:
            assert errors.get(n) == b.sqlstate, \
                f"{b} should fail with {b.sqlstate}, got {errors.get(n)!r}" \
                f"{' (it succeeded)' if errors.get(n) == '00000' else ''}\n{b.body}"
        else:
            assert n in done, f"{b} did not run:\n{out[-2000:]}\n{result.stderr[-2000:]}"
