//! The refill workers: dynamic background workers, started on demand by
//! the first call that needs a range, that keep the tags of their database
//! stocked and leave when idle. A database has one for its local tags and
//! one per central server its attached tags draw from (a lane,
//! `registry::WorkerKey`): a central server that is slow, locked or cut
//! off holds up only its own lane's worker, never the local tags or
//! another central server's. A slot starts in the local lane; the worker
//! that finds its tag attached to a central server hands it to that
//! server's lane (and back, should it be created locally again).
//!
//! Each pass looks at the database's slots, updates each tag's demand and
//! safe distance (`policy::Prefetcher`), and for every slot below its
//! distance (or past its prefetch mark) runs the distributor's CAS in a
//! transaction of its own (bounded by `pg_idgen.remote_timeout`), commits
//! it synchronously, and only then publishes the range to shared memory
//! and wakes the waiting callers. A failure (a locked row, a
//! tampered row) is stored in the slot for its callers and logged with its
//! SQLSTATE (a range shorter than asked — something on `id_segment` held
//! the update back — is logged once as a WARNING); the worker carries on,
//! and retries a failing tag with an exponential back-off (at once when a
//! caller asks). A slot whose row or
//! extension is gone is freed, so the worker can go idle and leave.
//!
//! A slot's database, tag and generation are read together under the
//! registry lock; the range is published only if the generation is still
//! the same, so a slot freed and reassigned (to another database, even)
//! while the refill ran never receives it.
//!
//! Told to stop (SIGTERM: a clean server stop, `pg_terminate_backend`),
//! the local lane's worker closes each tag's chain and gives the untaken
//! IDs at its top back to the row, where the row's version says nobody
//! else took a range since (`give_back_all`), so a clean restart skips no
//! ID of a tag only this server uses.
//!
//! It never stands in the way of `DROP DATABASE`, `ALTER DATABASE ...
//! RENAME` or `CREATE DATABASE ... TEMPLATE`: between passes it probes the
//! lock those commands take on its database and exits when one waits for
//! it — unless other sessions are connected there, in which case the
//! command fails anyway and leaving would only stall their IDs. It holds no
//! lock on `id_segment` between refills, so `DROP EXTENSION` only waits for
//! a refill in flight.

use super::distributor::{self, Granted};
use super::policy::{self, Prefetcher, RefillProblem};
use super::registry::{registry, Registry, Slot, SlotIdentity, WorkerKey};
use crate::bgworker;
use crate::catalog::database_name;
use crate::errors::{IdgenError, StoredError};
use crate::failpoints::failpoint;
use crate::gucs;
use pgrx::bgworkers::BackgroundWorkerBuilder;
use pgrx::pg_sys;
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

/// What `refill` remembers for a slot whose ranges came back shorter than
/// asked, after it logged that once.
const SHORTENED_LOGGED: &str = "range shortened";

/// The least time between two WARNINGs about one slot's short ranges.
const SHORTENED_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Refills of one pass that may lose a central server's CAS in a row.
const MAX_SERIALIZATION_RETRIES: u32 = 50;

/// Set once this process has attached to its database's worker entry.
static ATTACHED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Registers refill worker `key` unless it is running or starting.
/// Called by backends that need a range, and by a worker handing a slot to
/// another lane.
pub fn ensure_running(key: WorkerKey) -> Result<(), IdgenError> {
    let Some(registry) = registry() else {
        return Err(IdgenError::NotPreloaded);
    };
    if registry.wake_worker(key) || !registry.claim_worker_start(key) {
        return Ok(());
    }
    let name = match key.lane {
        WorkerKey::LOCAL => format!("{WORKER_TYPE} for database {}", key.database),
        WorkerKey::CITUS => format!(
            "{WORKER_TYPE} for database {}, the Citus coordinator",
            key.database
        ),
        server => format!(
            "{WORKER_TYPE} for database {}, server {server}",
            key.database
        ),
    };
    let started = BackgroundWorkerBuilder::new(&name)
        .set_type(WORKER_TYPE)
        .set_library("pg_idgen")
        .set_function("pg_idgen_refill_worker_main")
        .set_argument(Some(key.to_datum()))
        .enable_spi_access()
        .set_restart_time(None)
        .load_dynamic();
    if started.is_err() {
        registry.abandon_worker_start(key);
        let database = database_name(key.database);
        let error = IdgenError::WorkerNotStarted { database };
        // The tags of the lane show why (segment_status.last_error).
        registry.worker_start_failed(key, &error.stored());
        return Err(error);
    }
    Ok(())
}

/// Entry point, named in `bgw_function_name`.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_idgen_refill_worker_main(arg: pg_sys::Datum) {
    let key = WorkerKey::from_datum(arg);
    let database = key.database;
    bgworker::attach_signal_handlers();
    let Some(registry) = registry() else { return };
    // SAFETY: MyProcPid and MyLatch are set for every started process.
    let (pid, latch) = unsafe { (pg_sys::MyProcPid, pg_sys::MyLatch) };
    // SAFETY: the callback only touches shared memory; registered before
    // connecting, so a FATAL while connecting still clears the entry.
    unsafe { pg_sys::before_shmem_exit(Some(on_exit), key.to_datum()) };
    failpoint("worker-start");
    bgworker::connect(bgworker::Database::Oid(database));
    if !registry.worker_attach(key, pid, latch) {
        // Another worker serves this database: not a failed start.
        ATTACHED.store(true, Ordering::Relaxed);
        return;
    }
    ATTACHED.store(true, Ordering::Relaxed);
    let mut last_work = Instant::now();
    let mut memory = WorkerMemory::default();
    loop {
        bgworker::reload_if_asked();
        if refill_pass(registry, key, &mut memory) {
            last_work = Instant::now();
        }
        if database_needed_exclusively(database) {
            break;
        }
        let idle_for = Duration::from_secs(gucs::WORKER_IDLE_TIMEOUT_S.get() as u64);
        if last_work.elapsed() >= idle_for {
            if registry.worker_detach(key, pid, latch) {
                last_work = Instant::now();
                continue;
            }
            return;
        }
        if !bgworker::wait(PASS_INTERVAL) {
            break; // SIGTERM or postmaster death
        }
    }
    if bgworker::shutdown_requested() && key.lane == WorkerKey::LOCAL {
        give_back_all(registry, database);
    }
}

/// At a clean stop (SIGTERM: `pg_ctl stop` in smart or fast mode, or
/// `pg_terminate_backend`): closes the chain of every local tag of the
/// database and gives its untaken top back to the row where nobody else
/// took a range since (`distributor::give_back`), so that a clean restart
/// skips no ID of a tag only this server uses. Each tag is closed before
/// its row is written: a caller after that finds the chain empty and waits
/// for the next worker. A give-back that fails leaves the IDs a gap, as a
/// crash would; it is logged. Attached tags keep their ranges' remainder
/// as a gap (their rows are on the central server).
fn give_back_all(registry: &Registry, database: u32) {
    let mut given_back = 0;
    for (_, slot) in registry.slots() {
        let identity = {
            let shared = registry.lock(false);
            slot.identity(&shared)
        };
        let Some(identity) = identity.filter(|id| id.database == database) else {
            continue;
        };
        if slot.lane() != WorkerKey::LOCAL {
            continue;
        }
        let back = {
            let exclusive = registry.lock(true);
            slot.close_for_give_back(&exclusive, identity.generation)
        };
        let Some(back) = back else { continue };
        slot.broadcast();
        failpoint("worker-before-give-back");
        let tag = identity.tag.as_str();
        match bgworker::in_transaction(gucs::REMOTE_TIMEOUT_MS.get(), || {
            distributor::give_back(tag, &back)
        }) {
            Ok(Ok(true)) => {
                given_back += 1;
                pgrx::debug1!(
                    "pg_idgen: gave IDs {}..{} of segment tag \"{tag}\" back to id_segment",
                    back.lowest,
                    back.highest
                );
            }
            Ok(Ok(false)) => {}
            Ok(Err(spi_error)) => IdgenError::log(
                &IdgenError::RefillSpiFailed {
                    tag: tag.to_string(),
                    message: spi_error.to_string(),
                }
                .stored(),
                PgLogLevel::LOG,
            ),
            Err(error) => IdgenError::log(&error, PgLogLevel::LOG),
        }
    }
    if given_back > 0 {
        pgrx::log!(
            "pg_idgen: gave the unused IDs of {given_back} segment tag(s) back to id_segment"
        );
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_exit(_code: i32, arg: pg_sys::Datum) {
    let Some(registry) = registry() else { return };
    let key = WorkerKey::from_datum(arg);
    if !ATTACHED.load(Ordering::Relaxed) {
        // It died before it could serve (its error is in the server log):
        // tell the callers now instead of letting them time out.
        let database = key.database;
        registry.worker_start_failed(
            key,
            &IdgenError::WorkerExitedWhileStarting { database }.stored(),
        );
        return;
    }
    // SAFETY: MyProcPid is set in every process.
    registry.worker_gone(key, unsafe { pg_sys::MyProcPid });
}

/// What the worker remembers between passes: each tag's demand (by slot
/// index and generation), its failures, and what it logged for each slot.
#[derive(Default)]
struct WorkerMemory {
    prefetchers: HashMap<(usize, u64), Prefetcher>,
    /// Slots whose last range came from a central server: they keep
    /// `pg_idgen.remote_cache_ahead` of demand cached.
    remote: std::collections::HashSet<(usize, u64)>,
    backoff: HashMap<(usize, u64), Backoff>,
    logged: SlotLog,
}

/// What the worker logged for each slot (by index), so that a refill
/// error is logged once while it lasts, and a short range once while it
/// lasts and at most once a minute.
#[derive(Default)]
struct SlotLog {
    /// The last message logged (an error's, or `SHORTENED_LOGGED`).
    last: HashMap<usize, String>,
    /// When each slot's short ranges were last warned about.
    shortened_at: HashMap<usize, Instant>,
}

impl SlotLog {
    /// Logs `error` unless it is what the slot last logged.
    fn error_once(&mut self, index: usize, error: StoredError) {
        if self.last.get(&index) != Some(&error.message) {
            IdgenError::log(&error, PgLogLevel::LOG);
            self.last.insert(index, error.message);
        }
    }

    /// Warns about a short range, once while short ranges last and at most
    /// once a minute, when full refills or errors come in between.
    fn shortened(&mut self, index: usize, shortened: IdgenError) {
        let recently = self
            .shortened_at
            .get(&index)
            .is_some_and(|at| at.elapsed() < SHORTENED_WARNING_EVERY);
        if self.last.get(&index).map(String::as_str) != Some(SHORTENED_LOGGED) && !recently {
            self.shortened_at.insert(index, Instant::now());
            IdgenError::log(&shortened.stored(), PgLogLevel::WARNING);
            self.last.insert(index, SHORTENED_LOGGED.to_string());
        }
    }

    /// A full refill, or a slot freed: what was logged no longer lasts.
    fn clear(&mut self, index: usize) {
        self.last.remove(&index);
    }
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
    /// The tag's source is another lane's: the slot was handed to it.
    HandedOver,
}

/// One look at every slot of the worker's lane; returns whether there was
/// work (a range published, or a caller asking) — failures alone are not
/// work, so a worker whose tags all fail still goes idle and leaves.
fn refill_pass(registry: &Registry, worker: WorkerKey, memory: &mut WorkerMemory) -> bool {
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
        if bgworker::shutdown_requested() {
            break;
        }
        let identity = {
            let shared = registry.lock(false);
            slot.identity(&shared)
        };
        let Some(identity) = identity.filter(|id| id.database == worker.database) else {
            continue;
        };
        if slot.lane() != worker.lane {
            continue;
        }
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
            (index, slot),
            &identity,
            worker.lane,
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
            Refilled::Gone | Refilled::Superseded | Refilled::HandedOver => {}
        }
    }
    worked
}

/// One refill of one slot: what it asks for, and when it began.
#[derive(Clone, Copy)]
struct Attempt<'a> {
    slot: &'a Slot,
    /// The slot's generation when the refill began: the range is published
    /// only if it is still the same.
    generation: u64,
    tag: &'a str,
    steps: u64,
    /// The lane of the worker running it.
    lane: u32,
    /// `pg_idgen.prefetch_percent`: where the range's prefetch mark sits.
    percent: u32,
    started: Instant,
}

/// What the distributor's CAS came back with, after retries of a lost
/// central CAS.
enum RangeTake {
    Granted(Granted),
    /// The row (or its table) cannot give a range.
    Problem(RefillProblem),
    /// The transaction failed (a lock, a timeout, a connection).
    Failed(StoredError),
}

/// Takes `steps` steps of `tag`'s row in a transaction of its own, bounded
/// by `pg_idgen.remote_timeout`. A CAS that lost to another allocator on a
/// central server fails with a serialization error (its transaction is
/// REPEATABLE READ): it is taken again in a new transaction.
fn take_range(attempt: &Attempt<'_>, bound_table: u32, handed_out: Option<i64>) -> RangeTake {
    let Attempt {
        slot,
        tag,
        steps,
        lane,
        ..
    } = *attempt;
    let mut serialization_failures = 0;
    loop {
        // Set once the tag turns out to be attached: a failure from then
        // on (the commit included) is reported as the central server's.
        let mut central = None;
        let outcome = bgworker::in_transaction(gucs::REMOTE_TIMEOUT_MS.get(), || {
            distributor::take_range(tag, steps, lane, bound_table, handed_out, &mut central)
        });
        return match outcome {
            Err(e)
                if e.sqlstate == PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE as i32
                    && serialization_failures < MAX_SERIALIZATION_RETRIES
                    && !bgworker::shutdown_requested() =>
            {
                serialization_failures += 1;
                slot.stats.cas_conflicts.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Ok(Ok(Ok(granted))) => RangeTake::Granted(granted),
            Ok(Ok(Err(problem))) => RangeTake::Problem(problem),
            Ok(Err(spi_error)) => RangeTake::Failed(
                IdgenError::RefillSpiFailed {
                    tag: tag.to_string(),
                    message: spi_error.to_string(),
                }
                .stored(),
            ),
            Err(caught) if caught.sqlstate == PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE as i32 => {
                RangeTake::Failed(IdgenError::RefillRowLocked { central }.stored())
            }
            Err(caught) => RangeTake::Failed(match central {
                Some(server) => IdgenError::RemoteRefillFailed {
                    server,
                    sqlstate: caught.sqlstate,
                    message: caught.message,
                    hint: caught.hint,
                }
                .stored(),
                None => caught,
            }),
        };
    }
}

/// How publishing a granted range ended.
enum Publish {
    Done,
    /// The slot was freed or reassigned while the refill ran: the range is
    /// a gap.
    Superseded,
    /// The chain refused the range (a bug; no ID repeats).
    Refused(StoredError),
}

/// Puts `granted` into the slot, if it still has `generation`, and counts
/// the refill in the slot's statistics.
fn publish(registry: &Registry, attempt: &Attempt<'_>, granted: &Granted) -> Publish {
    let Attempt {
        slot,
        generation,
        tag,
        steps,
        percent,
        started,
        ..
    } = *attempt;
    let exclusive = registry.lock(true);
    if slot.generation.load(Ordering::Acquire) != generation {
        return Publish::Superseded;
    }
    let mark = policy::mark_offset(granted.len, percent);
    if let Err(e) = slot.publish(
        &exclusive,
        granted.table_oid,
        (granted.first, granted.len, mark),
        granted.row_version,
    ) {
        return Publish::Refused(
            IdgenError::RangeNotCached {
                tag: tag.to_string(),
                first: granted.first,
                last: granted.first + (granted.len as i64 - 1),
                problem: format!("{e:?}"),
            }
            .stored(),
        );
    }
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
    Publish::Done
}

/// Takes `steps` steps of the slot's tag and publishes them, or stores the
/// error for its callers.
fn refill(
    registry: &Registry,
    (index, slot): (usize, &Slot),
    identity: &SlotIdentity,
    lane: u32,
    steps: u64,
    percent: u32,
    logged: &mut SlotLog,
) -> Refilled {
    let attempt = Attempt {
        slot,
        generation: identity.generation,
        tag: &identity.tag,
        steps,
        lane,
        percent,
        started: Instant::now(),
    };
    let (tag, generation) = (attempt.tag, attempt.generation);
    let status = slot.status();
    let handed_out = (status.published > 0 && status.high_water > 0).then_some(status.high_water);
    let mut take = take_range(&attempt, slot.table_oid(), handed_out);
    if let RangeTake::Problem(RefillProblem::NoRemoteRow { step, .. }) = &mut take {
        *step = Some(slot.stats.step.load(Ordering::Relaxed)).filter(|&s| s > 0);
    }
    failpoint("worker-before-publish");
    let error = match take {
        RangeTake::Granted(granted) => match publish(registry, &attempt, &granted) {
            Publish::Done => {
                if granted.len < granted.asked {
                    logged.shortened(
                        index,
                        IdgenError::RangeShortened {
                            tag: tag.to_string(),
                            asked: granted.asked,
                            granted: granted.len,
                            central: granted.remote,
                        },
                    );
                } else {
                    logged.clear(index);
                }
                slot.broadcast();
                return Refilled::Published {
                    remote: granted.remote,
                };
            }
            Publish::Superseded => return Refilled::Superseded,
            Publish::Refused(error) => error,
        },
        RangeTake::Problem(RefillProblem::ServedByAnotherLane { lane }) => {
            // The other lane's worker takes it from here; a caller's
            // request goes with it.
            let handed = {
                let exclusive = registry.lock(true);
                slot.hand_over(&exclusive, generation, lane)
            };
            if !handed {
                return Refilled::Superseded;
            }
            let to = WorkerKey {
                database: identity.database,
                lane,
            };
            match ensure_running(to) {
                Ok(()) => return Refilled::HandedOver,
                Err(e) => e.stored(),
            }
        }
        RangeTake::Problem(problem) if problem.source_is_gone() => {
            // Tell the callers waiting now, then free the slot: nothing is
            // left to refill it from.
            store_error(registry, slot, generation, &problem.stored(tag));
            registry.free_generation(index, generation);
            logged.clear(index);
            return Refilled::Gone;
        }
        RangeTake::Problem(problem) => problem.stored(tag),
        RangeTake::Failed(error) => error,
    };
    store_error(registry, slot, generation, &error);
    logged.error_once(index, error);
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
