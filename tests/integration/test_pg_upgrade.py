"""pg_upgrade to the next major version continues above every ID the old
cluster issued, with no manual step: the snowflake high-water mark is a row
of snowflake_high_water, whose files pg_upgrade carries (the state file in
the old data directory stays behind), and id_segment carries the segment
ranges.

The old side's binaries come from PG_IDGEN_UPGRADE_FROM (a bin directory
with pg_idgen installed); tests/test.sh sets it for 15 -> 16 and 17 -> 18,
once the older version's build is installed."""

import os
import subprocess
import tempfile

import pytest

from cluster import PG_BIN
from helpers import BURST_LAYOUT, assert_unique

OLD_BIN = os.environ.get("PG_IDGEN_UPGRADE_FROM")

# Bursts put snowflake time well ahead of the clock (helpers.BURST_LAYOUT).
NARROW = BURST_LAYOUT


@pytest.mark.skipif(not OLD_BIN, reason="PG_IDGEN_UPGRADE_FROM names no older PostgreSQL")
def test_pg_upgrade_continues_above_every_id_of_the_old_cluster(make_cluster):
    new = make_cluster(conf=NARROW)
    # PostgreSQL 18's initdb turns data checksums on; pg_upgrade needs both
    # sides alike.
    control = subprocess.run([f"{PG_BIN}/pg_controldata", new.data], capture_output=True, text=True,
                             check=True).stdout
    checksums = "Data page checksum version:           0" not in control
    old = make_cluster(conf=NARROW, pg_bin=OLD_BIN, initdb_args=["--data-checksums"] if checksums else [])
    old.start()
    old.sql("CREATE EXTENSION pg_idgen")
    old.sql("CREATE TABLE events (id bigint PRIMARY KEY)")
    old.sql("SELECT segment_create('orders', step => 100)")
    old.sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'))")
    with old.connect() as conn:
        for _ in range(2):
            conn.execute("INSERT INTO events SELECT snowflake_nextval() FROM generate_series(1, 300000)")
            conn.execute("INSERT INTO orders SELECT FROM generate_series(1, 30000)")
        lead = conn.execute("SELECT lead_ms FROM snowflake_status WHERE generator = 'default'").fetchone()[0]
    assert lead > 5_000, "the bursts did not put time ahead of the clock"
    old.stop("fast")
    work = tempfile.mkdtemp(prefix="pg_idgen-upgrade.")
    os.chown(work, *_postgres_ids())
    upgrade = subprocess.run(
        ["runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_upgrade", "-b", OLD_BIN, "-B", PG_BIN,
         "-d", old.data, "-D", new.data, "-U", "postgres", f"--socketdir={work}"],
        cwd=work, capture_output=True, text=True)
    assert upgrade.returncode == 0, upgrade.stdout[-3000:] + upgrade.stderr[-2000:]
    assert not os.path.exists(os.path.join(new.data, "pg_idgen_snowflake.state"))
    new.start()
    before_events = [r[0] for r in new.sql("SELECT id FROM events")]
    before_orders = [r[0] for r in new.sql("SELECT id FROM orders")]
    assert len(before_events) == 600_000 and len(before_orders) == 60_000
    with new.connect() as conn:
        # The primary keys are the first judge: a repeat fails the INSERT.
        conn.execute("CREATE TABLE new_events AS SELECT snowflake_nextval() AS id FROM generate_series(1, 50000)")
        conn.execute("INSERT INTO events SELECT id FROM new_events")
        conn.execute("CREATE TABLE new_orders AS SELECT segment_nextval('orders') AS id FROM generate_series(1, 2000)")
        conn.execute("INSERT INTO orders SELECT id FROM new_orders")
    new_events = [r[0] for r in new.sql("SELECT id FROM new_events")]
    new_orders = [r[0] for r in new.sql("SELECT id FROM new_orders")]
    assert_unique(before_events + new_events)
    assert min(new_events) > max(before_events), "a snowflake ID below the old cluster's"
    assert min(new_orders) > max(before_orders), "a segment ID below the old cluster's"
    subprocess.run(["rm", "-rf", work], check=False)


def _postgres_ids():
    import pwd
    entry = pwd.getpwnam("postgres")
    return entry.pw_uid, entry.pw_gid
