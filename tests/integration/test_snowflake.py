"""Snowflake IDs against a real server: sessions racing, bursts beyond the
layout's rate, restarts with the clock set back (faketime on the server
process), crashes, bad settings and standbys."""

import glob
import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from psycopg import errors

from conftest import assert_increasing, assert_unique

LIBFAKETIME = (glob.glob("/usr/lib/*/faketime/libfaketime.so.1") or [None])[0]


def faketime_env(offset_seconds):
    """The server's clock shifted by `offset_seconds`, through libfaketime."""
    assert LIBFAKETIME, "faketime is not installed (tests/setup.sh installs it)"
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": f"{offset_seconds:+d}", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def draw(cluster, n, function="snowflake_nextval", dbname="postgres"):
    with cluster.connect(dbname) as conn:
        return [r[0] for r in conn.execute(f"SELECT {function}() FROM generate_series(1, {n})")]


@pytest.fixture
def snowflake_cluster(make_cluster):
    c = make_cluster(conf=["pg_idgen.machine_id = 7"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    return c


def test_four_sessions_of_a_million_ids_never_collide(snowflake_cluster):
    with ThreadPoolExecutor(4) as pool:
        sessions = list(pool.map(lambda _: draw(snowflake_cluster, 1_000_000), range(4)))
    for ids in sessions:
        assert len(ids) == 1_000_000
        assert_increasing(ids)
    every = [i for ids in sessions for i in ids]
    assert_unique(every)
    # Every ID carries this server's machine id.
    machines = snowflake_cluster.sql(
        "SELECT DISTINCT (snowflake_parse(id)).machine_id FROM unnest(%s::bigint[]) AS id", (every[::997],))
    assert machines == [(7,)]
    (issued,), = snowflake_cluster.sql("SELECT ids_issued FROM snowflake_status WHERE generator = 'default'")
    assert issued >= 4_000_000


def test_a_burst_beyond_4096_per_ms_never_repeats_and_keeps_its_lead_bounded(make_cluster):
    c = make_cluster(conf=["pg_idgen.snowflake_max_lead = '50ms'"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    # array_agg keeps the burst inside the server, faster than the layout's
    # 4,096 IDs per ms (streaming rows to a client would not be).
    (ids,), = c.sql("SELECT array_agg(snowflake_nextval()) FROM generate_series(1, 600000)")
    assert len(ids) == 600_000
    assert_unique(ids)
    assert_increasing(ids)
    per_ms = c.sql("SELECT max(n) FROM (SELECT count(*) AS n FROM unnest(%s::bigint[]) AS id "
                   "GROUP BY (snowflake_parse(id)).ts) m", (ids,))
    assert per_ms == [(4096,)], "the burst should have filled whole milliseconds"
    (lead_waits, lead_ms), = c.sql("SELECT lead_waits, lead_ms FROM snowflake_status WHERE generator = 'default'")
    # 600,000 IDs need 147 ms of time: far more than the 50 ms of lead
    # allowed, so calls must have waited for the clock.
    assert lead_waits > 0
    assert lead_ms <= 50


def test_a_restart_with_the_clock_an_hour_back_issues_only_larger_ids(make_cluster):
    c = make_cluster(conf=["pg_idgen.snowflake_max_lead = '2h'"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    before = draw(c, 50_000) + draw(c, 1000, "snowflake_js_nextval")
    before_main, before_js = max(before[:50_000]), max(before[50_000:])
    c.restart(extra_env=faketime_env(-3600))
    (server_clock,), = c.sql("SELECT extract(epoch FROM clock_timestamp())::float8")
    assert abs(server_clock - time.time() + 3600) < 60, "faketime did not set the server's clock back"
    after = draw(c, 50_000)
    after_js = draw(c, 1000, "snowflake_js_nextval")
    assert min(after) > before_main, "an ID at or below one issued before the restart"
    assert min(after_js) > before_js
    assert_increasing(after)
    (lead_ms, restarted), = c.sql(
        "SELECT lead_ms, restarted_above IS NOT NULL FROM snowflake_status WHERE generator = 'default'")
    assert lead_ms > 3_000_000, "the server's clock should be an hour behind the IDs"
    assert restarted


def test_with_the_default_lead_an_hour_back_fails_clearly_instead(make_cluster):
    c = make_cluster(conf=["pg_idgen.snowflake_max_wait = '300ms'"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    before = draw(c, 1000)
    c.restart(extra_env=faketime_env(-3600))
    with pytest.raises(errors.ObjectNotInPrerequisiteState) as caught:
        c.sql("SELECT snowflake_nextval()")
    assert "ahead of the wall clock, more than pg_idgen.snowflake_max_lead" in str(caught.value)
    assert "raise pg_idgen.snowflake_max_lead" in caught.value.diag.message_hint
    # Back on the right clock, IDs continue above the old ones.
    c.restart()
    assert min(draw(c, 1000)) > max(before)


def test_a_crash_never_repeats_a_snowflake_id(make_cluster):
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    received, stop, lock = [], threading.Event(), threading.Lock()

    def session():
        try:
            with c.connect() as conn:
                while not stop.is_set():
                    rows = conn.execute("SELECT snowflake_nextval() FROM generate_series(1, 5000)").fetchall()
                    with lock:
                        received.extend(r[0] for r in rows)
        except Exception:
            pass  # the server went away

    for _ in range(3):
        threads = [threading.Thread(target=session) for _ in range(3)]
        for t in threads:
            t.start()
        threading.Event().wait(0.7)
        c.stop("immediate")
        stop.set()
        for t in threads:
            t.join()
        stop.clear()
        # Restart with the clock a few seconds back, which a crash can
        # coincide with (NTP step after a reboot).
        c.start(extra_env=faketime_env(-3))
    received += draw(c, 10_000)
    assert len(received) > 50_000
    assert_unique(received)


@pytest.mark.parametrize("setting, named", [
    ("pg_idgen.snowflake_sequence_bits = 11", "pg_idgen.snowflake_time_bits"),
    ("pg_idgen.machine_id = 1024", "pg_idgen.machine_id"),
    ("pg_idgen.machine_id = 'db-primary'", "pg_idgen.machine_id"),
    ("pg_idgen.snowflake_epoch = 'yesterday'", "pg_idgen.snowflake_epoch"),
])
def test_bad_settings_stop_the_server_start_naming_the_setting(make_cluster, setting, named):
    c = make_cluster(conf=[setting])
    with pytest.raises(subprocess.CalledProcessError):
        c.start()
    log = c.log()
    assert f'invalid value for parameter "{named}"' in log, log[-2000:]


def test_the_machine_id_can_come_from_the_host_name(make_cluster):
    c = make_cluster(conf=["pg_idgen.machine_id = 'hostname'"])
    hostname = open("/proc/sys/kernel/hostname").read().strip()
    digits = len(hostname) - len(hostname.rstrip("0123456789"))
    if digits == 0:
        with pytest.raises(subprocess.CalledProcessError):
            c.start()
        assert "does not end in a number" in c.log()
    else:
        c.start()
        c.sql("CREATE EXTENSION pg_idgen")
        expected = int(hostname[-digits:])
        assert c.sql("SELECT machine_id FROM snowflake_status WHERE generator = 'default'") == [(expected,)]


def test_a_machine_id_too_large_for_javascript_refuses_only_the_javascript_ids(make_cluster):
    c = make_cluster(conf=["pg_idgen.machine_id = 300"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    assert c.sql("SELECT (snowflake_parse(snowflake_nextval())).machine_id") == [(300,)]
    with pytest.raises(errors.ObjectNotInPrerequisiteState) as caught:
        c.sql("SELECT snowflake_js_nextval()")
    assert "does not fit the JavaScript-safe layout" in str(caught.value)


def test_a_keeper_that_cannot_write_its_file_stops_ids_with_a_clear_error(make_cluster):
    c = make_cluster(conf=["pg_idgen.snowflake_max_wait = '300ms'"])
    # A directory where the keeper's temporary file must go: writes fail.
    os.mkdir(os.path.join(c.data, "pg_idgen_snowflake.state.tmp"))
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    with pytest.raises(errors.ObjectNotInPrerequisiteState) as caught:
        c.sql("SELECT snowflake_nextval()")
    assert "high-water mark was not written to disk" in str(caught.value)
    assert "pg_idgen_snowflake.state" in caught.value.diag.message_hint
    assert "could not write pg_idgen_snowflake.state" in c.log()


def test_a_layout_whose_time_has_run_out_is_refused(make_cluster):
    # 31 bits of milliseconds from 2025-01-01 end 24.8 days later.
    c = make_cluster(conf=["pg_idgen.snowflake_time_bits = 31", "pg_idgen.snowflake_machine_bits = 20"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    with pytest.raises(errors.SequenceGeneratorLimitExceeded) as caught:
        c.sql("SELECT snowflake_nextval()")
    assert "snowflake time is used up" in str(caught.value)
    assert "pg_idgen.snowflake_epoch" in caught.value.diag.message_hint
