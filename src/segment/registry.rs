//! The segment registry in shared memory: one slot per (database, tag) with
//! its range chain, and one entry per refill worker. A database has a
//! worker for its local tags and one per central server its attached tags
//! draw from (a *lane*, `WorkerKey`), so that a central server that is
//! slow, locked or cut off delays only the tags attached to it.
//!
//! # Locking protocol
//!
//! One LWLock of the `pg_idgen` tranche (`shmem::Lock::Registry`) guards
//! everything that is not an atomic taken on the fast path:
//!
//! * **exclusive**: assigning or freeing a slot (its identity fields and
//!   `generation`), publishing to or discarding a slot's chain (the chain
//!   allows one publisher at a time), writing a slot's error text, and
//!   changing a worker entry's `database`, `lane` or `state`.
//! * **shared**: looking a tag up, reading identity fields and error text
//!   (the status view, waiting callers).
//! * **no lock**: taking an ID (`RangeChain::take`, see `chain.rs`), the
//!   statistics counters (relaxed atomics), `refill_requested`, a slot's
//!   `lane` (written by the worker that finds the tag served by another
//!   lane, before it asks that lane's worker), and waking a worker through
//!   its latch.
//!
//! A backend caches `(slot index, generation)` per tag. `generation` changes
//! whenever a slot is freed or assigned, before its chain is touched, so a
//! backend that reads the same generation *after* taking an ID knows the ID
//! came from its own tag's chain (`Slot::take_for`). The refill worker
//! reads a slot's database, tag and generation together (`Slot::identity`,
//! shared lock) and publishes only if the generation is unchanged
//! (exclusive lock), so a slot freed and reassigned meanwhile never
//! receives a range taken for its previous owner.

use super::chain::{ChainStatus, PublishError, RangeChain};
use super::slot_share::{self, Choice, SlotFacts};
use crate::errors::{IdgenError, StoredError, TAG_MAX_BYTES};
use pgrx::pg_sys;
use std::cell::UnsafeCell;
use std::ptr::null_mut;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, Ordering,
};

/// Room for a refill error's message and hint each: the longest carry a
/// server name, a tag and a table name (63 or 64 bytes each) besides the
/// SQL that fixes it.
const ERROR_TEXT_BYTES: usize = 1024;

/// Counters kept per slot for `segment_status`; all relaxed atomics.
#[repr(C)]
#[derive(Default)]
pub struct SlotStats {
    pub refills: AtomicU64,
    /// Version-CAS updates that found another allocator had won.
    pub cas_conflicts: AtomicU64,
    pub refill_failures: AtomicU64,
    pub waits: AtomicU64,
    pub wait_micros: AtomicU64,
    /// `id_segment.step` and IDs taken by the last refill.
    pub step: AtomicI64,
    pub last_refill_ids: AtomicU64,
    pub last_refill_steps: AtomicU64,
    /// The worker's safe distance and demand estimate for the tag.
    pub safe_distance: AtomicU64,
    pub ids_per_second: AtomicU64,
    /// End of the last successful refill (TimestampTz) and its duration.
    pub last_refill_at: AtomicI64,
    pub last_refill_micros: AtomicU64,
    /// Snowflake IDs handed out instead (`pg_idgen.snowflake_fallback`),
    /// and when the last WARNING about them was logged (ms, `now_ms`).
    pub fallback_ids: AtomicU64,
    pub fallback_warned_at_ms: AtomicI64,
    /// Set when a call fell back; the next range published clears it.
    /// Meanwhile calls fall back at once instead of each waiting out
    /// `refill_timeout` again.
    pub falling_back: AtomicBool,
    /// The chain's `ids_taken` when the slot got its tag: the slot's chain
    /// lives on across tags (its tickets never go back), the status shows
    /// what this tag took.
    pub taken_base: AtomicU64,
    /// When a falling-back call last asked the worker for a range (ms):
    /// at most once a second, so the worker's back-off holds.
    pub fallback_asked_at_ms: AtomicI64,
    /// IDs a backend took at once last (`backend_block.rs`): 1 while no
    /// backends contend; what a backend's exit can lose is one less.
    pub block_size: AtomicU64,
}

#[repr(C)]
struct ErrorText {
    sqlstate: i32,
    message_len: usize,
    message: [u8; ERROR_TEXT_BYTES],
    hint_len: usize,
    hint: [u8; ERROR_TEXT_BYTES],
}

#[repr(C)]
pub struct Slot {
    pub generation: AtomicU64,
    active: AtomicBool,
    database: AtomicU32,
    tag_len: AtomicU32,
    tag: UnsafeCell<[u8; TAG_MAX_BYTES]>,
    /// OID of the `id_segment` table the chain's ranges came from (0: none
    /// yet). A different OID means the extension was re-created.
    table_oid: AtomicU32,
    /// A caller asked the worker for a range (set without lock, cleared by
    /// the worker).
    pub refill_requested: AtomicBool,
    /// Which of the database's workers refills it (`WorkerKey::lane`): 0,
    /// the local one, until a worker finds the tag attached to a central
    /// server and hands it to that server's lane.
    lane: AtomicU32,
    pub chain: RangeChain,
    /// The row's `version` as the CAS that gave the last published range
    /// left it (`NO_ROW_VERSION`: not known — no range yet, a range from a
    /// central server, or the ranges discarded), and the `xmin` of the row
    /// version that CAS wrote. At a clean stop the row still at this
    /// version and `xmin` has been taken from by nobody else since, so the
    /// chain's untaken top can go back to it (`close_for_give_back`).
    row_version: AtomicI64,
    row_xmin: AtomicU32,
    pub stats: SlotStats,
    /// The chain's `tickets_spent` when the registry last looked, and when
    /// it last saw them move (ms, `now_ms`): how long the tag is idle
    /// (`slot_share`). Written under the exclusive lock.
    seen_tickets: AtomicU64,
    seen_moving_at_ms: AtomicI64,
    /// Bumped after each failed refill, once `error` holds its text.
    pub error_seq: AtomicU64,
    /// The last refill failed and no range came since: `error` is the
    /// tag's state now (what `segment_status.last_error` shows).
    error_current: AtomicBool,
    error: UnsafeCell<ErrorText>,
    cv: UnsafeCell<pg_sys::ConditionVariable>,
}

/// Which refill worker: a database's, for its local tags (`lane` 0), for
/// the tags attached to one central server (`lane`: the OID of its
/// postgres_fdw server), or on a Citus worker for the coordinator's tags
/// (`lane` 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerKey {
    pub database: u32,
    pub lane: u32,
}

impl WorkerKey {
    /// The lane of a database's local tags.
    pub const LOCAL: u32 = 0;
    /// On a Citus worker, the lane of the tags whose ranges come from the
    /// coordinator (`citus_source.rs`). No foreign server has OID 1: user
    /// objects start at 16384.
    pub const CITUS: u32 = 1;

    /// The background worker's argument: both halves in one Datum.
    pub fn to_datum(self) -> pg_sys::Datum {
        pg_sys::Datum::from((u64::from(self.lane) << 32) | u64::from(self.database))
    }

    pub fn from_datum(datum: pg_sys::Datum) -> WorkerKey {
        let value = datum.value() as u64;
        WorkerKey {
            database: value as u32,
            lane: (value >> 32) as u32,
        }
    }
}

/// One refill worker.
#[repr(C)]
pub struct WorkerEntry {
    pub database: AtomicU32,
    pub lane: AtomicU32,
    pub state: AtomicU32,
    pub pid: AtomicI32,
    latch: AtomicPtr<pg_sys::Latch>,
    /// When it was asked to start (ms since the Unix epoch), to spot a start
    /// that never came.
    started_at_ms: AtomicI64,
}

pub const WORKER_NONE: u32 = 0;
pub const WORKER_STARTING: u32 = 1;
pub const WORKER_RUNNING: u32 = 2;

/// How long a requested worker may take to attach before it is presumed
/// lost (the postmaster could not fork it, or its database vanished).
const WORKER_START_GRACE_MS: i64 = 10_000;

#[repr(C)]
pub struct Registry {
    lock: *mut pg_sys::LWLock,
    max_tags: usize,
    slots: *mut Slot,
    workers: *mut WorkerEntry,
}

// SAFETY: the registry lives in shared memory; every field of it that
// changes is an atomic or guarded by `lock` as described in the header.
unsafe impl Sync for Registry {}

static REGISTRY: AtomicPtr<Registry> = AtomicPtr::new(null_mut());

/// The registry, or `None` when the library was not preloaded.
#[inline]
pub fn registry() -> Option<&'static Registry> {
    let ptr = REGISTRY.load(Ordering::Acquire);
    // SAFETY: set once per postmaster life by `attach` to memory that stays
    // mapped for the life of every process forked after it.
    unsafe { ptr.as_ref() }
}

/// The registry, or the ERROR that says the library must be preloaded.
#[track_caller]
pub fn registry_or_raise() -> &'static Registry {
    let Some(registry) = registry() else {
        IdgenError::NotPreloaded.raise()
    };
    registry
}

/// Bytes of shared memory the registry needs.
pub fn shmem_size(max_tags: usize) -> usize {
    std::mem::size_of::<Registry>()
        + std::mem::align_of::<Slot>()
        + max_tags * std::mem::size_of::<Slot>()
        + max_tags * std::mem::size_of::<WorkerEntry>()
}

/// Lays the registry out in `base` (fresh shared memory when `found` is
/// false) and makes it this process's registry.
///
/// # Safety
/// `base` points at `shmem_size(max_tags)` bytes of shared memory; called
/// from the shmem startup hook while holding its layout lock (`shmem.rs`).
pub unsafe fn attach(base: *mut u8, found: bool, max_tags: usize, lock: *mut pg_sys::LWLock) {
    let header = base as *mut Registry;
    if !found {
        let slots_at = base.add(std::mem::size_of::<Registry>());
        let slots = slots_at.add(slots_at.align_offset(std::mem::align_of::<Slot>())) as *mut Slot;
        let workers = slots.add(max_tags) as *mut WorkerEntry;
        for i in 0..max_tags {
            let slot = slots.add(i);
            std::ptr::write_bytes(slot as *mut u8, 0, std::mem::size_of::<Slot>());
            std::ptr::write(std::ptr::addr_of_mut!((*slot).chain), RangeChain::new());
            (*slot).row_version.store(NO_ROW_VERSION, Ordering::Relaxed);
            pg_sys::ConditionVariableInit((*slot).cv.get());
            std::ptr::write_bytes(
                workers.add(i) as *mut u8,
                0,
                std::mem::size_of::<WorkerEntry>(),
            );
        }
        std::ptr::write(
            header,
            Registry {
                lock,
                max_tags,
                slots,
                workers,
            },
        );
    }
    REGISTRY.store(header, Ordering::Release);
}

/// Holds the registry lock; released on drop (and by PostgreSQL's error
/// cleanup, `LWLockReleaseAll`, if an error unwinds through it).
pub struct Locked<'a> {
    registry: &'a Registry,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: acquired in `Registry::lock`; an LWLock may be released once.
        unsafe { pg_sys::LWLockRelease(self.registry.lock) };
    }
}

/// `Slot::row_version` when the row's version is not known.
const NO_ROW_VERSION: i64 = i64::MIN;

/// The untaken top of a slot's chain at a clean stop, and the row version
/// under which it may go back to the row (`distributor::give_back`).
#[derive(Debug, Clone, Copy)]
pub struct GiveBack {
    pub table_oid: u32,
    pub lowest: i64,
    pub highest: i64,
    pub row_version: i64,
    pub row_xmin: u32,
}

/// A slot's owner and generation, read together under the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotIdentity {
    pub database: u32,
    pub tag: String,
    pub generation: u64,
}

pub enum Lookup {
    Found {
        index: usize,
        generation: u64,
    },
    /// The database holds `held` slots, its quota, none of them idle.
    QuotaReached {
        held: usize,
    },
    /// Every slot holds a tag drawn from lately.
    Full,
}

/// How long a tag must go undrawn before a new tag may take its slot
/// (`slot_share`): a minute, long enough that a tag drawn now and then
/// keeps its cached IDs, short enough that a tag of a finished job frees
/// its slot soon.
pub const EVICT_IDLE_MS: i64 = 60_000;

impl Registry {
    pub fn max_tags(&self) -> usize {
        self.max_tags
    }

    pub fn lock(&self, exclusive: bool) -> Locked<'_> {
        let mode = if exclusive {
            pg_sys::LWLockMode::LW_EXCLUSIVE
        } else {
            pg_sys::LWLockMode::LW_SHARED
        };
        // SAFETY: `lock` is the named tranche's LWLock, valid for the
        // postmaster's life; LWLockAcquire waits uninterruptibly but every
        // holder keeps it for microseconds.
        unsafe { pg_sys::LWLockAcquire(self.lock, mode) };
        Locked { registry: self }
    }

    #[inline]
    pub fn slot(&self, index: usize) -> &Slot {
        self.slot_checked(index)
            .expect("a slot index below pg_idgen.max_tags")
    }

    /// `slot`, or `None` past the last slot: for a caller that must not
    /// panic (`segment_nextval`'s unguarded common call).
    #[inline]
    pub fn slot_checked(&self, index: usize) -> Option<&Slot> {
        // SAFETY: `slots` holds `max_tags` initialised slots.
        (index < self.max_tags).then(|| unsafe { &*self.slots.add(index) })
    }

    pub fn slots(&self) -> impl Iterator<Item = (usize, &Slot)> {
        (0..self.max_tags).map(move |i| (i, self.slot(i)))
    }

    fn worker(&self, index: usize) -> &WorkerEntry {
        assert!(index < self.max_tags);
        // SAFETY: `workers` holds `max_tags` initialised entries.
        unsafe { &*self.workers.add(index) }
    }

    fn find_locked(&self, database: u32, tag: &[u8]) -> Option<usize> {
        self.slots()
            .find(|(_, slot)| slot.is(database, tag))
            .map(|(i, _)| i)
    }

    /// The slot of `(database, tag)` and its generation, if it has one.
    pub fn find(&self, database: u32, tag: &[u8]) -> Option<(usize, u64)> {
        let _shared = self.lock(false);
        let index = self.find_locked(database, tag)?;
        Some((index, self.slot(index).generation.load(Ordering::Acquire)))
    }

    /// The slot of `(database, tag)`, assigned now if it has none: a free
    /// slot, or one `slot_share::choose` lets the tag take, for a database
    /// that may hold `quota` slots.
    pub fn lookup_or_assign(&self, database: u32, tag: &[u8], quota: usize) -> Lookup {
        assert!(tag.len() <= TAG_MAX_BYTES);
        {
            let _shared = self.lock(false);
            if let Some(index) = self.find_locked(database, tag) {
                let generation = self.slot(index).generation.load(Ordering::Acquire);
                return Lookup::Found { index, generation };
            }
        }
        let exclusive = self.lock(true);
        if let Some(index) = self.find_locked(database, tag) {
            let generation = self.slot(index).generation.load(Ordering::Acquire);
            return Lookup::Found { index, generation };
        }
        let now = now_ms();
        let facts: Vec<SlotFacts> = self
            .slots()
            .map(|(_, slot)| slot.facts(&exclusive, now))
            .collect();
        let index = match slot_share::choose(&facts, database, quota, EVICT_IDLE_MS) {
            Choice::Take(index) => index,
            Choice::QuotaReached { held } => return Lookup::QuotaReached { held },
            Choice::Full => return Lookup::Full,
        };
        let slot = self.slot(index);
        if slot.is_active() {
            // Its tag is pushed out: new generation first, as `free` does.
            slot.release();
        }
        // Generation first: a backend still holding the old generation
        // must see the change before it could see the new chain contents.
        let generation = slot.generation.fetch_add(1, Ordering::SeqCst) + 1;
        slot.discard();
        slot.reset_stats();
        slot.stats
            .taken_base
            .store(slot.chain.status().ids_taken, Ordering::Relaxed);
        // SAFETY: exclusive lock held; the slot is inactive, so nobody reads
        // the tag bytes without the lock.
        unsafe {
            let bytes = &mut *slot.tag.get();
            bytes[..tag.len()].copy_from_slice(tag);
        }
        slot.tag_len.store(tag.len() as u32, Ordering::Relaxed);
        slot.database.store(database, Ordering::Relaxed);
        slot.table_oid.store(0, Ordering::Relaxed);
        slot.error_seq.store(0, Ordering::Relaxed);
        slot.error_current.store(false, Ordering::Relaxed);
        slot.refill_requested.store(false, Ordering::Relaxed);
        slot.lane.store(WorkerKey::LOCAL, Ordering::Relaxed);
        slot.seen_tickets
            .store(slot.chain.tickets_spent(), Ordering::Relaxed);
        slot.seen_moving_at_ms.store(now, Ordering::Relaxed);
        slot.active.store(true, Ordering::Release);
        Lookup::Found { index, generation }
    }

    /// How many slots each database holds, most first.
    pub fn slots_per_database(&self) -> Vec<(u32, usize)> {
        let _shared = self.lock(false);
        let mut counts: Vec<(u32, usize)> = Vec::new();
        for (_, slot) in self.slots().filter(|(_, s)| s.is_active()) {
            match counts.iter_mut().find(|(db, _)| *db == slot.database()) {
                Some((_, n)) => *n += 1,
                None => counts.push((slot.database(), 1)),
            }
        }
        counts.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        counts
    }

    /// Frees `(database, tag)`'s slot, dropping its cached ranges. Returns
    /// whether it had one.
    pub fn free(&self, database: u32, tag: &[u8]) -> bool {
        let _exclusive = self.lock(true);
        let Some(index) = self.find_locked(database, tag) else {
            return false;
        };
        self.slot(index).release();
        true
    }

    /// Frees slot `index` if it still has `generation` (its row is gone).
    pub fn free_generation(&self, index: usize, generation: u64) {
        let _exclusive = self.lock(true);
        let slot = self.slot(index);
        if slot.is_active() && slot.generation.load(Ordering::Acquire) == generation {
            slot.release();
        }
    }

    /// Whether any slot belongs to `database` (no lock: a hint for the
    /// drop hook, which then takes the lock).
    pub fn has_slots_in(&self, database: u32) -> bool {
        self.slots().any(|(_, slot)| slot.is_active_in(database))
    }

    /// The refill worker `key` exited before it attached: frees its
    /// starting entry and stores `error` in every slot of its lane, so that
    /// waiting callers report it instead of a timeout.
    pub fn worker_start_failed(&self, key: WorkerKey, error: &StoredError) {
        let exclusive = self.lock(true);
        if let Some(i) = self.worker_index_locked(key) {
            let entry = self.worker(i);
            if entry.state.load(Ordering::Relaxed) == WORKER_STARTING {
                entry.state.store(WORKER_NONE, Ordering::SeqCst);
            }
        }
        for (_, slot) in self.slots() {
            if slot.is_served_by(key) {
                slot.set_error(&exclusive, error);
            }
        }
        drop(exclusive);
        for (_, slot) in self.slots() {
            if slot.is_served_by(key) {
                slot.broadcast();
            }
        }
    }

    /// Frees every slot of `database`: it was dropped, or its `id_segment`
    /// was (its cached ranges must never be handed out again).
    pub fn free_database(&self, database: u32) {
        let _exclusive = self.lock(true);
        for (_, slot) in self.slots() {
            if slot.is_active_in(database) {
                slot.release();
            }
        }
    }

    /// The databases that have slots.
    pub fn databases_in_use(&self) -> Vec<u32> {
        let mut databases: Vec<u32> = self
            .slots()
            .filter(|(_, slot)| slot.is_active())
            .map(|(_, slot)| slot.database())
            .collect();
        databases.sort_unstable();
        databases.dedup();
        databases
    }

    // ---- workers ----------------------------------------------------------

    fn worker_index_locked(&self, key: WorkerKey) -> Option<usize> {
        (0..self.max_tags).find(|&i| {
            let entry = self.worker(i);
            entry.state.load(Ordering::Acquire) != WORKER_NONE && entry.key() == key
        })
    }

    /// Sets the latch of worker `key` if it runs; returns false when it
    /// neither runs nor starts (the caller should `claim_worker_start`).
    pub fn wake_worker(&self, key: WorkerKey) -> bool {
        for i in 0..self.max_tags {
            let entry = self.worker(i);
            if entry.key() != key {
                continue;
            }
            let state = entry.state.load(Ordering::SeqCst);
            // Freed and taken for another worker since the key was read:
            // not ours (the entry's key is set before its state).
            if entry.key() != key {
                continue;
            }
            match state {
                WORKER_RUNNING => {
                    let latch = entry.latch.load(Ordering::Acquire);
                    if !latch.is_null() {
                        // SAFETY: a PGPROC's latch lives in shared memory for
                        // the postmaster's life; setting a latch of a process
                        // that just exited is harmless.
                        unsafe { pg_sys::SetLatch(latch) };
                    }
                    return true;
                }
                WORKER_STARTING
                    if now_ms() - entry.started_at_ms.load(Ordering::Relaxed)
                        < WORKER_START_GRACE_MS =>
                {
                    return true
                }
                _ => {}
            }
        }
        false
    }

    /// Marks worker `key` as starting, if it neither runs nor starts;
    /// returns whether the caller must now register it.
    pub fn claim_worker_start(&self, key: WorkerKey) -> bool {
        let _exclusive = self.lock(true);
        if let Some(i) = self.worker_index_locked(key) {
            let entry = self.worker(i);
            let stale = entry.state.load(Ordering::Relaxed) == WORKER_STARTING
                && now_ms() - entry.started_at_ms.load(Ordering::Relaxed) >= WORKER_START_GRACE_MS;
            if !stale {
                return false;
            }
            entry.started_at_ms.store(now_ms(), Ordering::Relaxed);
            return true;
        }
        let Some(i) = (0..self.max_tags)
            .find(|&i| self.worker(i).state.load(Ordering::Relaxed) == WORKER_NONE)
        else {
            return false;
        };
        let entry = self.worker(i);
        entry.set_key(key);
        entry.pid.store(0, Ordering::Relaxed);
        entry.latch.store(null_mut(), Ordering::Relaxed);
        entry.started_at_ms.store(now_ms(), Ordering::Relaxed);
        entry.state.store(WORKER_STARTING, Ordering::SeqCst);
        true
    }

    /// Undoes `claim_worker_start` after the registration failed.
    pub fn abandon_worker_start(&self, key: WorkerKey) {
        let _exclusive = self.lock(true);
        if let Some(i) = self.worker_index_locked(key) {
            let entry = self.worker(i);
            if entry.state.load(Ordering::Relaxed) == WORKER_STARTING {
                entry.state.store(WORKER_NONE, Ordering::SeqCst);
            }
        }
    }

    /// Called by a starting worker: takes over its entry. Returns false if
    /// another worker already serves the same database and lane.
    pub fn worker_attach(&self, key: WorkerKey, pid: i32, latch: *mut pg_sys::Latch) -> bool {
        let _exclusive = self.lock(true);
        let index = match self.worker_index_locked(key) {
            Some(i) => {
                let entry = self.worker(i);
                if entry.state.load(Ordering::Relaxed) == WORKER_RUNNING
                    && entry.pid.load(Ordering::Relaxed) != pid
                {
                    return false;
                }
                i
            }
            None => match (0..self.max_tags)
                .find(|&i| self.worker(i).state.load(Ordering::Relaxed) == WORKER_NONE)
            {
                Some(i) => i,
                None => return false,
            },
        };
        let entry = self.worker(index);
        entry.set_key(key);
        entry.pid.store(pid, Ordering::Relaxed);
        entry.latch.store(latch, Ordering::Release);
        entry.state.store(WORKER_RUNNING, Ordering::SeqCst);
        true
    }

    /// Called by a worker on its way out: frees its entry. Then, if a
    /// refill was asked for in the meantime (a caller that saw the entry
    /// still running and only set the latch), returns true: the worker
    /// should carry on instead (it has re-attached).
    pub fn worker_detach(&self, key: WorkerKey, pid: i32, latch: *mut pg_sys::Latch) -> bool {
        {
            let _exclusive = self.lock(true);
            if let Some(i) = self.worker_index_locked(key) {
                let entry = self.worker(i);
                if entry.pid.load(Ordering::Relaxed) == pid {
                    entry.latch.store(null_mut(), Ordering::Release);
                    entry.state.store(WORKER_NONE, Ordering::SeqCst);
                }
            }
        }
        // Pairs with the caller's `refill_requested` store followed by its
        // SeqCst read of the entry state: one of the two sees the other.
        let pending = self.slots().any(|(_, slot)| {
            slot.is_served_by(key) && slot.refill_requested.load(Ordering::SeqCst)
        });
        pending && self.worker_attach(key, pid, latch)
    }

    /// Clears the entry of a worker that is exiting for any reason.
    pub fn worker_gone(&self, key: WorkerKey, pid: i32) {
        let _exclusive = self.lock(true);
        for i in 0..self.max_tags {
            let entry = self.worker(i);
            if entry.key() == key && entry.pid.load(Ordering::Relaxed) == pid {
                entry.latch.store(null_mut(), Ordering::Release);
                entry.state.store(WORKER_NONE, Ordering::SeqCst);
            }
        }
    }

    /// `(key, pid, state)` of every worker entry in use.
    pub fn workers(&self) -> Vec<(WorkerKey, i32, u32)> {
        (0..self.max_tags)
            .map(|i| self.worker(i))
            .filter(|e| e.state.load(Ordering::Acquire) != WORKER_NONE)
            .map(|e| {
                (
                    e.key(),
                    e.pid.load(Ordering::Relaxed),
                    e.state.load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

impl WorkerEntry {
    fn key(&self) -> WorkerKey {
        WorkerKey {
            database: self.database.load(Ordering::Acquire),
            lane: self.lane.load(Ordering::Acquire),
        }
    }

    /// Under the registry lock, exclusive.
    fn set_key(&self, key: WorkerKey) {
        self.database.store(key.database, Ordering::Release);
        self.lane.store(key.lane, Ordering::Release);
    }
}

impl Slot {
    fn is(&self, database: u32, tag: &[u8]) -> bool {
        self.active.load(Ordering::Acquire)
            && self.database.load(Ordering::Relaxed) == database
            && self.tag_len.load(Ordering::Relaxed) as usize == tag.len()
            // SAFETY: the registry lock is held (shared or exclusive) by
            // every caller, so the tag bytes are not being written.
            && unsafe { &(&*self.tag.get())[..tag.len()] } == tag
    }

    /// What `slot_share` needs to know of the slot (exclusive lock held),
    /// stamping the look: tickets that moved since the last look mean the
    /// tag was drawn from meanwhile, so it counts as drawn from now.
    fn facts(&self, _locked: &Locked<'_>, now: i64) -> SlotFacts {
        let tickets = self.chain.tickets_spent();
        if self.seen_tickets.swap(tickets, Ordering::Relaxed) != tickets {
            self.seen_moving_at_ms.store(now, Ordering::Relaxed);
        }
        SlotFacts {
            active: self.is_active(),
            database: self.database(),
            never_served: self.stats.refills.load(Ordering::Relaxed) == 0
                && self.error_seq.load(Ordering::Relaxed) > 0,
            idle_ms: now - self.seen_moving_at_ms.load(Ordering::Relaxed),
        }
    }

    /// Frees the slot (exclusive lock held): new generation first, so a
    /// backend holding the old one stops taking from the chain.
    fn release(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.active.store(false, Ordering::Release);
        self.discard();
        self.broadcast();
    }

    /// Whether worker `key` refills this slot (no lock: the lane may
    /// change under a caller, which then asks the worker of the new lane).
    pub fn is_served_by(&self, key: WorkerKey) -> bool {
        self.is_active_in(key.database) && self.lane() == key.lane
    }

    /// The lane of the worker that refills this slot.
    pub fn lane(&self) -> u32 {
        self.lane.load(Ordering::SeqCst)
    }

    /// Hands the slot to another lane's worker, with a request for a
    /// refill, if it still has `generation` (called by the worker that
    /// found the tag served elsewhere; the caller then wakes that worker).
    /// The lane first: a caller that asks meanwhile wakes the new lane's
    /// worker. False if the slot was freed or reassigned meanwhile.
    pub fn hand_over(&self, _locked: &Locked<'_>, generation: u64, lane: u32) -> bool {
        if self.generation.load(Ordering::Acquire) != generation {
            return false;
        }
        self.lane.store(lane, Ordering::SeqCst);
        self.refill_requested.store(true, Ordering::SeqCst);
        true
    }

    pub fn is_active_in(&self, database: u32) -> bool {
        self.active.load(Ordering::Acquire) && self.database.load(Ordering::Relaxed) == database
    }

    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    pub fn database(&self) -> u32 {
        self.database.load(Ordering::Relaxed)
    }

    /// The tag, read under the registry lock.
    pub fn tag(&self, _locked: &Locked<'_>) -> String {
        let len = self.tag_len.load(Ordering::Relaxed) as usize;
        // SAFETY: the caller holds the registry lock (witnessed by `_locked`).
        let bytes = unsafe { &(&*self.tag.get())[..len] };
        String::from_utf8_lossy(bytes).into_owned()
    }

    pub fn table_oid(&self) -> u32 {
        self.table_oid.load(Ordering::Acquire)
    }

    /// Up to `n` IDs at once (`RangeChain::take_block`), if the slot
    /// still has `generation` after the take.
    #[inline]
    pub fn take_block_for(&self, generation: u64, n: u64) -> Option<super::chain::TakenBlock> {
        let taken = self.chain.take_block(n);
        if self.generation.load(Ordering::Acquire) != generation {
            return None;
        }
        taken
    }

    /// Takes an ID for a caller that cached `generation`; `None` when the
    /// chain is empty or the slot no longer belongs to the caller's tag.
    #[inline]
    pub fn take_for(&self, generation: u64) -> Option<super::chain::Taken> {
        let taken = self.chain.take();
        if self.generation.load(Ordering::Acquire) != generation {
            return None;
        }
        taken
    }

    fn reset_stats(&self) {
        let s = &self.stats;
        for counter in [
            &s.last_refill_steps,
            &s.safe_distance,
            &s.ids_per_second,
            &s.refills,
            &s.cas_conflicts,
            &s.refill_failures,
            &s.waits,
            &s.wait_micros,
            &s.last_refill_ids,
            &s.last_refill_micros,
            &s.fallback_ids,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
        s.block_size.store(1, Ordering::Relaxed);
        s.step.store(0, Ordering::Relaxed);
        s.last_refill_at.store(0, Ordering::Relaxed);
        s.fallback_warned_at_ms.store(0, Ordering::Relaxed);
        s.falling_back.store(false, Ordering::Relaxed);
        s.fallback_asked_at_ms.store(0, Ordering::Relaxed);
    }

    /// Publishes a committed range (exclusive lock held), which left the
    /// row at `row_version` (its version and `xmin`; `None` for a central
    /// server's row). If the slot was bound to another `id_segment` table
    /// (the extension was re-created), its old ranges are dropped first.
    pub fn publish(
        &self,
        _locked: &Locked<'_>,
        table_oid: u32,
        (first, len, mark): (i64, u64, u64),
        row_version: Option<(i64, u32)>,
    ) -> Result<(), PublishError> {
        self.rebind(table_oid);
        let published = self.chain.publish(first, len, mark);
        if published.is_ok() {
            self.error_current.store(false, Ordering::Release);
            self.stats.falling_back.store(false, Ordering::Relaxed);
            let (version, xmin) = row_version.unwrap_or((NO_ROW_VERSION, 0));
            self.row_xmin.store(xmin, Ordering::Relaxed);
            self.row_version.store(version, Ordering::Relaxed);
        }
        published
    }

    /// Drops every range (their IDs become a gap).
    fn discard(&self) {
        self.chain.discard();
        self.row_version.store(NO_ROW_VERSION, Ordering::Relaxed);
    }

    /// At a clean stop (exclusive lock held): closes the chain, if the slot
    /// still has `generation`, and returns what may go back to the row —
    /// the untaken IDs at the top of the chain and the row version that
    /// says nobody else took a range since — or `None`.
    pub fn close_for_give_back(&self, _locked: &Locked<'_>, generation: u64) -> Option<GiveBack> {
        if self.generation.load(Ordering::Acquire) != generation {
            return None;
        }
        let row_version = self.row_version.swap(NO_ROW_VERSION, Ordering::Relaxed);
        if row_version == NO_ROW_VERSION {
            return None;
        }
        let (lowest, highest) = self.chain.close()?;
        Some(GiveBack {
            table_oid: self.table_oid.load(Ordering::Acquire),
            lowest,
            highest,
            row_version,
            row_xmin: self.row_xmin.load(Ordering::Relaxed),
        })
    }

    /// Binds the slot to `table_oid`, dropping ranges from any other table
    /// (exclusive lock held), if the slot still has `generation`; returns
    /// false if it was freed or reassigned meanwhile.
    pub fn bind_table(&self, _locked: &Locked<'_>, generation: u64, table_oid: u32) -> bool {
        if self.generation.load(Ordering::Acquire) != generation {
            return false;
        }
        self.rebind(table_oid);
        true
    }

    fn rebind(&self, table_oid: u32) {
        let bound = self.table_oid.load(Ordering::Acquire);
        if bound != table_oid {
            if bound != 0 {
                self.discard();
            }
            self.table_oid.store(table_oid, Ordering::Release);
        }
    }

    /// Who the slot belongs to, read as one under the registry lock:
    /// `None` if it is free.
    pub fn identity(&self, _locked: &Locked<'_>) -> Option<SlotIdentity> {
        if !self.active.load(Ordering::Acquire) {
            return None;
        }
        let len = self.tag_len.load(Ordering::Relaxed) as usize;
        // SAFETY: the caller holds the registry lock (witnessed by `_locked`).
        let bytes = unsafe { &(&*self.tag.get())[..len] };
        Some(SlotIdentity {
            database: self.database.load(Ordering::Relaxed),
            tag: String::from_utf8_lossy(bytes).into_owned(),
            generation: self.generation.load(Ordering::Acquire),
        })
    }

    pub fn status(&self) -> ChainStatus {
        self.chain.status()
    }

    /// Stores a failed refill's error for the waiting callers (exclusive
    /// lock held) and wakes them.
    pub fn set_error(&self, _locked: &Locked<'_>, error: &StoredError) {
        // SAFETY: exclusive lock held (the caller's `Locked` is exclusive by
        // contract); readers take it shared.
        let text = unsafe { &mut *self.error.get() };
        text.sqlstate = error.sqlstate;
        text.message_len = copy_truncated(&mut text.message, &error.message);
        text.hint_len = copy_truncated(&mut text.hint, &error.hint);
        self.error_current.store(true, Ordering::Release);
        self.error_seq.fetch_add(1, Ordering::Release);
        self.stats.refill_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The last refill error, while it is the tag's state: a refill failed
    /// and no range was published since (registry lock held).
    pub fn last_error(&self, _locked: &Locked<'_>) -> Option<StoredError> {
        if !self.error_current.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: the registry lock is held; writers hold it exclusively.
        let text = unsafe { &*self.error.get() };
        Some(StoredError {
            sqlstate: text.sqlstate,
            message: String::from_utf8_lossy(&text.message[..text.message_len]).into_owned(),
            hint: String::from_utf8_lossy(&text.hint[..text.hint_len]).into_owned(),
        })
    }

    pub fn cv(&self) -> *mut pg_sys::ConditionVariable {
        self.cv.get()
    }

    /// Wakes every backend waiting for this slot.
    pub fn broadcast(&self) {
        // SAFETY: the condition variable was initialised with the slot and
        // lives in shared memory.
        unsafe { pg_sys::ConditionVariableBroadcast(self.cv.get()) };
    }
}

fn copy_truncated(into: &mut [u8], text: &str) -> usize {
    let text = crate::errors::truncate_utf8(text, into.len());
    into[..text.len()].copy_from_slice(text.as_bytes());
    text.len()
}

/// Now in ms on the monotonic clock (the same in every process of the
/// machine, never stepped): what every interval of the segment side — the
/// worker-start grace period, back-offs, demand samples, once-per-interval
/// stamps — is measured on, so a wall-clock step changes none of them.
pub fn now_ms() -> i64 {
    crate::snowflake::clock::mono_now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `pg_idgen.max_tags` description and the README's settings table
    /// say what shared memory a tag's slot costs: keep them true.
    #[test]
    fn a_tag_costs_the_shared_memory_the_docs_say() {
        let per_tag = (shmem_size(1000) - shmem_size(0)) / 1000;
        eprintln!("shared memory per tag: {per_tag} bytes");
        assert!((2500..=2900).contains(&per_tag), "{per_tag} bytes per tag");
    }
}
