"""Snowflake IDs against a real server: sessions racing, bursts beyond the
layout's rate, restarts with the clock set back (faketime on the server
process), crashes, bad settings and standbys."""

import os
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from psycopg import errors

from cluster import PG_BIN
from helpers import assert_increasing, assert_unique, draw_snowflakes, faketime_env, keeper_pids, wait_for

STATE = "pg_idgen_snowflake.state"
# Server log lines start with their SQLSTATE, so start-up errors can be
# asserted by code.
LOG_SQLSTATE = "log_line_prefix = '%e '"


@pytest.fixture
def snowflake_cluster(make_cluster):
    c = make_cluster(conf=["pg_idgen.machine_id = 7"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    return c


def test_four_sessions_of_a_million_ids_never_collide(snowflake_cluster):
    with ThreadPoolExecutor(4) as pool:
        sessions = list(pool.map(lambda _: draw_snowflakes(snowflake_cluster, 1_000_000), range(4)))
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


def test_a_burst_beyond_the_layouts_rate_never_repeats_and_keeps_its_lead_bounded(make_cluster):
    # One sequence bit: 2 IDs per ms. 8,000 IDs need 4 s of snowflake time;
    # a backend drawing them in one query outruns that by orders of
    # magnitude on any machine, so calls surely wait for the clock.
    c = make_cluster(conf=["pg_idgen.snowflake_max_lead = '50ms'", "pg_idgen.snowflake_time_bits = 41",
                           "pg_idgen.snowflake_machine_bits = 21", "pg_idgen.snowflake_sequence_bits = 1"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    (ids,), = c.sql("SELECT array_agg(snowflake_nextval()) FROM generate_series(1, 8000)")
    assert len(ids) == 8000
    assert_unique(ids)
    assert_increasing(ids)
    per_ms = c.sql("SELECT max(n) FROM (SELECT count(*) AS n FROM unnest(%s::bigint[]) AS id "
                   "GROUP BY (snowflake_parse(id)).ts) m", (ids,))
    assert per_ms == [(2,)], "no millisecond may hold more IDs than the sequence bits allow"
    (lead_waits, lead_ms), = c.sql("SELECT lead_waits, lead_ms FROM snowflake_status WHERE generator = 'default'")
    assert lead_waits > 0, "4 s of IDs with 50 ms of lead allowed: calls must have waited for the clock"
    assert lead_ms <= 50


def test_a_restart_with_the_clock_an_hour_back_issues_only_larger_ids(make_cluster):
    c = make_cluster(conf=["pg_idgen.snowflake_max_lead = '2h'"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    before = draw_snowflakes(c, 50_000) + draw_snowflakes(c, 1000, "snowflake_js_nextval")
    before_main, before_js = max(before[:50_000]), max(before[50_000:])
    c.restart(extra_env=faketime_env(-3600))
    (server_clock,), = c.sql("SELECT extract(epoch FROM clock_timestamp())::float8")
    assert abs(server_clock - time.time() + 3600) < 60, "faketime did not set the server's clock back"
    after = draw_snowflakes(c, 50_000)
    after_js = draw_snowflakes(c, 1000, "snowflake_js_nextval")
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
    before = draw_snowflakes(c, 1000)
    c.restart(extra_env=faketime_env(-3600))
    with pytest.raises(errors.ObjectNotInPrerequisiteState) as caught:
        c.sql("SELECT snowflake_nextval()")
    assert "ahead of the wall clock, more than pg_idgen.snowflake_max_lead" in str(caught.value)
    assert "raise pg_idgen.snowflake_max_lead" in caught.value.diag.message_hint
    # Back on the right clock, IDs continue above the old ones.
    c.restart()
    assert min(draw_snowflakes(c, 1000)) > max(before)


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

    for round_ in range(3):
        threads = [threading.Thread(target=session) for _ in range(3)]
        for t in threads:
            t.start()
        # Crash only once this round's sessions have received IDs, however
        # slow the machine.
        target = 20_000 * (round_ + 1)
        assert wait_for(lambda: len(received) >= target, timeout=120)
        c.stop("immediate")
        stop.set()
        for t in threads:
            t.join()
        stop.clear()
        # Restart with the clock a few seconds back, which a crash can
        # coincide with (NTP step after a reboot).
        c.start(extra_env=faketime_env(-3))
    received += draw_snowflakes(c, 10_000)
    assert len(received) >= 70_000
    assert_unique(received)


# Which value each setting refuses is a pure rule (config.rs's
# bad_settings_refuse_the_start_naming_the_setting covers six of them);
# here, once through each of the two paths a start takes: a setting's check
# hook (the machine id), and the layout's widths checked together.
@pytest.mark.parametrize("setting, named", [
    ("pg_idgen.snowflake_sequence_bits = 11", "pg_idgen.snowflake_time_bits"),
    ("pg_idgen.machine_id = 1024", "pg_idgen.machine_id"),
])
def test_bad_settings_stop_the_server_start_naming_the_setting(make_cluster, setting, named):
    c = make_cluster(conf=[setting, LOG_SQLSTATE])
    with pytest.raises(subprocess.CalledProcessError):
        c.start()
    log = c.log()
    assert f'22023 FATAL:  invalid value for parameter "{named}"' in log, log[-2000:]
    assert "HINT:" in log


def start_as_host(cluster, hostname):
    """Starts the server in a UTS namespace of its own (unshare) whose host
    name is `hostname`: both rules of 'hostname' run whatever the host."""
    return subprocess.run(
        ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec runuser -u postgres -- "$@"', hostname,
         f"{cluster.pg_bin}/pg_ctl", "-D", cluster.data, "-l", cluster.log_path, "-w", "-t", "60", "start"],
        capture_output=True, text=True)


@pytest.mark.parametrize("hostname, expected", [("pg-7", 7), ("db-primary", None)])
def test_the_machine_id_can_come_from_the_host_name(make_cluster, hostname, expected):
    c = make_cluster(conf=["pg_idgen.machine_id = 'hostname'"])
    started = start_as_host(c, hostname)
    if expected is None:
        assert started.returncode != 0
        assert "does not end in a number" in c.log()
    else:
        assert started.returncode == 0, c.log()[-2000:]
        c.sql("CREATE EXTENSION pg_idgen")
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
    with pytest.raises(errors.IoError) as caught:
        c.sql("SELECT snowflake_nextval()")
    assert caught.value.sqlstate == "58030"
    assert "the snowflake keeper cannot write pg_idgen_snowflake.state: Is a directory" in str(caught.value)
    assert "data directory" in caught.value.diag.message_hint
    assert "could not write pg_idgen_snowflake.state" in c.log()
    # The marks it commits meanwhile are its own: they never raise the
    # clock (which ran away by persist_ahead at every pass, so callers got
    # "ahead of the wall clock" instead of the cause). A slower machine
    # makes fewer passes, never a larger lead.
    time.sleep(1)
    (lead_ms,) = c.sql(
        "SELECT extract(epoch FROM wal_mark - now()) * 1000 FROM snowflake_status WHERE generator = 'default'"
    )[0]
    assert lead_ms < 2000 + 1000, f"the WAL mark ran {lead_ms} ms ahead while the file could not be written"
    with pytest.raises(errors.IoError):
        c.sql("SELECT snowflake_nextval()")


def test_a_layout_whose_time_has_run_out_is_refused(make_cluster):
    # 31 bits of milliseconds from 2025-01-01 end 24.8 days later.
    c = make_cluster(conf=["pg_idgen.snowflake_time_bits = 31", "pg_idgen.snowflake_machine_bits = 20"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    with pytest.raises(errors.SequenceGeneratorLimitExceeded) as caught:
        c.sql("SELECT snowflake_nextval()")
    assert "snowflake time of the default generator is used up: its 31 bits" in str(caught.value)
    assert "pg_idgen.snowflake_time_bits" in caught.value.diag.message_hint


# ---------------------------------------------------------------------------
# Never twice across damaged or changed state (issue 10). Each restart test
# sets the server's clock back, so that a start from the wall clock instead
# of the state file would repeat the IDs issued before.

def state_path(c):
    return os.path.join(c.data, STATE)


def write_state(c, text):
    with open(state_path(c), "w") as f:
        f.write(text)
    shutil.chown(state_path(c), "postgres", "postgres")


def draw_both(c):
    """IDs of both generators: (default IDs, JavaScript-safe IDs)."""
    return draw_snowflakes(c, 20_000), draw_snowflakes(c, 2000, "snowflake_js_nextval")


def assert_above(c, before):
    main, js = draw_both(c)
    assert min(main) > max(before[0]), "a default ID at or below one issued before the restart"
    assert min(js) > max(before[1]), "a JavaScript-safe ID at or below one issued before the restart"
    assert_increasing(main)


@pytest.fixture
def lenient_cluster(make_cluster):
    """A cluster whose IDs may run an hour ahead of its clock (so a start with
    the clock set back issues IDs instead of refusing), logging SQLSTATEs."""
    c = make_cluster(conf=["pg_idgen.snowflake_max_lead = '1h'", LOG_SQLSTATE])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    return c


def recover_as_documented(c):
    """The README's recovery ("Recovering the snowflake state file"): with
    the server stopped, move the damaged file aside and start; the keeper
    continues above the WAL-logged mark. No time is written by hand."""
    shutil.move(state_path(c), os.path.join(c.dir, "pg_idgen_snowflake.state.damaged"))


def damage_directory(c):
    os.remove(state_path(c))
    os.mkdir(state_path(c))


def damage_unreadable(c):
    os.chmod(state_path(c), 0)


@pytest.mark.parametrize("damage, sqlstate, problem", [
    (lambda c: write_state(c, ""), "XX001", "the file is empty"),
    (lambda c: write_state(c, "garbage"), "XX001", "it is not a pg_idgen snowflake state file"),
    (lambda c: write_state(c, "17500000"), "XX001", "it is not a pg_idgen snowflake state file (or it was cut short"),
    (damage_directory, "58030", "could not read it: Is a directory"),
    (damage_unreadable, "58030", "could not read it: Permission denied"),
    # A one-number mark before the epoch was never written by pg_idgen: it
    # would read as "no ID yet" (found by adversarial review: `echo 0`, or
    # the recovery step done in seconds instead of milliseconds).
    (lambda c: write_state(c, "0\n"), "XX001", "its time 0 is before pg_idgen.snowflake_epoch"),
    (lambda c: write_state(c, "1764500000\n"), "XX001",
     "its time 1764500000 is before pg_idgen.snowflake_epoch (1735689600000 ms since 1970), "
     "which pg_idgen never writes (a time in seconds instead of milliseconds?)"),
], ids=["empty", "garbage", "cut-short", "directory", "unreadable", "zero", "seconds"])
def test_a_damaged_state_file_stops_the_start_and_the_documented_recovery_repeats_nothing(
        lenient_cluster, damage, sqlstate, problem):
    c = lenient_cluster
    before = draw_both(c)
    c.stop()
    damage(c)
    with pytest.raises(subprocess.CalledProcessError):
        c.start(extra_env=faketime_env(-8))
    log = c.log()
    assert f'{sqlstate} FATAL:  pg_idgen cannot use the snowflake state file "pg_idgen_snowflake.state": {problem}' \
        in log, log[-3000:]
    assert "Recovering the snowflake state file" in log
    assert "Move the damaged file aside" in log and "date +%s" not in log
    # The recovery, then a start with the clock 8 s back (IDs up to the
    # clock would repeat): nothing repeats.
    recover_as_documented(c)
    c.start(extra_env=faketime_env(-8))
    assert_above(c, before)


def test_a_state_file_removed_under_a_running_server_is_written_again(lenient_cluster):
    c = lenient_cluster
    before = draw_both(c)
    os.remove(state_path(c))
    assert wait_for(lambda: os.path.exists(state_path(c)), timeout=30), "the keeper did not write the file again"
    c.stop("immediate")
    c.start(extra_env=faketime_env(-8))
    assert_above(c, before)


def test_without_a_state_file_a_start_is_a_first_start(make_cluster):
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    assert c.sql("SELECT restarted_above IS NULL FROM snowflake_status WHERE generator = 'default'") == [(True,)]
    assert not os.path.exists(state_path(c)), "nothing issued yet: nothing written"
    draw_snowflakes(c, 10)
    assert os.path.exists(state_path(c))


def test_the_old_one_number_state_file_is_still_honoured(lenient_cluster):
    c = lenient_cluster
    before = draw_both(c)
    c.stop()
    # What version 0.1.0 left behind: one Unix ms no ID reached.
    with open(state_path(c)) as f:
        text = f.read()
    assert text.startswith("pg_idgen snowflake state 2\n") and text.endswith("end\n"), text
    write_state(c, f"{int(time.time() * 1000) + 2000}\n")
    c.start(extra_env=faketime_env(-8))
    assert_above(c, before)


def test_a_harmless_layout_change_starts_and_repeats_nothing(lenient_cluster):
    c = lenient_cluster
    before = draw_both(c)
    c.stop()
    # Fewer time bits, more sequence bits: new IDs are larger anyway.
    c.append_conf("pg_idgen.snowflake_time_bits = 39", "pg_idgen.snowflake_sequence_bits = 14")
    c.start(extra_env=faketime_env(-8))
    assert "snowflake settings changed since pg_idgen_snowflake.state was written" in c.log()
    assert_above(c, before)


@pytest.mark.parametrize("change", [
    ["pg_idgen.snowflake_epoch = '2025-06-01 00:00:00+00'"],
    ["pg_idgen.snowflake_time_bits = 43", "pg_idgen.snowflake_sequence_bits = 10"],
], ids=["later-epoch", "more-time-bits"])
def test_a_settings_change_that_would_repeat_ids_is_refused_at_start(make_cluster, change):
    c = make_cluster(conf=[LOG_SQLSTATE])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    before = draw_both(c)
    c.stop()
    c.append_conf(*change)
    with pytest.raises(subprocess.CalledProcessError):
        c.start(extra_env=faketime_env(-8))
    log = c.log()
    assert "22023 FATAL:  pg_idgen snowflake settings changed since pg_idgen_snowflake.state was written" in log, \
        log[-3000:]
    assert "every new snowflake_nextval() ID must stay above" in log
    assert "HINT:  Restore the previous pg_idgen.snowflake_epoch and bit widths" in log
    # Putting the settings back is the recovery.
    c.append_conf("pg_idgen.snowflake_epoch = '2025-01-01 00:00:00+00'", "pg_idgen.snowflake_time_bits = 41",
                  "pg_idgen.snowflake_sequence_bits = 12", "pg_idgen.snowflake_max_lead = '1h'")
    c.start(extra_env=faketime_env(-8))
    assert_above(c, before)


def test_a_clock_in_the_future_while_idle_is_not_persisted(make_cluster):
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    before = draw_both(c)
    # A day ahead, and no ID issued: the keeper must not write that down.
    c.restart(extra_env=faketime_env(86_400))
    time.sleep(1.5)  # the keeper looks every 100 ms
    c.restart()
    assert_above(c, before)
    (lead_ms,), = c.sql("SELECT lead_ms FROM snowflake_status WHERE generator = 'default'")
    assert lead_ms < 5000, f"IDs run {lead_ms} ms ahead of the clock after a day of wrong time"


def test_ten_restarts_100_ms_apart_do_not_ratchet_the_mark(make_cluster):
    """A mark that ratcheted by the persist window (2 s) at each restart
    would run 20 s ahead after ten: the bound below catches it as surely as
    after a hundred."""
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    before = draw_snowflakes(c, 1000)
    for i in range(10):
        c.stop("immediate")
        time.sleep(0.1)
        c.start()
        if i % 2:
            before += draw_snowflakes(c, 1)  # half the runs issue an ID, half none
    after = draw_snowflakes(c, 1000)
    assert min(after) > max(before)
    (lead_ms, persisted_ahead), = c.sql(
        "SELECT lead_ms, extract(epoch FROM persisted_until - clock_timestamp()) * 1000 "
        "FROM snowflake_status WHERE generator = 'default'")
    # pg_idgen.snowflake_persist_ahead (2 s) plus the burst headroom (25 ms)
    # at most, however many restarts.
    assert lead_ms <= 2025, f"after 10 restarts IDs run {lead_ms} ms ahead of the clock"
    assert persisted_ahead <= 2025


def test_a_call_that_cannot_succeed_within_max_wait_fails_at_once(make_cluster):
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    draw_snowflakes(c, 1000)
    c.restart(extra_env=faketime_env(-3600))
    with c.connect() as conn:
        # If the call slept for the clock, the statement timeout would end
        # it with 57014 instead of the snowflake error.
        conn.execute("SET statement_timeout = '5s'")
        with pytest.raises(errors.ObjectNotInPrerequisiteState) as caught:
            conn.execute("SELECT snowflake_nextval()")
    assert caught.value.sqlstate == "55000"
    assert "and the clock cannot catch up within pg_idgen.snowflake_max_wait" in str(caught.value)
    assert "raise pg_idgen.snowflake_max_lead" in caught.value.diag.message_hint


def test_a_terminated_keeper_is_restarted_and_never_shown_dead(make_cluster):
    c = make_cluster()
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    before = draw_snowflakes(c, 1000)
    (old,), = c.sql("SELECT keeper_pid FROM snowflake_status WHERE generator = 'default'")
    assert keeper_pids(c) == [old]
    os.kill(old, signal.SIGTERM)
    assert wait_for(lambda: keeper_pids(c) not in ([], [old]), timeout=30), "the keeper was not restarted"
    (new,), = c.sql("SELECT keeper_pid FROM snowflake_status WHERE generator = 'default'")
    assert new != old and keeper_pids(c) == [new]
    # Beyond the old keeper's persisted window, IDs still come.
    time.sleep(2.5)
    assert min(draw_snowflakes(c, 1000)) > max(before)


def test_the_persist_window_is_a_setting(make_cluster):
    c = make_cluster(conf=["pg_idgen.snowflake_persist_ahead = '10s'"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    draw_snowflakes(c, 1)
    (ahead,), = c.sql("SELECT extract(epoch FROM persisted_until - last_issued) * 1000 "
                      "FROM snowflake_status WHERE generator = 'default'")
    # The first ID needed a write, 10 s ahead of the keeper's clock; with
    # the default 2 s window it could be at most 2,025 ms ahead of any ID.
    assert ahead > 2025


@pytest.mark.parametrize("conf", [
    ["max_worker_processes = 0"],
    # pg_prewarm's autoprewarm worker, registered first, takes the only slot.
    ["max_worker_processes = 1", "shared_preload_libraries = 'pg_prewarm, pg_idgen'"],
], ids=["no-slots", "slots-taken"])
def test_no_worker_slot_for_the_keeper_stops_the_start_saying_so(make_cluster, conf):
    c = make_cluster(conf=[*conf, LOG_SQLSTATE])
    with pytest.raises(subprocess.CalledProcessError):
        c.start()
    log = c.log()
    assert "53400 FATAL:  pg_idgen cannot register its snowflake keeper: max_worker_processes" in log, log[-3000:]
    assert "HINT:  Raise max_worker_processes" in log


def test_max_wait_zero_still_waits_for_the_keeper(make_cluster):
    # 4 IDs per ms: 40,000 IDs run 10 s ahead of the clock, past every
    # persisted window, so calls need the keeper again and again.
    c = make_cluster(conf=["pg_idgen.snowflake_time_bits = 41", "pg_idgen.snowflake_machine_bits = 20",
                           "pg_idgen.snowflake_sequence_bits = 2", "pg_idgen.snowflake_max_lead = '1h'",
                           "pg_idgen.snowflake_max_wait = 0"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    ids = draw_snowflakes(c, 40_000)
    assert_unique(ids)
    (persist_waits,), = c.sql("SELECT persist_waits FROM snowflake_status WHERE generator = 'default'")
    assert persist_waits > 0


def test_the_javascript_safe_generator_out_of_time_says_so(make_cluster):
    c = make_cluster(conf=["pg_idgen.snowflake_epoch = '1950-01-01'", "pg_idgen.snowflake_time_bits = 45",
                           "pg_idgen.snowflake_sequence_bits = 8"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    with pytest.raises(errors.SequenceGeneratorLimitExceeded) as caught:
        c.sql("SELECT snowflake_js_nextval()")
    assert caught.value.sqlstate == "2200H"
    assert "snowflake time of the JavaScript-safe generator is used up: its 41 bits of milliseconds ended at" \
        in str(caught.value)
    assert "The JavaScript-safe layout always has 41 time bits" in caught.value.diag.message_hint
    assert c.sql("SELECT snowflake_nextval() > 0") == [(True,)], "the default layout has 45 bits: still good"


@pytest.mark.parametrize("bits, machine_id, probe, column, expected", [
    ((30, 32, 1), 4294967295, "snowflake_nextval()", "machine_id", 4294967295),
    ((30, 1, 32), 1, "(1::bigint << 33) | 2147483653", "sequence", 2147483653),
], ids=["machine-2^32-1", "sequence-above-2^31"])
def test_wide_machine_ids_and_sequences_are_bigint(make_cluster, bits, machine_id, probe, column, expected):
    # 30 bits of ms last 12 days: an epoch 5 days ago.
    epoch = time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(time.time() - 5 * 86400))
    c = make_cluster(conf=[f"pg_idgen.snowflake_epoch = '{epoch}'", f"pg_idgen.snowflake_time_bits = {bits[0]}",
                           f"pg_idgen.snowflake_machine_bits = {bits[1]}",
                           f"pg_idgen.snowflake_sequence_bits = {bits[2]}", f"pg_idgen.machine_id = {machine_id}"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    assert c.sql(f"SELECT (snowflake_parse({probe})).{column}") == [(expected,)]
    assert c.sql("SELECT machine_id FROM snowflake_status WHERE generator = 'default'") == [(machine_id,)]


def test_clients_never_see_rust_backtraces_whatever_rust_backtrace_says(make_cluster):
    c = make_cluster(conf=["pg_idgen.snowflake_max_wait = '1h'"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    draw_snowflakes(c, 1000)
    # A cancel while the call waits for a clock an hour behind.
    c.restart(extra_env={**faketime_env(-3600), "RUST_BACKTRACE": "full", "RUST_LIB_BACKTRACE": "1"})
    with c.connect() as conn:
        conn.execute("SET statement_timeout = '300ms'")
        with pytest.raises(errors.QueryCanceled) as caught:
            conn.execute("SELECT snowflake_nextval()")
    assert caught.value.sqlstate == "57014"
    assert caught.value.diag.message_primary == "canceling statement due to statement timeout"
    assert caught.value.diag.message_detail is None, caught.value.diag.message_detail
    assert "backtrace" not in c.log().lower()


def test_a_host_name_machine_id_outside_a_statefulset_is_warned_about(make_cluster):
    hostname = "ip-10-0-9-17"
    c = make_cluster(conf=["pg_idgen.machine_id = 'hostname'", LOG_SQLSTATE])
    # A UTS namespace of its own gives the server a host name made from an
    # address, as cloud hosts have.
    probe = subprocess.run(["unshare", "--uts", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot create a UTS namespace here")
    subprocess.run(
        ["unshare", "--uts", "sh", "-c",
         f"hostname {hostname} && runuser -u postgres -- {PG_BIN}/pg_ctl -D {c.data} -l {c.log_path} -w start"],
        check=True, capture_output=True)
    c.sql("CREATE EXTENSION pg_idgen")
    assert c.sql("SELECT machine_id FROM snowflake_status WHERE generator = 'default'") == [(17,)]
    log = c.log()
    assert "01000 WARNING:  pg_idgen.machine_id = 'hostname' gives machine id 17, but " in log, log[-3000:]
    assert "holds other numbers besides its trailing one" in log or "is not a Kubernetes pod" in log
    assert "HINT:  Two servers with the same machine id can issue the same snowflake IDs." in log


def test_without_a_machine_id_no_snowflake_id_is_issued_and_the_settings_are_checked_when_set(
        make_cluster):
    """pg_idgen.machine_id left unset (two servers that both forgot it
    would share machine id 0): both generators refuse with 55000 naming
    the setting, segment IDs go on, the fallback cannot be turned on (and
    the start warns when postgresql.conf turns it on). ALTER SYSTEM refuses
    the values the next start would refuse, with the start's message; a
    role without the right may not turn the fallback on. Set, it issues."""
    c = make_cluster(conf=("pg_idgen.machine_id = ''", "pg_idgen.snowflake_fallback = on",
                           LOG_SQLSTATE))
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    assert "pg_idgen.snowflake_fallback cannot be on: pg_idgen.machine_id is not set" in c.log()
    for function in ("snowflake_nextval()", "snowflake_js_nextval()"):
        with pytest.raises(errors.ObjectNotInPrerequisiteState) as refused:
            c.sql(f"SELECT {function}")
        assert f"{function} needs pg_idgen.machine_id, which is not set on this server" in str(refused.value)
        assert "set pg_idgen.machine_id in postgresql.conf" in refused.value.diag.message_hint
    db = c.new_database()
    c.sql("SELECT segment_create('t', step => 10)", dbname=db)
    assert len(set(r[0] for r in c.sql("SELECT segment_nextval('t') FROM generate_series(1, 100)",
                                       dbname=db))) == 100
    with pytest.raises(errors.InvalidParameterValue) as refused:
        c.sql("SET pg_idgen.snowflake_fallback = on")
    assert "pg_idgen.machine_id is not set" in str(refused.value)
    for value, problem in [("5000", "5000 does not fit in pg_idgen.snowflake_machine_bits = 10"),
                           ("-1", "is neither a non-negative integer nor 'hostname'"),
                           ("abc", "is neither a non-negative integer nor 'hostname'")]:
        with pytest.raises(errors.InvalidParameterValue) as refused:
            c.sql(f"ALTER SYSTEM SET pg_idgen.machine_id = '{value}'")
        assert f'invalid value for parameter "pg_idgen.machine_id": "{value}"' in str(refused.value)
        assert problem in str(refused.value)
        assert refused.value.diag.message_hint
    for value, problem in [("yesterday", "not a UTC timestamp"),
                           ("2999-01-01 00:00:00+00", "ms in the future")]:
        with pytest.raises(errors.InvalidParameterValue) as refused:
            c.sql(f"ALTER SYSTEM SET pg_idgen.snowflake_epoch = '{value}'")
        assert problem in str(refused.value)
    with c.connect() as conn:
        conn.execute("CREATE ROLE idgen_app")
        conn.execute("SET ROLE idgen_app")
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("SET pg_idgen.snowflake_fallback = off")
    # Refused values were not written; a good one is, and takes effect.
    c.sql("ALTER SYSTEM SET pg_idgen.machine_id = 0")
    c.restart()
    assert "pg_idgen.snowflake_fallback cannot be on" not in c.log().split("database system is ready")[-1]
    ids = draw_snowflakes(c, 1000)
    assert_unique(ids)
    c.sql("SET pg_idgen.snowflake_fallback = on")


def test_persist_ahead_above_max_lead_is_held_to_it_so_a_crash_costs_no_wait(make_cluster):
    """pg_idgen.snowflake_persist_ahead = 20s above snowflake_max_lead = 5s
    (both reloadable, each valid alone): the keeper warns and writes the
    mark no further ahead than max_lead. Before, a crash resumed ~20 s
    ahead of the clock and every snowflake_nextval() failed for about 15 s
    (each call waited for the clock beyond max_lead); now the first call
    after the crash is served at once."""
    c = make_cluster(conf=("pg_idgen.snowflake_persist_ahead = '20s'",
                           "pg_idgen.snowflake_max_lead = '5s'",
                           "pg_idgen.snowflake_max_wait = '500ms'"))
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    ids = draw_snowflakes(c, 10_000)
    assert wait_for(lambda: "snowflake_persist_ahead (20000 ms) is above pg_idgen.snowflake_max_lead"
                    in c.log(), timeout=30)
    # Keep issuing for a while, so that the mark is written ahead.
    until = time.monotonic() + 3
    while time.monotonic() < until:
        ids += draw_snowflakes(c, 1000)
    c.stop("immediate")
    c.start()
    ids += draw_snowflakes(c, 1000)   # raises if a call waited beyond max_wait
    assert_unique(ids)
    assert_increasing(ids)


def test_the_scalar_helpers_agree_with_snowflake_parse_from_every_calling_context(make_cluster):
    """snowflake_timestamp, snowflake_machine_id and snowflake_sequence, in
    both forms, from PL/pgSQL, a trigger, a prepared statement and a
    cursor, and again after a restart: each equals snowflake_parse's part."""
    c = make_cluster(conf=("pg_idgen.machine_id = 9",))
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    layout = "'2025-01-01 00:00:00+00', 10, 12"
    parts = (f"snowflake_timestamp(id), snowflake_machine_id(id), snowflake_sequence(id), "
             f"snowflake_timestamp(id, {layout}), snowflake_machine_id(id, {layout}), "
             f"snowflake_sequence(id, {layout})")
    for statement in [
        "CREATE TABLE flakes (id bigint PRIMARY KEY, ts timestamptz, machine bigint, seq bigint, "
        "ts2 timestamptz, machine2 bigint, seq2 bigint)",
        f"CREATE FUNCTION fill() RETURNS trigger LANGUAGE plpgsql AS $$ DECLARE id bigint := NEW.id; "
        f"BEGIN SELECT {parts} INTO NEW.ts, NEW.machine, NEW.seq, NEW.ts2, NEW.machine2, NEW.seq2; "
        f"RETURN NEW; END $$",
        "CREATE TRIGGER fill BEFORE INSERT ON flakes FOR EACH ROW EXECUTE FUNCTION fill()",
    ]:
        c.sql(statement)
    expected_sql = ("SELECT p.ts, p.machine_id, p.sequence, p.ts, p.machine_id, p.sequence "
                    "FROM snowflake_parse(%s) p")

    def check(rows):
        assert rows
        for id_, *got in rows:
            assert tuple(got) == c.sql(expected_sql, (id_,))[0], (id_, got)
            assert got[1] == 9

    with c.connect() as conn:
        conn.execute("INSERT INTO flakes (id) SELECT snowflake_nextval() FROM generate_series(1, 50)")
        check(conn.execute("SELECT id, ts, machine, seq, ts2, machine2, seq2 FROM flakes").fetchall())
        ids = [r[0] for r in conn.execute("SELECT id FROM flakes")]
        check([(i, *conn.execute(f"SELECT {parts} FROM (SELECT %s::bigint AS id) v", (i,), prepare=True)
                .fetchone()) for i in ids[:10]])
    with c.connect(autocommit=False) as conn:
        conn.execute(f"DECLARE parts CURSOR FOR SELECT id, {parts} FROM flakes")
        check(conn.execute("FETCH 20 FROM parts").fetchall())
        conn.rollback()
    c.restart()
    check(c.sql(f"SELECT id, {parts} FROM flakes"))


def test_the_mark_stays_ahead_of_the_clock_through_a_pause(snowflake_cluster):
    # Issue 20, item 6: the first call after a few seconds idle must not
    # wait for the keeper's commit and fsync. The mark (persisted_until)
    # follows the clock through the pause, where before it stayed one
    # window (pg_idgen.snowflake_persist_ahead, 2 s) above the last ID.
    c = snowflake_cluster
    ids = draw_snowflakes(c, 100)
    (last_ms,), = c.sql("SELECT extract(epoch FROM (snowflake_parse(%s)).ts) * 1000", (ids[-1],))
    time.sleep(6)
    (until_ms, now_ms), = c.sql(
        "SELECT extract(epoch FROM persisted_until) * 1000, extract(epoch FROM clock_timestamp()) * 1000 "
        "FROM snowflake_status WHERE generator = 'default'")
    assert until_ms > last_ms + 4000, (
        f"the mark stayed {until_ms - last_ms:.0f} ms above the last ID through a 6 s pause")
    assert until_ms <= now_ms + 2025, "the mark ran more than a window ahead of the clock"


def test_a_reload_warns_about_a_layout_the_next_start_would_refuse(make_cluster):
    # Issue 20, item 2: a layout change takes several ALTER SYSTEMs, so each
    # width is refused at once only outside its own range; after a reload
    # the keeper checks the three (and the machine id) as the next start
    # would, and warns in the server log.
    c = make_cluster(conf=["pg_idgen.machine_id = 7", "log_line_prefix = '%e '"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    warning = "the configuration files hold a setting the next server start will refuse"
    c.sql("ALTER SYSTEM SET pg_idgen.snowflake_time_bits = 40")
    c.sql("SELECT pg_reload_conf()")
    assert wait_for(lambda: warning in c.log(), timeout=30), "no warning after the reload"
    line = next(l for l in c.log().splitlines() if warning in l)
    assert line.startswith("22023 WARNING") and "must add up to 63" in line, line
    # The second step makes the layout whole: the next reload is quiet.
    c.sql("ALTER SYSTEM SET pg_idgen.snowflake_sequence_bits = 13")
    warned = c.log().count(warning)
    c.sql("SELECT pg_reload_conf()")
    # The keeper's reload is seen by its next pass; a third reload after a
    # machine id that does not fit must warn, which orders the two.
    c.sql("ALTER SYSTEM SET pg_idgen.machine_id = '5'")
    c.sql("ALTER SYSTEM SET pg_idgen.snowflake_machine_bits = 2")
    c.sql("ALTER SYSTEM SET pg_idgen.snowflake_sequence_bits = 21")
    c.sql("SELECT pg_reload_conf()")
    assert wait_for(lambda: "5 does not fit in pg_idgen.snowflake_machine_bits = 2" in c.log(), timeout=30)
    assert c.log().count(warning) == warned + 1, "the whole layout of the second step was warned about"
    # The running server kept its layout; the warned one is refused at start.
    assert c.sql("SELECT time_bits, sequence_bits FROM snowflake_status WHERE generator = 'default'") == [(41, 12)]
    c.sql("ALTER SYSTEM SET pg_idgen.machine_id = '3'")
    c.sql("SELECT pg_reload_conf()")
    c.restart()
    assert c.sql("SELECT time_bits, machine_bits, sequence_bits, machine_id FROM snowflake_status "
                 "WHERE generator = 'default'") == [(40, 2, 21, 3)]


def test_the_reload_check_reads_numbers_and_names_as_postgres_does(make_cluster):
    # Found by review: hex, octal, fractions and upper-case names were
    # judged differently from how the start reads them. 0x2F = 47, 04 = 4,
    # 12.0 = 12: a whole layout, in which machine id 20 does not fit. Read
    # wrongly, the warning would be about the sum, or there would be none.
    c = make_cluster(conf=["pg_idgen.machine_id = 7", "include_if_exists = 'layout.conf'"])
    c.start()
    c.sql("CREATE EXTENSION pg_idgen")
    layout = os.path.join(c.data, "layout.conf")
    with open(layout, "w") as f:
        f.write("PG_IDGEN.SNOWFLAKE_TIME_BITS = 0x2F\nPg_Idgen.Snowflake_Machine_Bits = 04\n"
                "pg_idgen.snowflake_sequence_bits = 12.0\npg_idgen.machine_id = 20\n")
    shutil.chown(layout, "postgres", "postgres")
    c.sql("SELECT pg_reload_conf()")
    warning = "the configuration files hold a setting the next server start will refuse"
    assert wait_for(lambda: warning in c.log(), timeout=30)
    line = next(l for l in c.log().splitlines() if warning in l)
    assert "20 does not fit in pg_idgen.snowflake_machine_bits = 4" in line, line
    os.unlink(layout)
    c.sql("SELECT pg_reload_conf()")
    c.restart()
    assert draw_snowflakes(c, 10)
