//! The cluster's snowflake state in shared memory, the settings it is built
//! from, the state file that carries its high-water mark across restarts,
//! and the keeper worker that writes that file.
//!
//! # Locking protocol
//!
//! None: both generators are lock-free (see `generator.rs`); the worker's
//! latch pointer and pid are atomics written by the worker alone. The
//! structure is laid out once by the postmaster (startup hook), from the
//! state file, before any backend exists.
//!
//! # The state file
//!
//! `pg_idgen_snowflake.state` in the data directory holds one number: a
//! time (ms since the Unix epoch) no ID has reached. The keeper writes it
//! ahead of the clock (`PERSIST_AHEAD_MS`), to a temporary file that is
//! fsync'd and then renamed over the old one (and the directory fsync'd),
//! so it is always whole. Only after that may callers issue IDs up to it.
//! At start, both generators begin above it, so no restart — after a crash,
//! with the clock set back — repeats a time of an earlier run.

use super::generator::{Generator, Refusal, WallClock};
use super::layout::{machine_id_from_setting, parse_epoch, Layout, UnixMs};
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

/// How far ahead of the clock the keeper persists the high-water mark
/// (and at least an eighth of it above the last time issued; see
/// `Generator::mark_to_persist`). A restart resumes at most about this far
/// ahead of the clock at the crash; in steady state the file is rewritten
/// about once a second.
pub const PERSIST_AHEAD_MS: i64 = 2_000;

/// How often the keeper looks at the generators when nobody wakes it.
const KEEPER_INTERVAL: Duration = Duration::from_millis(100);

/// The settings, checked; computed in `_PG_init` (the postmaster), so a
/// bad value stops the server from starting.
#[derive(Debug, Clone, Copy)]
pub struct SnowflakeConfig {
    pub layout: Layout,
    pub machine: i64,
}

static CONFIG: AtomicPtr<SnowflakeConfig> = AtomicPtr::new(null_mut());

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
    let machine_text = setting_text(&gucs::MACHINE_ID);
    let machine = machine_id_from_setting(&machine_text, &hostname()).unwrap_or_else(|problem| {
        IdgenError::BadSetting {
            name: "pg_idgen.machine_id",
            value: machine_text.clone(),
            problem,
            hint: "Set it to a number, or to 'hostname' on hosts named like pg-3.".into(),
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
    CONFIG.store(
        Box::into_raw(Box::new(SnowflakeConfig { layout, machine })),
        Ordering::Release,
    );
}

/// The cluster's snowflake state.
#[repr(C)]
pub struct Snowflake {
    pub main: Generator,
    pub javascript: Generator,
    /// Whether the machine id fits the JavaScript-safe layout.
    pub javascript_ok: AtomicBool,
    keeper_latch: AtomicPtr<pg_sys::Latch>,
    pub keeper_pid: AtomicI32,
    /// The mark last written to the state file (ms since the Unix epoch).
    pub persisted_unix_ms: AtomicI64,
    /// The mark found in the state file at start (0: none).
    pub restarted_above_unix_ms: AtomicI64,
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

/// Reads the state file's mark, if there is a readable one.
fn read_state_file() -> Option<UnixMs> {
    let text = std::fs::read_to_string(STATE_FILE).ok()?;
    let mark = text.trim().parse::<UnixMs>();
    if mark.is_err() {
        pgrx::warning!(
            "pg_idgen: ignoring unreadable {STATE_FILE}: {:?}",
            text.trim()
        );
    }
    mark.ok()
}

/// Lays out the state in shared memory; called by the startup hook.
///
/// # Safety
/// `base` points at `shmem_size()` bytes of fresh shared memory (when
/// `found` is false); the caller holds AddinShmemInitLock.
pub unsafe fn attach(base: *mut u8, found: bool) {
    let Some(config) = CONFIG.load(Ordering::Acquire).as_ref() else {
        return;
    };
    let state = base as *mut Snowflake;
    if !found {
        let mark = read_state_file();
        let since_epoch = |layout: &Layout| mark.map(|m| m - layout.epoch_ms);
        let javascript_layout = Layout::javascript_safe(config.layout.epoch_ms);
        let javascript_ok = javascript_layout.check_machine(config.machine).is_ok();
        std::ptr::write(
            state,
            Snowflake {
                main: Generator::new(config.layout, config.machine, since_epoch(&config.layout)),
                javascript: Generator::new(
                    javascript_layout,
                    if javascript_ok { config.machine } else { 0 },
                    since_epoch(&javascript_layout),
                ),
                javascript_ok: AtomicBool::new(javascript_ok),
                keeper_latch: AtomicPtr::new(null_mut()),
                keeper_pid: AtomicI32::new(0),
                persisted_unix_ms: AtomicI64::new(mark.unwrap_or(0)),
                restarted_above_unix_ms: AtomicI64::new(mark.unwrap_or(0)),
            },
        );
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
}

impl Snowflake {
    fn wake_keeper(&self) {
        let latch = self.keeper_latch.load(Ordering::Acquire);
        if !latch.is_null() {
            // SAFETY: a PGPROC latch in shared memory; setting the latch of
            // a process that just exited is harmless.
            unsafe { pg_sys::SetLatch(latch) };
        }
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

    #[cold]
    fn next_id_slow(&self, generator: &Generator, mut refusal: Refusal, max_lead: i64) -> i64 {
        let started = std::time::Instant::now();
        let max_wait = Duration::from_millis(gucs::SNOWFLAKE_MAX_WAIT_MS.get() as u64);
        loop {
            let sleep_ms = match refusal {
                Refusal::Exhausted => IdgenError::SnowflakeExhausted.raise(),
                Refusal::NotPersisted => {
                    self.wake_keeper();
                    1
                }
                Refusal::TooFarAhead { lead_ms } => (lead_ms - max_lead).clamp(1, 100),
            };
            let waited = started.elapsed();
            if waited >= max_wait {
                let waited_ms = waited.as_millis() as i64;
                match refusal {
                    Refusal::TooFarAhead { lead_ms } => {
                        IdgenError::SnowflakeClockBehind { lead_ms, waited_ms }.raise()
                    }
                    _ => IdgenError::SnowflakeNotPersisted { waited_ms }.raise(),
                }
            }
            let sleep_ms = sleep_ms.min((max_wait - waited).as_millis().max(1) as i64);
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

/// Registers the keeper; called from `_PG_init` while preloading.
pub fn register_keeper() {
    BackgroundWorkerBuilder::new("pg_idgen snowflake keeper")
        .set_type("pg_idgen snowflake keeper")
        .set_library("pg_idgen")
        .set_function("pg_idgen_snowflake_keeper_main")
        .enable_shmem_access(None)
        .set_start_time(BgWorkerStartTime::PostmasterStart)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// Writes `mark` durably: temporary file, fsync, rename, fsync of the
/// directory.
fn write_state_file(mark: UnixMs) -> std::io::Result<()> {
    let mut file = std::fs::File::create(STATE_FILE_TMP)?;
    writeln!(file, "{mark}")?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(STATE_FILE_TMP, STATE_FILE)?;
    std::fs::File::open(".")?.sync_all()
}

/// The keeper's entry point, named in `bgw_function_name`.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_idgen_snowflake_keeper_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let Some(state) = snowflake() else { return };
    // SAFETY: MyLatch and MyProcPid are set in every started process.
    unsafe {
        state.keeper_pid.store(pg_sys::MyProcPid, Ordering::Relaxed);
        state.keeper_latch.store(pg_sys::MyLatch, Ordering::Release);
    }
    let mut failing = false;
    loop {
        if BackgroundWorker::sighup_received() {
            // SAFETY: outside any transaction, in the worker's main loop.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let now = now_unix_ms();
        let wanted = [&state.main, &state.javascript]
            .iter()
            .filter_map(|g| {
                g.mark_to_persist(now, PERSIST_AHEAD_MS)
                    .map(|m| m + g.layout().epoch_ms)
            })
            .max();
        if let Some(mark) = wanted {
            let mark = mark.max(state.persisted_unix_ms.load(Ordering::Relaxed));
            match write_state_file(mark) {
                Ok(()) => {
                    state.persisted_unix_ms.store(mark, Ordering::Relaxed);
                    for g in [&state.main, &state.javascript] {
                        g.persisted(mark - g.layout().epoch_ms);
                    }
                    failing = false;
                }
                Err(e) if !failing => {
                    failing = true;
                    pgrx::pg_sys::panic::ErrorReport::new(
                        PgSqlErrorCode::ERRCODE_IO_ERROR,
                        format!("pg_idgen: could not write {STATE_FILE}: {e}"),
                        "pg_idgen",
                    )
                    .set_hint("Snowflake IDs wait until it can be written; check the data directory's space and permissions.")
                    .report(PgLogLevel::WARNING);
                }
                Err(_) => {}
            }
        }
        if !BackgroundWorker::wait_latch(Some(KEEPER_INTERVAL)) {
            break;
        }
    }
    state.keeper_latch.store(null_mut(), Ordering::Release);
}
