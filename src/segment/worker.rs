//! The per-database refill worker: a dynamic background worker, started on
//! demand by the first call that needs a range, that keeps every tag of its
//! database stocked and leaves when idle.
//!
//! Each pass looks at the database's slots, updates each tag's demand and
//! safe distance (`policy::Prefetcher`), and for every slot below its
//! distance (or past its prefetch mark) runs the distributor's CAS in a transaction of its own,
//! commits it synchronously, and only then publishes the range to shared
//! memory and wakes the waiting callers. A failure (a locked row, a
//! tampered row) is stored in the slot for its callers and logged with its
//! SQLSTATE; the worker carries on, and retries a failing tag with an
//! exponential back-off (at once when a caller asks). A slot whose row or
//! extension is gone is freed, so the worker can go idle and leave.
//!
//! A slot's database, tag and generation are read together under the
//! registry lock; the range is published only if the generation is still
//! the same, so a slot freed and reassigned (to another database, even)
//! while the refill ran never receives it.
//!
//! It never stands in the way of `DROP DATABASE`, `ALTER DATABASE ...
//! RENAME` or `CREATE DATABASE ... TEMPLATE`: between passes it probes the
//! lock those commands take on its database and exits when one waits for
//! it — unless other sessions are connected there, in which case the
//! command fails anyway and leaving would only stall their IDs. It holds no
//! lock on `id_segment` between refills, so `DROP EXTENSION` only waits for
//! a refill in flight.

use super::distributor;
use super::policy::{self, Prefetcher, RefillProblem};
use super::registry::{registry, Registry, Slot, SlotIdentity};
use crate::errors::{refill_problem_report, IdgenError, StoredError};
use crate::failpoints::failpoint;
use crate::gucs;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::pg_sys::PgTryBuilder;
use pgrx::prelude::*;
use pgrx::PgLogLevel;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long the worker sleeps between passes when nobody wakes it: the
/// longest a lost wake-up or a pending `DROP DATABASE` waits for it.
const PASS_INTERVAL: Duration = Duration::from_millis(200);

const WORKER_TYPE: &str = "pg_idgen refill worker";

/// Back-off of a tag whose refills fail: the first retry after this long,
/// doubling up to `MAX_BACKOFF_MS` (a caller asking retries at once).
const FIRST_BACKOFF_MS: i64 = 100;
const MAX_BACKOFF_MS: i64 = 10_000;

/// Refills of one pass that may lose a central server's CAS in a row.
const MAX_SERIALIZATION_RETRIES: u32 = 50;

/// Set once this process has attached to its database's worker entry.
static ATTACHED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Registers a refill worker for `database` unless one is running or
/// starting. Called by backends that need a range.
pub fn ensure_running(database: u32) -> Result<(), IdgenError> {
    let Some(registry) = registry() else {
        return Err(IdgenError::NotPreloaded);
    };
    if registry.wake_worker(database) || !registry.claim_worker_start(database) {
        return Ok(());
    }
    let started = BackgroundWorkerBuilder::new(&format!("{WORKER_TYPE} for database {database}"))
        .set_type(WORKER_TYPE)
        .set_library("pg_idgen")
        .set_function("pg_idgen_refill_worker_main")
        .set_argument(Some(pg_sys::Datum::from(database)))
        .enable_spi_access()
        .set_restart_time(None)
        .load_dynamic();
    if started.is_err() {
        registry.abandon_worker_start(database);
        let database = super::status::database_name(database);
        return Err(IdgenError::WorkerNotStarted { database });
    }
    Ok(())
}

/// Entry point, named in `bgw_function_name`.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_idgen_refill_worker_main(arg: pg_sys::Datum) {
    let database = arg.value() as u32;
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let Some(registry) = registry() else { return };
    // SAFETY: MyProcPid and MyLatch are set for every started process.
    let (pid, latch) = unsafe { (pg_sys::MyProcPid, pg_sys::MyLatch) };
    // SAFETY: the callback only touches shared memory; registered before
    // connecting, so a FATAL while connecting still clears the entry.
    unsafe { pg_sys::before_shmem_exit(Some(on_exit), pg_sys::Datum::from(database)) };
    failpoint("worker-start");
    // SAFETY: a registered background worker that asked for a database
    // connection; BYPASS_ALLOWCONN lets it serve the sessions still
    // connected to a database with ALLOW_CONNECTIONS false.
    unsafe {
        pg_sys::BackgroundWorkerInitializeConnectionByOid(
            pg_sys::Oid::from(database),
            pg_sys::InvalidOid,
            pg_sys::BGWORKER_BYPASS_ALLOWCONN,
        )
    };
    if !registry.worker_attach(database, pid, latch) {
        // Another worker serves this database: not a failed start.
        ATTACHED.store(true, Ordering::Relaxed);
        return;
    }
    ATTACHED.store(true, Ordering::Relaxed);
    let mut last_work = Instant::now();
    let mut memory = WorkerMemory::default();
    loop {
        if BackgroundWorker::sighup_received() {
            // SAFETY: in the worker's main loop, outside any transaction.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        if refill_pass(registry, database, &mut memory) {
            last_work = Instant::now();
        }
        if database_needed_exclusively(database) {
            break;
        }
        let idle_for = Duration::from_secs(gucs::WORKER_IDLE_TIMEOUT_S.get() as u64);
        if last_work.elapsed() >= idle_for {
            if registry.worker_detach(database, pid, latch) {
                last_work = Instant::now();
                continue;
            }
            return;
        }
        if !BackgroundWorker::wait_latch(Some(PASS_INTERVAL)) {
            break; // SIGTERM or postmaster death
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_exit(_code: i32, arg: pg_sys::Datum) {
    let Some(registry) = registry() else { return };
    let database = arg.value() as u32;
    if !ATTACHED.load(Ordering::Relaxed) {
        // It died before it could serve (its error is in the server log):
        // tell the callers now instead of letting them time out.
        registry.worker_start_failed(
            database,
            &StoredError {
                sqlstate: PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE as i32,
                message: format!(
                    "the pg_idgen refill worker for the database with OID {database} exited while starting"
                ),
                hint: "The server log has the worker's error (look for \"pg_idgen refill worker\"); the next call that needs IDs starts it again.".into(),
            },
        );
        return;
    }
    // SAFETY: MyProcPid is set in every process.
    registry.worker_gone(database, unsafe { pg_sys::MyProcPid });
}

/// What the worker remembers between passes: each tag's demand (by slot
/// index and generation), its failures, and the last error it logged for
/// each slot.
#[derive(Default)]
struct WorkerMemory {
    prefetchers: HashMap<(usize, u64), Prefetcher>,
    /// Slots whose last range came from a central server: they keep
    /// `pg_idgen.remote_cache_ahead` of demand cached.
    remote: std::collections::HashSet<(usize, u64)>,
    backoff: HashMap<(usize, u64), Backoff>,
    logged: HashMap<usize, String>,
}

/// A failing tag's retry schedule.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    failures: u32,
    retry_at_ms: i64,
}

impl Backoff {
    fn after_failure(previous: Option<Backoff>, now_ms: i64) -> Backoff {
        let failures = previous.map_or(0, |b| b.failures) + 1;
        let delay = (FIRST_BACKOFF_MS << (failures - 1).min(16)).min(MAX_BACKOFF_MS);
        Backoff {
            failures,
            retry_at_ms: now_ms + delay,
        }
    }
}

/// How a refill ended.
enum Refilled {
    Published {
        remote: bool,
    },
    Failed,
    /// The slot's row or extension is gone: the slot was freed.
    Gone,
    /// The slot was freed or reassigned while the refill ran.
    Superseded,
}

/// One look at every slot of the database; returns whether there was work
/// (a range published, or a caller asking) — failures alone are not work,
/// so a worker whose tags all fail still goes idle and leaves.
fn refill_pass(registry: &Registry, database: u32, memory: &mut WorkerMemory) -> bool {
    let percent = gucs::PREFETCH_PERCENT.get() as u32;
    let max_ahead = gucs::MAX_IDS_AHEAD.get() as u64;
    let now_ms = super::registry::now_ms();
    let mut worked = false;
    let live = |&(index, generation): &(usize, u64)| {
        registry.slot(index).generation.load(Ordering::Relaxed) == generation
    };
    memory.prefetchers.retain(|key, _| live(key));
    memory.backoff.retain(|key, _| live(key));
    memory.remote.retain(live);
    let remote_horizon_ms = gucs::REMOTE_CACHE_AHEAD_S.get() as u64 * 1000;
    for (index, slot) in registry.slots() {
        let identity = {
            let shared = registry.lock(false);
            slot.identity(&shared)
        };
        let Some(identity) = identity.filter(|id| id.database == database) else {
            continue;
        };
        let key = (index, identity.generation);
        let prefetcher = memory.prefetchers.entry(key).or_default();
        let status = slot.status();
        let step = slot.stats.step.load(Ordering::Relaxed).max(1) as u64;
        let waits = slot.stats.waits.load(Ordering::Relaxed);
        let horizon_ms = match memory.remote.contains(&key) {
            true => remote_horizon_ms.max(policy::HORIZON_MS),
            false => policy::HORIZON_MS,
        };
        prefetcher.observe(now_ms, status.ids_taken, waits, step, max_ahead, horizon_ms);
        slot.stats
            .safe_distance
            .store(prefetcher.distance(), Ordering::Relaxed);
        slot.stats
            .ids_per_second
            .store(prefetcher.ids_per_second() as u64, Ordering::Relaxed);
        let requested = slot.refill_requested.swap(false, Ordering::SeqCst);
        worked |= requested;
        // A slot that never got a range is only tried when a caller asks;
        // a failing one waits out its back-off unless a caller asks.
        if status.published == 0 && !requested {
            continue;
        }
        if !requested
            && memory
                .backoff
                .get(&key)
                .is_some_and(|b| now_ms < b.retry_at_ms)
        {
            continue;
        }
        let Some(steps) = prefetcher.plan(&status, step, percent) else {
            continue;
        };
        failpoint("worker-before-refill");
        match refill(
            registry,
            index,
            slot,
            &identity,
            steps,
            percent,
            &mut memory.logged,
        ) {
            Refilled::Published { remote } => {
                memory.backoff.remove(&key);
                if remote {
                    memory.remote.insert(key);
                } else {
                    memory.remote.remove(&key);
                }
                worked = true;
            }
            Refilled::Failed => {
                let previous = memory.backoff.get(&key).copied();
                memory
                    .backoff
                    .insert(key, Backoff::after_failure(previous, now_ms));
            }
            Refilled::Gone | Refilled::Superseded => {}
        }
    }
    worked
}

/// Takes `steps` steps of the slot's tag and publishes them, or stores the
/// error for its callers.
fn refill(
    registry: &Registry,
    index: usize,
    slot: &Slot,
    identity: &SlotIdentity,
    steps: u64,
    percent: u32,
    logged: &mut HashMap<usize, String>,
) -> Refilled {
    let SlotIdentity {
        tag, generation, ..
    } = identity;
    let generation = *generation;
    let status = slot.status();
    let bound_table = slot.table_oid();
    let handed_out = (status.published > 0 && status.high_water > 0).then_some(status.high_water);
    let started = Instant::now();
    // A CAS that lost to another allocator on a central server fails with
    // a serialization error (its transaction is REPEATABLE READ): take the
    // range again in a new transaction.
    let mut serialization_failures = 0;
    let outcome = loop {
        let outcome =
            in_transaction(|| distributor::take_range(tag, steps, bound_table, handed_out));
        match outcome {
            Err(e)
                if e.sqlstate == PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE as i32
                    && serialization_failures < MAX_SERIALIZATION_RETRIES =>
            {
                serialization_failures += 1;
                slot.stats.cas_conflicts.fetch_add(1, Ordering::Relaxed);
            }
            outcome => break outcome,
        }
    };
    failpoint("worker-before-publish");
    let error = match outcome {
        Ok(Ok(Ok(granted))) => {
            let exclusive = registry.lock(true);
            if slot.generation.load(Ordering::Acquire) != generation {
                return Refilled::Superseded; // freed while we refilled: a gap
            }
            let mark = policy::mark_offset(granted.len, percent);
            match slot.publish(
                &exclusive,
                granted.table_oid,
                granted.first,
                granted.len,
                mark,
            ) {
                Ok(()) => {
                    let stats = &slot.stats;
                    stats.refills.fetch_add(1, Ordering::Relaxed);
                    stats
                        .cas_conflicts
                        .fetch_add(granted.cas_conflicts, Ordering::Relaxed);
                    stats.step.store(granted.step, Ordering::Relaxed);
                    stats.last_refill_ids.store(granted.len, Ordering::Relaxed);
                    stats.last_refill_steps.store(steps, Ordering::Relaxed);
                    // SAFETY: plain read of the current time.
                    stats
                        .last_refill_at
                        .store(unsafe { pg_sys::GetCurrentTimestamp() }, Ordering::Relaxed);
                    stats
                        .last_refill_micros
                        .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                    drop(exclusive);
                    logged.remove(&index);
                    slot.broadcast();
                    return Refilled::Published {
                        remote: granted.remote,
                    };
                }
                Err(e) => StoredError {
                    sqlstate: PgSqlErrorCode::ERRCODE_INTERNAL_ERROR as i32,
                    message: format!(
                        "range {}..{} of segment tag \"{tag}\" could not be cached: {e:?}",
                        granted.first,
                        granted.first + (granted.len as i64 - 1)
                    ),
                    hint: "This is a bug in pg_idgen; the range is skipped and no ID repeats."
                        .into(),
                },
            }
        }
        Ok(Ok(Err(problem))) => {
            let gone = matches!(
                problem,
                RefillProblem::NoRow
                    | RefillProblem::NoRemoteRow { .. }
                    | RefillProblem::ForeignTableGone { .. }
                    | RefillProblem::NoExtension
            );
            let error = refill_problem_report(&problem, tag);
            if gone {
                // Tell the callers waiting now, then free the slot: nothing
                // is left to refill it from.
                store_error(registry, slot, generation, &error);
                registry.free_generation(index, generation);
                logged.remove(&index);
                return Refilled::Gone;
            }
            error
        }
        Ok(Err(spi_error)) => StoredError {
            sqlstate: PgSqlErrorCode::ERRCODE_INTERNAL_ERROR as i32,
            message: format!("refill of segment tag \"{tag}\" failed: {spi_error}"),
            hint: "Check the server log.".into(),
        },
        Err(caught) if caught.sqlstate == PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE as i32 => {
            StoredError {
                message: "its id_segment row (or the table) is locked by another transaction".into(),
                hint: "A transaction holds the row (SELECT ... FOR UPDATE, or an UPDATE or DELETE not yet committed) or a lock on id_segment (ALTER EXTENSION pg_idgen UPDATE, DDL): end it. pg_locks and pg_stat_activity show which session it is.".into(),
                ..caught
            }
        }
        Err(caught) => caught,
    };
    store_error(registry, slot, generation, &error);
    if logged.get(&index) != Some(&error.message) {
        IdgenError::log(&error, PgLogLevel::LOG);
        logged.insert(index, error.message);
    }
    Refilled::Failed
}

/// Stores a failed refill's error in the slot, if it still has
/// `generation`, and wakes its waiting callers.
fn store_error(registry: &Registry, slot: &Slot, generation: u64, error: &StoredError) {
    {
        let exclusive = registry.lock(true);
        if slot.generation.load(Ordering::Acquire) == generation {
            slot.set_error(&exclusive, error);
        }
    }
    slot.broadcast();
}

// utils/timeout.h, which pgrx does not bind; `TimeoutId` has the same
// first members in PostgreSQL 15 to 18.
const STATEMENT_TIMEOUT: std::ffi::c_int = 3;
unsafe extern "C-unwind" {
    fn enable_timeout_after(id: std::ffi::c_int, delay_ms: std::ffi::c_int);
    fn disable_timeout(id: std::ffi::c_int, keep_indicator: bool);
}

/// Runs `body` in a transaction of its own and commits it; a PostgreSQL
/// error anywhere in it (including the commit) aborts the transaction and
/// comes back as the error's report.
pub(crate) fn in_transaction<R>(body: impl FnOnce() -> R) -> Result<R, StoredError> {
    // The body runs once; if it fails, nothing of it is used again.
    let body = std::panic::AssertUnwindSafe(body);
    PgTryBuilder::new(move || {
        let body = body;
        // SAFETY: the worker is outside any transaction here; every start
        // is matched by the commit below or the abort in the catch. The
        // statement timeout (the handler InitPostgres registered) bounds
        // the whole refill, commit included: through postgres_fdw it is a
        // cancel of the remote statement. It is disarmed on both paths.
        unsafe {
            enable_timeout_after(STATEMENT_TIMEOUT, gucs::REMOTE_TIMEOUT_MS.get());
            pg_sys::SetCurrentStatementStartTimestamp();
            pg_sys::StartTransactionCommand();
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        }
        let result = (body.0)();
        // SAFETY: matches the push and start above.
        unsafe {
            pg_sys::PopActiveSnapshot();
            pg_sys::CommitTransactionCommand();
            disable_timeout(STATEMENT_TIMEOUT, false);
        }
        Ok(result)
    })
    .catch_others(|caught| {
        // SAFETY: we are in the worker's top level with an aborted (or no)
        // transaction; this is how a background worker recovers from ERROR.
        unsafe {
            disable_timeout(STATEMENT_TIMEOUT, false);
            pg_sys::AbortCurrentTransaction();
        }
        Err(stored_from(caught))
    })
    .execute()
}

fn stored_from(caught: CaughtError) -> StoredError {
    let report = match &caught {
        CaughtError::PostgresError(r)
        | CaughtError::ErrorReport(r)
        | CaughtError::RustPanic { ereport: r, .. } => r,
    };
    let sqlstate = report.sql_error_code() as i32;
    // A connection problem (class 08, e.g. postgres_fdw's "could not
    // connect to server") says what went wrong in its detail.
    let connection_class = PgSqlErrorCode::ERRCODE_CONNECTION_EXCEPTION as i32 & 0xFFF;
    let message = match report.detail() {
        Some(detail) if sqlstate & 0xFFF == connection_class => {
            let detail: Vec<&str> = detail.split_whitespace().collect();
            format!("{}: {}", report.message(), detail.join(" "))
        }
        _ => report.message().to_string(),
    };
    StoredError {
        sqlstate,
        message,
        hint: report.hint().unwrap_or("Check the server log.").to_string(),
    }
}

/// Whether a session waits for a lock that `DROP DATABASE`, `ALTER DATABASE
/// ... RENAME` or `CREATE DATABASE ... TEMPLATE` take on the database, which
/// also wait for every other process connected to it, and the worker is
/// the only one left: then it must go. While sessions are connected the
/// command fails anyway (after 5 s), so the worker stays and serves them;
/// it looks again at every pass.
fn database_needed_exclusively(database: u32) -> bool {
    // SAFETY: reads the proc array under its own lock; background workers
    // (this one included) are not counted.
    if unsafe { pg_sys::CountDBConnections(pg_sys::Oid::from(database)) } > 0 {
        return false;
    }
    // SAFETY: a zeroed LOCKTAG is valid; the fields set below are the
    // SET_LOCKTAG_OBJECT layout for a shared catalog object.
    let mut tag: pg_sys::LOCKTAG = unsafe { std::mem::zeroed() };
    tag.locktag_field1 = 0;
    tag.locktag_field2 = pg_sys::DatabaseRelationId.to_u32();
    tag.locktag_field3 = database;
    tag.locktag_field4 = 0;
    tag.locktag_type = pg_sys::LockTagType::LOCKTAG_OBJECT as u8;
    tag.locktag_lockmethodid = pg_sys::DEFAULT_LOCKMETHOD as u8;
    let mode = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
    // SAFETY: a session lock needs no resource owner; dontWait makes this
    // return at once instead of queueing behind the waiting command.
    let result = unsafe { pg_sys::LockAcquire(&tag, mode, true, true) };
    if result == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL {
        return true;
    }
    // SAFETY: releases exactly the session lock acquired above.
    unsafe { pg_sys::LockRelease(&tag, mode, true) };
    false
}
