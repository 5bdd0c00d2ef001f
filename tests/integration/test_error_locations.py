"""Every pg_idgen error names the line that raised it in its LOCATION (the
source file and line a client sees with VERBOSITY verbose, and the log with
log_error_verbosity = verbose), not the one place that builds reports."""

import os
import re

import psycopg
import pytest

REPO = os.path.join(os.path.dirname(__file__), "..", "..")

# (statement, SQLSTATE, the source file that raises it)
RAISED_AT = [
    ("SELECT segment_nextval('no_such_tag')", "42704", "src/segment/sql.rs"),
    ("SELECT segment_create('')", "22023", "src/segment/tag.rs"),
    ("SELECT segment_create('t', start => 0)", "22003", "src/segment/ddl.rs"),
    ("SELECT segment_drop('no_such_tag')", "42704", "src/segment/ddl.rs"),
    ("SELECT segment_create(NULL)", "22004", "src/segment/ddl.rs"),
    ("SELECT * FROM snowflake_parse(-1)", "22003", "src/snowflake/sql.rs"),
    ("SELECT snowflake_from_format('garbage')", "22P02", "src/snowflake/sql.rs"),
    ("SELECT idgen_base62_decode('!')", "22P02", "src/base62_sql.rs"),
]


@pytest.mark.parametrize("statement,sqlstate,source_file", RAISED_AT)
def test_an_error_names_the_line_that_raised_it(cluster, db, statement, sqlstate, source_file):
    with cluster.connect(db) as conn:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(statement)
    diag = caught.value.diag
    assert caught.value.sqlstate == sqlstate, caught.value
    # PostgreSQL keeps the file's last path component only.
    assert diag.source_file == os.path.basename(source_file), (statement, diag.source_file)
    with open(os.path.join(REPO, source_file)) as f:
        lines = f.read().splitlines()
    line = int(diag.source_line)
    # The reported line is the call that raises (or the function that does,
    # for required()), within the few lines a struct literal spans; a
    # raise_*() function is #[track_caller] and names its caller's line.
    near = "\n".join(lines[max(0, line - 1):line + 3])
    raises = re.search(r"\.raise\(\)|required\(|check_tag\(|\braise_\w+\(", near)
    assert raises, (
        f"{source_file}:{line} does not raise:\n{near}")
