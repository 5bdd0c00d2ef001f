//! The cluster's snowflake state in shared memory: both generators, what
//! the snowflake keeper and the lease keeper publish about themselves, and
//! `next_id`, the call that hands out an ID and waits (for the clock, the
//! keeper or a lease) when it must. The layout is made at start from the
//! settings (`config.rs`) and the state file (`state_file.rs`).
//!
//! # Locking protocol
//!
//! None: both generators are lock-free (see `generator.rs`); the keeper's
//! latch pointer, pid and write status are atomics written by the keeper
//! alone (`keeper.rs`; its exit callback clears them); `LeaseShared` is
//! written by the lease keeper alone (atomics, and two texts under a
//! sequence counter, odd while being written). The structure is laid out
//! by the postmaster (startup hook, again after a crash), from the state
//! file, before any backend exists.
//!
//! # The state file at start
//!
//! `pg_idgen_snowflake.state` in the data directory holds, per generator,
//! a high-water ID no ID issued has passed (the keeper writes it before any
//! caller may issue up to it). At start both generators begin above it, so
//! no restart — after a crash, with the clock set back, with other settings
//! — repeats an ID of an earlier run. Only a missing file is a first start:
//! a file that cannot be read or parsed stops the server start, naming the
//! file and the recovery. The keeper then raises both floors to the
//! WAL-logged mark (`wal_mark.rs`) before anything is issued, which is what
//! carries the mark to standbys, restores and pg_upgrade.

use super::clock::{now_unix_ms, to_timestamptz, SystemClock};
use super::config::config;
use super::generator::{lead_sleep_ms, Generator, Refusal, WaitsOfOneCall};
use super::layout::Layout;
use super::state_file::{self, Saved, STATE_FILE};
use crate::errors::IdgenError;
use crate::gucs;
use pgrx::prelude::*;
use std::ptr::null_mut;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU64, AtomicU8, Ordering,
};
use std::time::Duration;

/// How long the postmaster waits before it starts a keeper that exited
/// (`keeper.rs` registers the keeper with it).
pub const KEEPER_RESTART: Duration = Duration::from_secs(1);

/// How long a call waits for the keeper to persist a time, at least, even
/// with a smaller `pg_idgen.snowflake_max_wait` (which bounds waits for the
/// clock): a keeper write is normal operation, not a failure. Twice the
/// keeper's restart delay, and far above a healthy fsync.
const KEEPER_WAIT_MIN_MS: i64 = 2 * KEEPER_RESTART.as_millis() as i64;

/// How long a call that waits for a lease sleeps between looks (only at
/// shared memory: the lease keeper hands a lease over on its own
/// schedule).
const LEASE_WAIT_SLICE_MS: i64 = 10;

/// How long a call that waits for the keeper sleeps between looks: a
/// state-file write is one fsync, often under a millisecond.
const KEEPER_WAIT_SLICE_MS: i64 = 1;

/// Room for a problem with its fix (an `ALTER SERVER` with the options to
/// pin is about 300 bytes); longer texts are cut at a character boundary.
const TEXT_BYTES: usize = 480;

/// A short text written by one process and read by any, under a sequence
/// counter (odd while it is being written; a reader retries).
#[repr(C)]
pub struct SharedText {
    seq: AtomicU64,
    len: AtomicU64,
    bytes: [AtomicU8; TEXT_BYTES],
}

impl SharedText {
    fn new() -> SharedText {
        SharedText {
            seq: AtomicU64::new(0),
            len: AtomicU64::new(0),
            bytes: std::array::from_fn(|_| AtomicU8::new(0)),
        }
    }

    pub fn set(&self, text: &str) {
        let text = crate::errors::truncate_utf8(text, TEXT_BYTES);
        self.seq.fetch_add(1, Ordering::AcqRel);
        for (slot, byte) in self.bytes.iter().zip(text.bytes()) {
            slot.store(byte, Ordering::Relaxed);
        }
        self.len.store(text.len() as u64, Ordering::Relaxed);
        self.seq.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether it holds `text` as `set` would store it (cut to its room):
    /// what "the same problem as before" means to a caller that logs a
    /// problem once.
    pub fn holds(&self, text: &str) -> bool {
        self.get() == crate::errors::truncate_utf8(text, TEXT_BYTES)
    }

    pub fn get(&self) -> String {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            let len = (self.len.load(Ordering::Relaxed) as usize).min(TEXT_BYTES);
            let bytes: Vec<u8> = self.bytes[..len]
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect();
            std::sync::atomic::fence(Ordering::Acquire);
            if before.is_multiple_of(2) && self.seq.load(Ordering::Relaxed) == before {
                return String::from_utf8_lossy(&bytes).into_owned();
            }
            std::hint::spin_loop();
        }
    }
}

/// What the lease keeper (`lease_keeper.rs`) holds, for `snowflake_status`
/// and waiting callers; written by the lease keeper alone.
#[repr(C)]
pub struct LeaseShared {
    pub pid: AtomicI32,
    /// The machine id held (-1: none).
    pub machine: AtomicI64,
    /// When this server stops issuing unless it renews (Unix ms, its own
    /// clock), 0 before the first claim.
    pub until_unix_ms: AtomicI64,
    pub renewals: AtomicU64,
    pub failures: AtomicU64,
    /// The foreign server and table the lease comes from.
    pub source: SharedText,
    /// Why no lease is held, or the last renewal's error ("" when fine).
    pub(super) problem: SharedText,
}

impl LeaseShared {
    pub fn new() -> LeaseShared {
        LeaseShared {
            pid: AtomicI32::new(0),
            machine: AtomicI64::new(-1),
            until_unix_ms: AtomicI64::new(0),
            renewals: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            source: SharedText::new(),
            problem: SharedText::new(),
        }
    }

    pub fn problem(&self) -> String {
        match self.problem.get() {
            p if p.is_empty() && self.until_unix_ms.load(Ordering::Relaxed) > 0 => {
                "the lease ran out, and the lease keeper has not renewed it or claimed one since (it may be waiting for the central server, at most pg_idgen.remote_timeout)".into()
            }
            p if p.is_empty() => "the lease keeper has not claimed one yet".into(),
            p => p,
        }
    }

    /// The last problem, if any.
    pub fn last_problem(&self) -> Option<String> {
        Some(self.problem.get()).filter(|p| !p.is_empty())
    }
}

impl Default for LeaseShared {
    fn default() -> Self {
        Self::new()
    }
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
    /// Why the keeper cannot read or commit the WAL-logged mark in
    /// `pg_idgen.snowflake_database` ("" when it can): callers that wait
    /// for it are told this.
    mark_problem: SharedText,
    /// The mark committed in `snowflake_high_water` as the keeper last read
    /// or wrote it (Unix ms; -1: none). On a standby: the replayed one.
    wal_mark_unix_ms: AtomicI64,
    /// With `pg_idgen.machine_id = 'lease'`: what the lease keeper holds.
    /// With `'citus'`: the group id the snowflake keeper gave the
    /// generators (`machine`), where it comes from (`source`) and why
    /// there is none (`problem`).
    pub lease: LeaseShared,
    /// With `pg_idgen.machine_id = 'citus'`: the node's group id as the
    /// keeper last read it, also one that does not fit the machine bits
    /// (-1: none read yet, or the node is in no Citus cluster).
    pub citus_group: AtomicI64,
    /// Another node of the Citus cluster has this node's machine id and
    /// layout (`keeper.rs`): snowflake IDs are refused while it lasts.
    machine_shared: AtomicBool,
    /// Why this node's machine id cannot be trusted ("" when it can).
    machine_problem: SharedText,
    /// The state file was there when the server started.
    pub state_file_found: AtomicBool,
}

static SNOWFLAKE: AtomicPtr<Snowflake> = AtomicPtr::new(null_mut());

/// The snowflake state, or `None` when the library was not preloaded.
#[inline]
pub fn snowflake() -> Option<&'static Snowflake> {
    // SAFETY: set by the postmaster's startup hook to shared memory that
    // lives as long as every process that can see it.
    unsafe { SNOWFLAKE.load(Ordering::Acquire).as_ref() }
}

/// The snowflake state, or the ERROR that says the library must be
/// preloaded.
#[track_caller]
pub fn snowflake_or_raise() -> &'static Snowflake {
    let Some(state) = snowflake() else {
        IdgenError::NotPreloaded.raise()
    };
    state
}

pub fn shmem_size() -> usize {
    std::mem::size_of::<Snowflake>()
}

/// Reads the state file: `None` only when it does not exist; anything that
/// cannot be read or parsed raises (at server start: the server stops).
fn read_state_file() -> Option<Saved> {
    match state_file::read(std::path::Path::new(".")) {
        Ok(saved) => saved,
        Err(e) => IdgenError::SnowflakeStateFile {
            problem: e.problem,
            io: e.io,
        }
        .raise(),
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
/// `found` is false); the caller holds the layout lock (`shmem.rs`).
pub unsafe fn attach(base: *mut u8, found: bool) {
    let Some(config) = config() else {
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
        let given_at_run_time = config.lease || config.citus;
        let javascript_ok =
            !given_at_run_time && javascript_layout.check_machine(config.machine).is_ok();
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
                    mark_problem: SharedText::new(),
                    wal_mark_unix_ms: AtomicI64::new(-1),
                    lease: LeaseShared::new(),
                    citus_group: AtomicI64::new(-1),
                    machine_shared: AtomicBool::new(false),
                    machine_problem: SharedText::new(),
                    state_file_found: AtomicBool::new(saved.is_some()),
                },
            )
        };
        if given_at_run_time {
            // SAFETY: just written above.
            let written = unsafe { &*state };
            written.main.await_lease();
            written.javascript.await_lease();
        }
    }
    SNOWFLAKE.store(state, Ordering::Release);
}

impl Snowflake {
    /// What the keeper found wrong with the machine id (`None`: nothing):
    /// a proven namesake refuses IDs from now on; any problem is logged
    /// once, as a WARNING.
    pub fn set_machine_problem(&self, problem: Option<IdgenError>) {
        let proven = matches!(
            problem,
            Some(IdgenError::SnowflakeMachineIdShared { proven: true, .. })
        );
        self.machine_shared.store(proven, Ordering::Release);
        let text = problem
            .as_ref()
            .map_or(String::new(), |p| p.stored().message);
        if !self.machine_problem.holds(&text) {
            if let Some(problem) = problem {
                problem.warn();
            }
        }
        self.machine_problem.set(&text);
    }

    /// Raises the proven namesake's error, if there is one (one relaxed
    /// load in the common case).
    pub fn refuse_if_machine_shared(&self) {
        if self.machine_shared.load(Ordering::Relaxed) {
            IdgenError::SnowflakeMachineRefused {
                problem: self.machine_problem.get(),
            }
            .raise();
        }
    }

    /// Why the machine id cannot be used or trusted, for the status view.
    pub fn machine_problem(&self) -> Option<String> {
        Some(self.machine_problem.get()).filter(|p| !p.is_empty())
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

    /// Called by the keeper as it starts: where to wake it, and its pid.
    pub(super) fn keeper_started(&self, pid: i32, latch: *mut pg_sys::Latch) {
        self.keeper_pid.store(pid, Ordering::Release);
        self.keeper_latch.store(latch, Ordering::Release);
    }

    /// Called by the keeper's exit callback: it no longer runs.
    pub(super) fn keeper_gone(&self) {
        self.keeper_latch.store(null_mut(), Ordering::Release);
        self.keeper_pid.store(0, Ordering::Release);
    }

    /// Called by the keeper after each write of the state file: the OS
    /// error it met, or 0.
    pub(super) fn keeper_wrote(&self, errno: i32) {
        self.write_errno.store(errno, Ordering::Release);
    }

    /// Called by the keeper: why it cannot read or commit the WAL-logged
    /// mark ("" once it can again).
    pub(super) fn set_mark_problem(&self, problem: &str) {
        if !self.mark_problem.holds(problem) {
            self.mark_problem.set(problem);
        }
    }

    /// Why the WAL-logged mark cannot be read or committed, if so.
    pub fn mark_problem(&self) -> Option<String> {
        Some(self.mark_problem.get()).filter(|p| !p.is_empty())
    }

    /// Called by the keeper after reading or committing the WAL-logged
    /// mark (Unix ms).
    pub(super) fn set_wal_mark(&self, unix_ms: i64) {
        self.wal_mark_unix_ms.store(unix_ms, Ordering::Release);
    }

    /// The WAL-logged mark (Unix ms) as the keeper last read or wrote it.
    pub fn wal_mark_unix_ms(&self) -> Option<i64> {
        Some(self.wal_mark_unix_ms.load(Ordering::Acquire)).filter(|&m| m >= 0)
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
        let mut waits = WaitsOfOneCall::default();
        loop {
            waits.note(&generator.stats, &refusal);
            let waited_ms = started.elapsed().as_millis() as i64;
            let sleep_ms = match refusal {
                Refusal::Exhausted => {
                    let layout = generator.layout();
                    IdgenError::SnowflakeExhausted {
                        generator: self.generator_name(generator),
                        time_bits: layout.time_bits,
                        ended: to_timestamptz(layout.last_unix_ms()).to_string(),
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
                    // The lease keeper follows its own schedule (a claim
                    // waits out a row, a renewal its third of the lease):
                    // a waiting call cannot make it come sooner, and
                    // waking it would only send it to the central server
                    // once per call and slice.
                    if waited_ms >= max_wait {
                        match refusal {
                            Refusal::NoLease if config().is_some_and(|c| c.citus) => {
                                IdgenError::SnowflakeNoCitusGroup {
                                    waited_ms,
                                    group: self.citus_group.load(Ordering::Acquire),
                                    machine_bits: generator.layout().machine_bits,
                                    why: self.lease_problem(),
                                }
                                .raise()
                            }
                            Refusal::NoLease => IdgenError::SnowflakeNoLease {
                                waited_ms,
                                why: self.lease_problem(),
                            }
                            .raise(),
                            _ => IdgenError::SnowflakeLeaseCeiling {
                                waited_ms,
                                why: self.lease.last_problem(),
                            }
                            .raise(),
                        }
                    }
                    LEASE_WAIT_SLICE_MS
                }
                Refusal::NotPersisted => {
                    self.wake_keeper();
                    let running = self.keeper_pid().is_some();
                    let errno = self.write_errno.load(Ordering::Acquire);
                    // A keeper write is normal operation: it gets at least
                    // KEEPER_WAIT_MIN_MS, unless it is known not to come.
                    // A keeper that cannot log the mark says why: a call waits
                    // a keeper start's worth for it to recover, not longer.
                    let limit = match (running, errno, self.mark_problem()) {
                        (_, _, Some(_)) => KEEPER_WAIT_MIN_MS,
                        (true, 0, None) => max_wait.max(KEEPER_WAIT_MIN_MS),
                        _ => max_wait,
                    };
                    if waited_ms >= limit {
                        if let Some(problem) = self.mark_problem() {
                            IdgenError::SnowflakeMarkNotLogged { problem, waited_ms }.raise()
                        }
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
                    KEEPER_WAIT_SLICE_MS
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
