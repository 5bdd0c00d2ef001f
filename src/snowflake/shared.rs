//! The cluster's snowflake state in shared memory, the settings it is built
//! from, the state file that carries its high-water marks across restarts,
//! and the keeper worker that writes that file.
//!
//! # Locking protocol
//!
//! None: both generators are lock-free (see `generator.rs`); the keeper's
//! latch pointer, pid and write status are atomics written by the keeper
//! alone (and cleared by its exit callback). The structure is laid out by
//! the postmaster (startup hook, again after a crash), from the state file,
//! before any backend exists.
//!
//! # The state file
//!
//! `pg_idgen_snowflake.state` in the data directory (format and meaning in
//! `state_file.rs`) holds, per generator, a high-water ID no ID issued has
//! passed. The keeper writes it to a temporary file that is fsync'd and
//! then renamed over the old one (and the directory fsync'd), so it is
//! always whole; only then may callers issue IDs up to it. At start, both
//! generators begin above it, so no restart — after a crash, with the clock
//! set back, with other settings — repeats an ID of an earlier run. Only a
//! missing file is a first start: a file that cannot be read or parsed
//! stops the server start, naming the file and the recovery.

use super::generator::{lead_sleep_ms, Generator, Refusal, WallClock};
use super::layout::{
    hostname_machine_id_doubt, machine_id_from_setting, parse_epoch, Layout, UnixMs,
    LAST_FORMATTABLE_MS,
};
use super::state_file::{self, HighWater, Saved};
use crate::errors::IdgenError;
use crate::gucs;
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::prelude::*;
use pgrx::PgLogLevel;
use std::io::Write;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicPtr, Ordering};
use std::time::Duration;

pub const STATE_FILE: &str = "pg_idgen_snowflake.state";
const STATE_FILE_TMP: &str = "pg_idgen_snowflake.state.tmp";

/// How often the keeper looks at the generators when nobody wakes it.
const KEEPER_INTERVAL: Duration = Duration::from_millis(100);

/// How long the postmaster waits before it starts a keeper that exited.
const KEEPER_RESTART: Duration = Duration::from_secs(1);

/// How long a call waits for the keeper to persist a time, at least, even
/// with a smaller `pg_idgen.snowflake_max_wait` (which bounds waits for the
/// clock): a keeper write is normal operation, not a failure. Twice the
/// keeper's restart delay, and far above a healthy fsync.
const KEEPER_WAIT_MIN_MS: i64 = 2 * KEEPER_RESTART.as_millis() as i64;

/// The settings, checked; computed in `_PG_init` (the postmaster), so a
/// bad value stops the server from starting.
#[derive(Debug, Clone, Copy)]
pub struct SnowflakeConfig {
    pub layout: Layout,
    pub machine: i64,
    /// `pg_idgen.machine_id = 'lease'`: the machine id comes from the lease
    /// keeper (`lease_keeper.rs`).
    pub lease: bool,
}

/// The settings, once `load_config` has run (in every process).
pub fn config() -> Option<&'static SnowflakeConfig> {
    CONFIG.get()
}

/// Parsed once, in the postmaster's `_PG_init`; every process forked from
/// it inherits the value.
static CONFIG: once_cell::sync::OnceCell<SnowflakeConfig> = once_cell::sync::OnceCell::new();

fn setting_text(setting: &pgrx::guc::GucSetting<Option<std::ffi::CString>>) -> String {
    setting
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
}

/// Checks the snowflake settings; raises an ERROR (fatal at server start)
/// naming the bad setting.
pub fn load_config() {
    // Not a snowflake matter, but _PG_init's first step that may raise:
    // from here on, no error a client sees carries a Rust backtrace.
    crate::errors::keep_backtraces_out_of_errors();
    let epoch_text = setting_text(&gucs::SNOWFLAKE_EPOCH);
    let Some(epoch_ms) = parse_epoch(&epoch_text) else {
        IdgenError::BadSetting {
            name: "pg_idgen.snowflake_epoch",
            value: epoch_text,
            problem: "not a UTC timestamp".into(),
            hint: "Write it as YYYY-MM-DD HH:MM:SS+00, e.g. '2025-01-01 00:00:00+00'.".into(),
        }
        .raise()
    };
    let now = now_unix_ms();
    if epoch_ms > now {
        IdgenError::BadSetting {
            name: "pg_idgen.snowflake_epoch",
            value: epoch_text,
            problem: format!("it is {} ms in the future", epoch_ms - now),
            hint: "Use an epoch in the past, e.g. the default '2025-01-01 00:00:00+00' (if the server's clock is wrong, fix the clock): no ID can be issued before the epoch.".into(),
        }
        .raise()
    }
    let (time, machine_bits, sequence) = (
        gucs::SNOWFLAKE_TIME_BITS.get() as u32,
        gucs::SNOWFLAKE_MACHINE_BITS.get() as u32,
        gucs::SNOWFLAKE_SEQUENCE_BITS.get() as u32,
    );
    let layout = Layout::new(epoch_ms, time, machine_bits, sequence, 63).unwrap_or_else(|_| {
        IdgenError::BadSetting {
            name: "pg_idgen.snowflake_time_bits",
            value: format!("{time}"),
            problem: format!(
                "pg_idgen.snowflake_time_bits ({time}) + pg_idgen.snowflake_machine_bits ({machine_bits}) + pg_idgen.snowflake_sequence_bits ({sequence}) must add up to 63, with time and sequence at least 1"
            ),
            hint: "The default layout is 41 + 10 + 12.".into(),
        }
        .raise()
    });
    if layout.last_unix_ms() > LAST_FORMATTABLE_MS {
        IdgenError::BadSetting {
            name: "pg_idgen.snowflake_time_bits",
            value: format!("{time}"),
            problem: format!(
                "{time} bits of milliseconds from pg_idgen.snowflake_epoch reach past the year 9999, which snowflake_format() cannot write"
            ),
            hint: format!(
                "Use at most {} time bits with this epoch, and give the rest to the machine id or the sequence.",
                Layout::max_formattable_time_bits(epoch_ms)
            ),
        }
        .raise()
    }
    let machine_text = setting_text(&gucs::MACHINE_ID);
    if machine_text.trim().eq_ignore_ascii_case("lease") {
        super::lease_keeper::check_settings();
        let _ = CONFIG.set(SnowflakeConfig {
            layout,
            machine: 0,
            lease: true,
        });
        return;
    }
    let host = hostname();
    let machine = machine_id_from_setting(&machine_text, &host).unwrap_or_else(|problem| {
        IdgenError::BadSetting {
            name: "pg_idgen.machine_id",
            value: machine_text.clone(),
            problem,
            hint: "Set it to a number, to 'hostname' on hosts named like pg-3, or to 'lease' to lease one from a central server.".into(),
        }
        .raise()
    });
    if layout.check_machine(machine).is_err() {
        IdgenError::BadSetting {
            name: "pg_idgen.machine_id",
            value: machine_text,
            problem: format!(
                "{machine} does not fit in pg_idgen.snowflake_machine_bits = {machine_bits}"
            ),
            hint: format!("Use a machine id from 0 to {}.", layout.max_machine()),
        }
        .raise();
    }
    if machine_text.trim().eq_ignore_ascii_case("hostname") {
        let in_kubernetes = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
        if let Some(doubt) = hostname_machine_id_doubt(&host, in_kubernetes) {
            pgrx::pg_sys::panic::ErrorReport::new(
                PgSqlErrorCode::ERRCODE_WARNING,
                format!("pg_idgen.machine_id = 'hostname' gives machine id {machine}, but {doubt}"),
                "pg_idgen",
            )
            .set_hint("Two servers with the same machine id can issue the same snowflake IDs. 'hostname' suits the pods of one StatefulSet (pg-0, pg-1, ...); elsewhere set pg_idgen.machine_id to a number unique to each server.")
            .report(PgLogLevel::WARNING);
        }
    }
    // A second call (never made) would keep the first value.
    let _ = CONFIG.set(SnowflakeConfig {
        layout,
        machine,
        lease: false,
    });
}

/// The cluster's snowflake state.
#[repr(C)]
pub struct Snowflake {
    pub main: Generator,
    pub javascript: Generator,
    /// Whether the machine id fits the JavaScript-safe layout.
    pub javascript_ok: AtomicBool,
    keeper_latch: AtomicPtr<pg_sys::Latch>,
    /// The keeper's pid while it runs (0 otherwise: its exit clears it).
    keeper_pid: AtomicI32,
    /// The OS error of the keeper's last write, 0 when it succeeded.
    write_errno: AtomicI32,
    /// With `pg_idgen.machine_id = 'lease'`: what the lease keeper holds.
    pub lease: super::lease_keeper::LeaseShared,
}

static SNOWFLAKE: AtomicPtr<Snowflake> = AtomicPtr::new(null_mut());

/// The snowflake state, or `None` when the library was not preloaded.
#[inline]
pub fn snowflake() -> Option<&'static Snowflake> {
    // SAFETY: set by the postmaster's startup hook to shared memory that
    // lives as long as every process that can see it.
    unsafe { SNOWFLAKE.load(Ordering::Acquire).as_ref() }
}

pub fn shmem_size() -> usize {
    std::mem::size_of::<Snowflake>()
}

/// Reads the state file: `None` only when it does not exist; anything that
/// cannot be read or parsed raises (at server start: the server stops).
fn read_state_file() -> Option<Saved> {
    let text = match std::fs::read(STATE_FILE) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => IdgenError::SnowflakeStateFile {
            problem: format!("could not read it: {e}"),
            io: true,
        }
        .raise(),
    };
    let text = String::from_utf8(text).unwrap_or_else(|_| {
        IdgenError::SnowflakeStateFile {
            problem: "it is not text".into(),
            io: false,
        }
        .raise()
    });
    match state_file::parse(&text) {
        Ok(saved) => Some(saved),
        Err(problem) => IdgenError::SnowflakeStateFile { problem, io: false }.raise(),
    }
}

/// At start: when the settings changed since the file was written, either
/// say so in the log (new IDs stay above the old ones anyway), or — when
/// that would put them further ahead of the clock than
/// `pg_idgen.snowflake_max_lead` — refuse to start, naming the change.
fn check_settings_change(
    saved: &Saved,
    generators: [(&'static str, &Layout, Option<i64>, i64); 2],
) {
    let Some(change) = state_file::settings_change(saved, generators[0].1) else {
        return;
    };
    let now = now_unix_ms();
    let max_lead = i64::from(gucs::SNOWFLAKE_MAX_LEAD_MS.get());
    for (generator, layout, floor, high_id) in generators {
        let Some(floor) = floor else { continue };
        let ahead_ms = layout.epoch_ms.saturating_add(floor) - now;
        if ahead_ms > max_lead {
            IdgenError::SnowflakeSettingsChanged {
                change: change.clone(),
                generator,
                high_id,
                ahead_ms,
            }
            .raise();
        }
    }
    pgrx::log!(
        "pg_idgen: snowflake settings changed since {STATE_FILE} was written ({change}); new IDs stay above the high-water IDs it records"
    );
}

/// Lays out the state in shared memory; called by the startup hook.
///
/// # Safety
/// `base` points at `shmem_size()` bytes of fresh shared memory (when
/// `found` is false); the caller holds AddinShmemInitLock.
pub unsafe fn attach(base: *mut u8, found: bool) {
    let Some(config) = CONFIG.get() else {
        return;
    };
    let state = base as *mut Snowflake;
    if !found {
        let javascript_layout = Layout::javascript_safe(config.layout.epoch_ms);
        let saved = read_state_file();
        if let Some(Err(problem)) = saved.as_ref().map(|saved| {
            state_file::check_mark(saved, config.layout.epoch_ms, config.layout.last_unix_ms())
        }) {
            IdgenError::SnowflakeStateFile { problem, io: false }.raise();
        }
        let (main_floor, js_floor) = saved.as_ref().map_or((None, None), |saved| {
            state_file::floors(saved, &config.layout, &javascript_layout)
        });
        if let Some(saved @ Saved::HighWater(h)) = &saved {
            check_settings_change(
                saved,
                [
                    ("snowflake_nextval()", &config.layout, main_floor, h.main),
                    (
                        "snowflake_js_nextval()",
                        &javascript_layout,
                        js_floor,
                        h.javascript,
                    ),
                ],
            );
        }
        let javascript_ok =
            !config.lease && javascript_layout.check_machine(config.machine).is_ok();
        // SAFETY: the caller's promise: fresh memory of our size.
        unsafe {
            std::ptr::write(
                state,
                Snowflake {
                    main: Generator::new(config.layout, config.machine, main_floor),
                    javascript: Generator::new(
                        javascript_layout,
                        if javascript_ok { config.machine } else { 0 },
                        js_floor,
                    ),
                    javascript_ok: AtomicBool::new(javascript_ok),
                    keeper_latch: AtomicPtr::new(null_mut()),
                    keeper_pid: AtomicI32::new(0),
                    write_errno: AtomicI32::new(0),
                    lease: super::lease_keeper::LeaseShared::new(),
                },
            )
        };
        if config.lease {
            // SAFETY: just written above.
            let written = unsafe { &*state };
            written.main.await_lease();
            written.javascript.await_lease();
        }
    }
    SNOWFLAKE.store(state, Ordering::Release);
}

fn read_clock(clock: libc::clockid_t) -> UnixMs {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec; the clocks used here
    // always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

pub fn now_unix_ms() -> UnixMs {
    read_clock(libc::CLOCK_REALTIME)
}

/// The system clock: `CLOCK_REALTIME` exactly (about 25 ns through the
/// vDSO here), or `CLOCK_REALTIME_COARSE` (about 5 ns), which lags the
/// exact clock by less than its resolution (one kernel tick).
pub struct SystemClock;

/// Twice the coarse clock's resolution in ms, plus one: how far the exact
/// clock may be ahead of a coarse reading.
fn coarse_slack_ms() -> i64 {
    static SLACK: AtomicI64 = AtomicI64::new(0);
    let known = SLACK.load(Ordering::Relaxed);
    if known > 0 {
        return known;
    }
    let mut res = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_getres writes one timespec.
    unsafe { libc::clock_getres(libc::CLOCK_REALTIME_COARSE, &mut res) };
    let slack = 2 * (res.tv_sec * 1000 + res.tv_nsec / 1_000_000) + 1;
    SLACK.store(slack, Ordering::Relaxed);
    slack
}

impl WallClock for SystemClock {
    #[inline]
    fn now_ms(&self) -> i64 {
        now_unix_ms()
    }

    #[inline]
    fn bounds_ms(&self) -> Option<(i64, i64)> {
        let coarse = read_clock(libc::CLOCK_REALTIME_COARSE);
        Some((coarse, coarse + coarse_slack_ms()))
    }

    #[inline]
    fn mono_ms(&self) -> i64 {
        mono_now_ms()
    }
}

/// The monotonic clock in ms (`CLOCK_MONOTONIC`: NTP slews its rate, never
/// steps it), which lease deadlines are measured on.
pub fn mono_now_ms() -> i64 {
    read_clock(libc::CLOCK_MONOTONIC)
}

impl Snowflake {
    fn wake_lease_keeper(&self) {
        self.lease.wake();
    }

    fn lease_problem(&self) -> String {
        self.lease.problem()
    }

    fn wake_keeper(&self) {
        let latch = self.keeper_latch.load(Ordering::Acquire);
        if !latch.is_null() {
            // SAFETY: a PGPROC latch in shared memory; setting the latch of
            // a process that just exited is harmless.
            unsafe { pg_sys::SetLatch(latch) };
        }
    }

    /// The keeper's pid, if it is running.
    pub fn keeper_pid(&self) -> Option<i32> {
        let pid = self.keeper_pid.load(Ordering::Acquire);
        // SAFETY: signal 0 only checks that the process exists.
        (pid > 0 && unsafe { libc::kill(pid, 0) } == 0).then_some(pid)
    }

    /// The next ID of `generator`, waiting (interruptibly) for the clock or
    /// the keeper when it must, up to `pg_idgen.snowflake_max_wait`.
    pub fn next_id(&self, generator: &Generator) -> i64 {
        let max_lead = i64::from(gucs::SNOWFLAKE_MAX_LEAD_MS.get());
        match generator.next(&SystemClock, max_lead) {
            Ok(issued) => issued.id,
            Err(refusal) => self.next_id_slow(generator, refusal, max_lead),
        }
    }

    fn generator_name(&self, generator: &Generator) -> &'static str {
        if std::ptr::eq(generator, &self.javascript) {
            "JavaScript-safe"
        } else {
            "default"
        }
    }

    #[cold]
    fn next_id_slow(&self, generator: &Generator, mut refusal: Refusal, max_lead: i64) -> i64 {
        let started = std::time::Instant::now();
        let max_wait = i64::from(gucs::SNOWFLAKE_MAX_WAIT_MS.get());
        loop {
            let waited_ms = started.elapsed().as_millis() as i64;
            let sleep_ms = match refusal {
                Refusal::Exhausted => {
                    let layout = generator.layout();
                    IdgenError::SnowflakeExhausted {
                        generator: self.generator_name(generator),
                        time_bits: layout.time_bits,
                        ended: super::sql::to_timestamptz(layout.last_unix_ms()).to_string(),
                    }
                    .raise()
                }
                Refusal::TooFarAhead { lead_ms } => {
                    match lead_sleep_ms(lead_ms, max_lead, max_wait - waited_ms) {
                        Some(sleep) => sleep,
                        None => IdgenError::SnowflakeClockBehind {
                            generator: self.generator_name(generator),
                            lead_ms,
                            max_lead_ms: max_lead,
                            waited_ms,
                        }
                        .raise(),
                    }
                }
                Refusal::NoLease | Refusal::AboveCeiling => {
                    self.wake_lease_keeper();
                    if waited_ms >= max_wait {
                        match refusal {
                            Refusal::NoLease => IdgenError::SnowflakeNoLease {
                                waited_ms,
                                why: self.lease_problem(),
                            }
                            .raise(),
                            _ => IdgenError::SnowflakeLeaseCeiling { waited_ms }.raise(),
                        }
                    }
                    10
                }
                Refusal::NotPersisted => {
                    self.wake_keeper();
                    let running = self.keeper_pid().is_some();
                    let errno = self.write_errno.load(Ordering::Acquire);
                    // A keeper write is normal operation: it gets at least
                    // KEEPER_WAIT_MIN_MS, unless it is known not to come.
                    let limit = if running && errno == 0 {
                        max_wait.max(KEEPER_WAIT_MIN_MS)
                    } else {
                        max_wait
                    };
                    if waited_ms >= limit {
                        match (running, errno) {
                            (false, _) => {
                                IdgenError::SnowflakeKeeperNotRunning { waited_ms }.raise()
                            }
                            (true, 0) => IdgenError::SnowflakeKeeperSlow { waited_ms }.raise(),
                            (true, errno) => IdgenError::SnowflakeStateNotWritten {
                                problem: std::io::Error::from_raw_os_error(errno).to_string(),
                                waited_ms,
                            }
                            .raise(),
                        }
                    }
                    1
                }
            };
            // SAFETY: waits on this backend's own latch; CHECK_FOR_INTERRUPTS
            // turns cancel, terminate and statement_timeout into their ERROR.
            unsafe {
                pg_sys::WaitLatch(
                    pg_sys::MyLatch,
                    (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH)
                        as i32,
                    sleep_ms as _,
                    pg_sys::PG_WAIT_EXTENSION,
                );
                pg_sys::ResetLatch(pg_sys::MyLatch);
                pg_sys::check_for_interrupts!();
            }
            match generator.next(&SystemClock, max_lead) {
                Ok(issued) => return issued.id,
                Err(again) => refusal = again,
            }
        }
    }
}

/// Set by the log hook while the keeper is being registered, when
/// PostgreSQL refuses the registration (it only logs that).
static REGISTRATION_REFUSED: AtomicBool = AtomicBool::new(false);
static mut PREV_EMIT_LOG_HOOK: pg_sys::emit_log_hook_type = None;

#[pg_guard]
unsafe extern "C-unwind" fn registration_log_hook(edata: *mut pg_sys::ErrorData) {
    // SAFETY: PostgreSQL passes the ErrorData being emitted.
    unsafe {
        if (*edata).sqlerrcode == PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED as i32 {
            REGISTRATION_REFUSED.store(true, Ordering::Relaxed);
        }
        if let Some(prev) = PREV_EMIT_LOG_HOOK {
            prev(edata);
        }
    }
}

/// Registers the keeper; called from `_PG_init` while preloading. Refuses
/// to start the server when there is no worker slot for it: without a
/// keeper no snowflake ID can ever be issued, and PostgreSQL's own message
/// ("too many background workers") does not say whose worker is missing.
pub fn register_keeper() {
    // SAFETY: a plain read of a setting, in the postmaster.
    let max_workers = unsafe { pg_sys::max_worker_processes };
    if max_workers == 0 {
        IdgenError::SnowflakeKeeperNotRegistered {
            max_worker_processes: max_workers,
        }
        .raise();
    }
    // PostgreSQL reports a refused registration at LOG level only, with
    // ERRCODE_CONFIGURATION_LIMIT_EXCEEDED; listen for it around the call.
    // SAFETY: _PG_init runs single-threaded in the postmaster; the hook is
    // put back right after the call.
    unsafe {
        PREV_EMIT_LOG_HOOK = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(registration_log_hook);
    }
    BackgroundWorkerBuilder::new("pg_idgen snowflake keeper")
        .set_type("pg_idgen snowflake keeper")
        .set_library("pg_idgen")
        .set_function("pg_idgen_snowflake_keeper_main")
        .enable_shmem_access(None)
        .set_start_time(BgWorkerStartTime::PostmasterStart)
        .set_restart_time(Some(KEEPER_RESTART))
        .load();
    // SAFETY: as above.
    unsafe { pg_sys::emit_log_hook = PREV_EMIT_LOG_HOOK };
    if REGISTRATION_REFUSED.load(Ordering::Relaxed) {
        IdgenError::SnowflakeKeeperNotRegistered {
            max_worker_processes: max_workers,
        }
        .raise();
    }
}

/// Writes `content` durably: temporary file, fsync, rename, fsync of the
/// directory.
fn write_state_file(content: &str) -> std::io::Result<()> {
    let mut file = std::fs::File::create(STATE_FILE_TMP)?;
    file.write_all(content.as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(STATE_FILE_TMP, STATE_FILE)?;
    std::fs::File::open(".")?.sync_all()
}

/// Runs when the keeper exits, however it exits: it no longer runs.
#[pg_guard]
unsafe extern "C-unwind" fn keeper_exit(_code: i32, _arg: pg_sys::Datum) {
    if let Some(state) = snowflake() {
        state.keeper_latch.store(null_mut(), Ordering::Release);
        state.keeper_pid.store(0, Ordering::Release);
    }
}

/// The keeper's entry point, named in `bgw_function_name`.
///
/// On SIGTERM it exits with code 1, so the postmaster starts it again after
/// `KEEPER_RESTART` (code 0 would unregister it for good; at shutdown the
/// postmaster restarts nothing anyway).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_idgen_snowflake_keeper_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let Some(state) = snowflake() else { return };
    // SAFETY: MyLatch and MyProcPid are set in every started process; the
    // exit callback is registered once, with no argument.
    unsafe {
        pg_sys::before_shmem_exit(Some(keeper_exit), pg_sys::Datum::from(0));
        state.keeper_pid.store(pg_sys::MyProcPid, Ordering::Release);
        state.keeper_latch.store(pg_sys::MyLatch, Ordering::Release);
    }
    let generators = [&state.main, &state.javascript];
    let mut failing = false;
    loop {
        if BackgroundWorker::sighup_received() {
            // SAFETY: outside any transaction, in the worker's main loop.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let window = i64::from(gucs::SNOWFLAKE_PERSIST_AHEAD_MS.get());
        let now = now_unix_ms();
        let wanted = generators.map(|g| g.mark_to_persist(now, window));
        // A file removed under a running server is written again at once:
        // otherwise a crash would look like a first start.
        let removed = generators.iter().any(|g| g.persisted_limit() >= 0)
            && matches!(std::fs::symlink_metadata(STATE_FILE), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        if removed || wanted.iter().any(Option::is_some) {
            let limits: Vec<i64> = generators
                .iter()
                .zip(wanted)
                .map(|(g, w)| w.unwrap_or(g.persisted_limit()))
                .collect();
            let content = state_file::render(&HighWater {
                layout: *state.main.layout(),
                main: state_file::high_water_id(state.main.layout(), limits[0]),
                javascript: state_file::high_water_id(state.javascript.layout(), limits[1]),
            });
            match write_state_file(&content) {
                Ok(()) => {
                    for (g, limit) in generators.iter().zip(&limits) {
                        g.persisted(*limit);
                    }
                    state.write_errno.store(0, Ordering::Release);
                    failing = false;
                }
                Err(e) => {
                    state
                        .write_errno
                        .store(e.raw_os_error().unwrap_or(libc::EIO), Ordering::Release);
                    if !failing {
                        failing = true;
                        pgrx::pg_sys::panic::ErrorReport::new(
                            PgSqlErrorCode::ERRCODE_IO_ERROR,
                            format!("pg_idgen: could not write {STATE_FILE}: {e}"),
                            "pg_idgen",
                        )
                        .set_hint("Snowflake IDs wait until it can be written; check the data directory's space and permissions.")
                        .report(PgLogLevel::WARNING);
                    }
                }
            }
        }
        if !BackgroundWorker::wait_latch(Some(KEEPER_INTERVAL)) {
            break;
        }
    }
    // SAFETY: ends this process; the exit callback clears the pid.
    unsafe { pg_sys::proc_exit(1) };
}
