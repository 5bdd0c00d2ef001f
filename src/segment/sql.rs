//! The SQL functions that hand out segment IDs: `segment_nextval(tag)`
//! (the fast path), `segment_nextval(tag, n)` and `segment_reserve`, and
//! `segment_currval(tag)`, the last of them this session got. A tag's DDL
//! (and `segment_setval`) is `ddl.rs`'s.
//!
//! `segment_nextval(text)` is a hand-written V1 C function rather than a
//! `#[pg_extern]`, because its speed is the product: it keeps the resolved
//! slot in `flinfo->fn_extra`. When the tag argument is a `Const` in the
//! calling expression, the text is never looked at again for the rest of
//! the query; any other argument — a column, a bind parameter, a PL/pgSQL
//! variable or `NEW` field, a function parameter — can change between calls
//! that share one `fn_extra` (PL/pgSQL keeps an expression's state for the
//! whole session), so it costs one comparison of at most 64 bytes against
//! the previous tag. A backend also remembers every tag it has resolved, so
//! shared memory is searched (under the registry lock) once per tag per
//! backend.
//!
//! The fast path is: the registry pointer, `XactReadOnly`, one `fetch_add`
//! on the tag's chain and a generation check. Everything else — resolving,
//! waking or starting the worker, waiting for a refill — is the slow path.
//!
//! A tag gets a slot in shared memory only once its row is visible to the
//! caller (`tag::row_state`), so made-up tags fill nothing. The
//! IDs of a tag the calling transaction created come from that transaction
//! (`created_here`): the worker cannot see the row yet, and if the
//! transaction rolls back the tag never existed.

use super::backend_block::BackendBlock;
use super::chain::Taken;
use super::citus_source;
use super::created_here;
use super::default_check::raise_unknown_tag;
use super::distributor;
use super::policy::RefillProblem;
use super::registry::{registry, registry_or_raise, Lookup, Registry, Slot, WorkerKey};
use super::slot_share;
use super::tag::{check_tag, checked_row_state, current_table_oid, RowState};
use super::worker;
use crate::catalog::{database_exists, database_name, my_database};
use crate::errors::{required, IdgenError, StoredError, TAG_MAX_BYTES};
use crate::gucs;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::{RefCell, UnsafeCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long one sleep of a waiting caller lasts before it looks again (and
/// asks the worker again, in case the wake-up was lost).
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// What a call site remembers across calls, in `fn_extra`.
#[repr(C)]
struct CallSite {
    /// `index` and `generation` name a slot (false: the last call was
    /// served from the transaction's own ranges, or none yet).
    has_slot: bool,
    index: usize,
    generation: u64,
    /// The argument is a `Const`: it cannot change within the query, so it
    /// need not be compared.
    arg_is_const: bool,
    /// The `id_segment` the function belongs to, looked up once per query.
    table_oid: u32,
    tag_len: usize,
    tag: [u8; TAG_MAX_BYTES],
}

thread_local! {
    /// Tags this backend has resolved: `tag → (slot index, generation)`.
    /// PostgreSQL backends are single-threaded, so this is per backend.
    static RESOLVED: RefCell<HashMap<Vec<u8>, (usize, u64)>> = RefCell::new(HashMap::new());
}

/// The last ID this backend got from a slot (`segment_currval`), with the
/// slot's generation then and the order of the call (`LAST_STAMP`). Kept
/// per slot index so that the fast path records it with three relaxed
/// stores, no hashing; a backend is one single-threaded process, so the
/// atomics only make the statics `Sync`.
struct LastId {
    generation: AtomicU64,
    id: AtomicI64,
    stamp: AtomicU64,
}

static LAST_IDS: once_cell::sync::OnceCell<Box<[LastId]>> = once_cell::sync::OnceCell::new();
static LAST_STAMP: AtomicU64 = AtomicU64::new(0);

fn next_stamp() -> u64 {
    let stamp = LAST_STAMP.load(Ordering::Relaxed) + 1;
    LAST_STAMP.store(stamp, Ordering::Relaxed);
    stamp
}

thread_local! {
    /// `segment_currval` of IDs that came from no slot (a tag created by
    /// the calling transaction), and of `segment_setval`: tag → (value,
    /// stamp).
    static LAST_BY_TAG: RefCell<HashMap<Vec<u8>, (i64, u64)>> = RefCell::new(HashMap::new());
}

/// Records `id` as the last this backend got from slot `index`.
#[inline(always)]
fn note_last(registry: &Registry, index: usize, generation: u64, id: i64) {
    let last = LAST_IDS.get_or_init(|| {
        (0..registry.max_tags())
            .map(|_| LastId {
                generation: AtomicU64::new(0),
                id: AtomicI64::new(0),
                stamp: AtomicU64::new(0),
            })
            .collect()
    });
    if let Some(last) = last.get(index) {
        last.generation.store(generation, Ordering::Relaxed);
        last.id.store(id, Ordering::Relaxed);
        last.stamp.store(next_stamp(), Ordering::Relaxed);
    }
}

/// Records `value` as `tag`'s last in this backend: an ID from no slot,
/// which stays `segment_currval` whatever becomes of its transaction, as
/// an ID `nextval` gave does. Returns what it replaced.
pub fn note_last_of_tag(tag: &[u8], value: i64) -> Option<(i64, u64)> {
    let stamp = next_stamp();
    LAST_BY_TAG.with(|map| map.borrow_mut().insert(tag.to_vec(), (value, stamp)))
}

/// An entry `segment_setval` (or a drop or rename) made in the transaction
/// in progress: the tag, what `segment_currval` gave before, and the
/// subtransaction that made it.
type SetvalUndo = (Vec<u8>, Option<(i64, u64)>, pg_sys::SubTransactionId);

thread_local! {
    /// `segment_setval`'s entries of the transaction in progress, oldest
    /// first: a rollback (of the transaction, or of the subtransaction
    /// that made one) puts back what each replaced, since the `UPDATE` it
    /// is rolled back too; so does `PREPARE TRANSACTION`, whose outcome is
    /// no longer this session's. `setval` is not transactional, so a
    /// sequence's `currval` keeps its value; this one is, so neither does it.
    static SETVAL_UNDO: RefCell<Vec<SetvalUndo>> = const { RefCell::new(Vec::new()) };
    static SETVAL_CALLBACKS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Gives up `tag`'s slot in this database and what this backend resolved
/// it to, for `segment_setval` (`currval`: its value), `segment_drop` and
/// `segment_rename` (`None`: nothing, as for a tag never drawn); `currval`
/// is `segment_currval` until the write is rolled back (or prepared), when
/// what it gave before comes back. Returns whether there was a slot.
pub fn give_up_slot(registry: &Registry, tag: &[u8], currval: Option<i64>) -> bool {
    // Read before the slot is freed: its record may be the newest.
    let previous = last_of(registry, tag);
    let had_slot = registry.free(my_database(), tag);
    RESOLVED.with(|map| map.borrow_mut().remove(tag));
    note_transactional_currval(tag, currval, previous);
    had_slot
}

/// Forgets every `segment_currval` of this backend (`DISCARD ALL`,
/// `DISCARD SEQUENCES`): not undone by a rollback, as a sequence's is not.
pub fn forget_currvals() {
    if let Some(last) = LAST_IDS.get() {
        for record in last.iter() {
            record.stamp.store(0, Ordering::Relaxed);
        }
    }
    LAST_BY_TAG.with(|map| map.borrow_mut().clear());
    SETVAL_UNDO.with(|undo| undo.borrow_mut().clear());
}

/// Records `value` (`None`: none) as `tag`'s last in this backend, unless
/// the write that made it is rolled back (or prepared): then `previous`
/// comes back.
fn note_transactional_currval(tag: &[u8], value: Option<i64>, previous: Option<(i64, u64)>) {
    if !SETVAL_CALLBACKS.with(|r| r.replace(true)) {
        // SAFETY: registers process-lifetime callbacks once per backend.
        unsafe {
            pg_sys::RegisterXactCallback(Some(on_transaction_end), std::ptr::null_mut());
            pg_sys::RegisterSubXactCallback(Some(on_subtransaction_abort), std::ptr::null_mut());
        }
    }
    // SAFETY: a read of this backend's transaction state, in a transaction.
    let subtransaction = unsafe { pg_sys::GetCurrentSubTransactionId() };
    match value {
        Some(value) => {
            note_last_of_tag(tag, value);
        }
        None => {
            LAST_BY_TAG.with(|map| map.borrow_mut().remove(tag));
        }
    }
    SETVAL_UNDO.with(|undo| {
        undo.borrow_mut()
            .push((tag.to_vec(), previous, subtransaction))
    });
}

/// Puts back, newest first, what the undone entries replaced.
fn undo_setvals(undone: Vec<SetvalUndo>) {
    LAST_BY_TAG.with(|map| {
        let mut map = map.borrow_mut();
        for (tag, replaced, _) in undone.into_iter().rev() {
            match replaced {
                Some(entry) => map.insert(tag, entry),
                None => map.remove(&tag),
            };
        }
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT => {
            SETVAL_UNDO.with(|undo| undo.borrow_mut().clear())
        }
        // A prepared transaction may yet be rolled back, by anyone: until
        // then its value is not this session's to report.
        XACT_EVENT_PREPARE | XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => {
            undo_setvals(SETVAL_UNDO.with(|undo| std::mem::take(&mut *undo.borrow_mut())))
        }
        _ => {}
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subtransaction_abort(
    event: pg_sys::SubXactEvent::Type,
    aborted: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event != pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        return;
    }
    // The aborted subtransaction's entries and its children's: their ids
    // are at least its own (later siblings do not exist yet).
    let undone = SETVAL_UNDO.with(|undo| {
        let mut undo = undo.borrow_mut();
        let keep = undo.iter().take_while(|(_, _, s)| *s < aborted).count();
        undo.split_off(keep)
    });
    undo_setvals(undone);
}

/// `segment_currval(tag)`: the last ID `segment_nextval` gave this session
/// for `tag` (or the value of its `segment_setval`, unless that was rolled
/// back or prepared), as `currval` does for a sequence; 55000 if there is
/// none. A slot freed since (its tag dropped or set) no longer counts.
#[pg_extern(volatile, parallel_unsafe)]
fn segment_currval(tag: Option<&str>) -> i64 {
    let registry = registry_or_raise();
    let tag = required(tag, "segment tag");
    check_tag(tag.as_bytes());
    match last_of(registry, tag.as_bytes()) {
        Some((id, _)) => id,
        None => IdgenError::CurrvalNotYetDefined {
            tag: tag.to_string(),
            // SAFETY: plain query of the backend's recovery state.
            recovery: unsafe { pg_sys::RecoveryInProgress() },
        }
        .raise(),
    }
}

/// `tag`'s last value in this backend with its stamp: the newest of its
/// slot's record (while the slot keeps its generation) and the by-tag one
/// — unless the newest is the record of a slot this backend drew the tag
/// from and another session has given up since (a set, a drop): that no
/// longer counts, and neither does anything older.
pub fn last_of(registry: &Registry, tag: &[u8]) -> Option<(i64, u64)> {
    let record = |(index, generation): (usize, u64)| {
        let last = LAST_IDS.get()?.get(index)?;
        let stamp = last.stamp.load(Ordering::Relaxed);
        (stamp > 0 && last.generation.load(Ordering::Relaxed) == generation)
            .then(|| (last.id.load(Ordering::Relaxed), stamp))
    };
    let current = registry.find(my_database(), tag);
    let from_slot = current.and_then(record);
    let given_up = RESOLVED
        .with(|map| map.borrow().get(tag).copied())
        .filter(|&resolved| Some(resolved) != current)
        .and_then(record);
    let by_tag = LAST_BY_TAG.with(|map| map.borrow().get(tag).copied());
    let newest = [from_slot, by_tag]
        .into_iter()
        .flatten()
        .max_by_key(|&(_, stamp)| stamp);
    match (newest, given_up) {
        (Some((_, stamp)), Some((_, gone))) if gone > stamp => None,
        (newest, _) => newest,
    }
}

/// Before slot `index` with `generation` is drawn from: this backend's
/// record of the slot's earlier generation (`LAST_IDS`) is about to be
/// overwritten, and with it `last_of`'s evidence that a tag resolved to
/// that generation had its newest value from a slot given up since. So
/// what that evidence hides is forgotten now: each such tag's by-tag value
/// older than the record (slow path: a tag resolved anew).
fn forget_superseded(index: usize, generation: u64) {
    let Some(last) = LAST_IDS.get().and_then(|last| last.get(index)) else {
        return;
    };
    let (old_generation, stamp) = (
        last.generation.load(Ordering::Relaxed),
        last.stamp.load(Ordering::Relaxed),
    );
    if stamp == 0 || old_generation == generation {
        return;
    }
    RESOLVED.with(|resolved| {
        LAST_BY_TAG.with(|by_tag| {
            let mut by_tag = by_tag.borrow_mut();
            for (tag, _) in resolved
                .borrow()
                .iter()
                .filter(|(_, &slot)| slot == (index, old_generation))
            {
                if by_tag.get(tag).is_some_and(|&(_, older)| older < stamp) {
                    by_tag.remove(tag);
                }
            }
        })
    });
}

/// Refuses to hand out IDs where `nextval` would refuse too. Inlined into
/// every call, with the refusal kept out of line.
#[inline(always)]
pub(super) fn check_writable(function: &'static str) {
    // SAFETY: plain read of a backend-local global.
    if unsafe { pg_sys::XactReadOnly } {
        refuse_read_only(function);
    }
}

#[cold]
#[inline(never)]
fn refuse_read_only(function: &'static str) -> ! {
    // On a hot standby every transaction is read-only: the way out is the
    // primary, not SET TRANSACTION READ WRITE.
    // SAFETY: a plain query of this backend's recovery state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        IdgenError::DuringRecovery { function }.raise();
    }
    IdgenError::ReadOnly { function }.raise();
}

fn tag_text(tag: &[u8]) -> String {
    String::from_utf8_lossy(tag).into_owned()
}

/// Whether the first argument of the call is a `Const` node: the only kind
/// of argument that cannot change between calls sharing one `fn_extra`.
///
/// # Safety
/// `flinfo` is the current call's.
unsafe fn first_arg_is_const(flinfo: &pg_sys::FmgrInfo) -> bool {
    let expr = flinfo.fn_expr;
    if expr.is_null() || (*expr).type_ != pg_sys::NodeTag::T_FuncExpr {
        return false;
    }
    let args = pgrx::PgList::<pg_sys::Node>::from_pg((*(expr as *mut pg_sys::FuncExpr)).args);
    match args.get_ptr(0) {
        Some(arg) => !arg.is_null() && (*arg).type_ == pg_sys::NodeTag::T_Const,
        None => false,
    }
}

/// Frees the slots of databases that were dropped; returns whether there
/// were any. Only run when shared memory is full: it reads the catalog.
fn reclaim_dropped_databases(registry: &Registry) -> bool {
    let dropped: Vec<u32> = registry
        .databases_in_use()
        .into_iter()
        .filter(|&oid| !database_exists(oid))
        .collect();
    for &database in &dropped {
        registry.free_database(database);
    }
    !dropped.is_empty()
}

/// Where the next ID of a tag comes from.
enum Source {
    Slot {
        index: usize,
        generation: u64,
    },
    /// The tag's row was created by the calling transaction.
    OwnTransaction,
}

/// Raises the error for a row the caller cannot draw from now: none, or
/// one the calling transaction has written or locked (the worker would
/// wait for it). The tag's bytes and the table are checked first
/// (`tag::checked_row_state`).
fn check_row(table_oid: u32, tag: &[u8]) {
    match checked_row_state(table_oid, tag) {
        RowState::NoTable => IdgenError::ExtensionDropped.raise(),
        // On a Citus worker the coordinator has the tag's row: its refill
        // says if it has none (`citus_source.rs`).
        RowState::Missing if citus_source::serves_missing_tags() => {}
        RowState::Missing => raise_unknown_tag(table_oid, tag),
        RowState::HeldByCaller => IdgenError::RowHeldByCaller { tag: tag_text(tag) }.raise(),
        RowState::AttachedByCaller => IdgenError::AttachedByCaller { tag: tag_text(tag) }.raise(),
        RowState::Free => {}
    }
}

/// The source of `tag` in this database: the transaction's own ranges, or
/// else a slot in shared memory (`resolve_slot`).
fn resolve(registry: &Registry, tag: &[u8], table_oid: u32) -> Source {
    if created_here::is_created_here(tag, table_oid) {
        return Source::OwnTransaction;
    }
    let (index, generation) = resolve_slot(registry, tag, table_oid);
    Source::Slot { index, generation }
}

/// The slot of `tag`: the backend's remembered one, or one from shared
/// memory (assigned now, once the tag's row is known to exist), bound to
/// table `table_oid`. A tag the calling transaction created has none
/// (`resolve` asks `created_here` first).
fn resolve_slot(registry: &Registry, tag: &[u8], table_oid: u32) -> (usize, u64) {
    if table_oid == 0 {
        IdgenError::ExtensionDropped.raise();
    }
    loop {
        let cached =
            RESOLVED
                .with(|map| map.borrow().get(tag).copied())
                .filter(|&(index, generation)| {
                    registry.slot(index).generation.load(Ordering::Acquire) == generation
                });
        let (index, generation) = match cached {
            Some(found) => found,
            None => {
                check_row(table_oid, tag);
                let quota =
                    slot_share::quota(registry.max_tags(), gucs::MAX_TAGS_PER_DATABASE.get());
                match registry.lookup_or_assign(my_database(), tag, quota) {
                    Lookup::Found { index, generation } => {
                        forget_superseded(index, generation);
                        RESOLVED
                            .with(|map| map.borrow_mut().insert(tag.to_vec(), (index, generation)));
                        (index, generation)
                    }
                    Lookup::QuotaReached { held } => IdgenError::TagQuotaReached {
                        tag: tag_text(tag),
                        database: database_name(my_database()),
                        held,
                    }
                    .raise(),
                    Lookup::Full if reclaim_dropped_databases(registry) => continue,
                    Lookup::Full => IdgenError::TooManyTags {
                        max_tags: registry.max_tags() as i32,
                        holders: registry
                            .slots_per_database()
                            .into_iter()
                            .map(|(db, n)| (database_name(db), n))
                            .collect(),
                    }
                    .raise(),
                }
            }
        };
        let slot = registry.slot(index);
        if slot.table_oid() != table_oid {
            let exclusive = registry.lock(true);
            if !slot.bind_table(&exclusive, generation, table_oid) {
                continue;
            }
        }
        return (index, generation);
    }
}

/// Asks the worker of the slot's lane for its next range.
fn request_refill(registry: &Registry, index: usize) -> Result<(), IdgenError> {
    let slot = registry.slot(index);
    slot.refill_requested.store(true, Ordering::SeqCst);
    worker::ensure_running(WorkerKey {
        database: my_database(),
        lane: slot.lane(),
    })
}

/// Takes from shared memory by this backend, of any tag: a set-returning
/// call holding a block of IDs gives the rest up (a gap) when this moved,
/// so that a backend's IDs of a tag always increase, even when a scalar
/// call runs between two rows of a `segment_nextval(tag, n)`. A process
/// global: a backend is one single-threaded process, so a relaxed load and
/// store (no locked instruction) is exact.
/// Counted per slot (by index, folded into 64 counters: a fold only makes
/// a batch give up its block more often), so draws of other tags leave a
/// batch's block alone.
static TAKES_HERE: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

#[inline]
fn takes_here(index: usize) -> &'static AtomicU64 {
    &TAKES_HERE[index % 64]
}

#[inline]
fn note_take(index: usize) {
    let counter = takes_here(index);
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// After a take: a taker that crossed the prefetch mark wakes the worker.
#[inline(always)]
fn after_take(registry: &Registry, index: usize, taken: Taken) -> i64 {
    note_take(index);
    if taken.hit_mark {
        wake_worker(registry, index);
    }
    taken.id
}

/// Asks for the slot's next range without waiting: once a range, out of
/// the per-ID path. If the worker cannot start, the caller that runs out
/// of IDs will report it.
#[cold]
#[inline(never)]
fn wake_worker(registry: &Registry, index: usize) {
    let _ = request_refill(registry, index);
}

/// Up to `n` IDs of a slot at once, for a batch or a reservation: the
/// backend's own block of the slot (`BLOCKS`) is given up first (a gap),
/// so that its IDs, taken earlier and lower, never come after these; and
/// told of these, so that the next scalar take does not read them as
/// another backend's.
fn take_block(
    registry: &Registry,
    index: usize,
    generation: u64,
    n: u64,
) -> Option<super::chain::TakenBlock> {
    // SAFETY: see `block_of`; the reference ends before the take.
    unsafe { block_of(index) }.clear();
    let taken = take_chain_block(registry, index, generation, n)?;
    if let Some(last) = taken.last_id() {
        // SAFETY: see `block_of`.
        unsafe { block_of(index) }.took_elsewhere(index, generation, last);
    }
    Some(taken)
}

/// Up to `n` IDs of a slot at once from its chain; the block counts as
/// this backend's take, and one that crossed a prefetch mark wakes the
/// worker.
fn take_chain_block(
    registry: &Registry,
    index: usize,
    generation: u64,
    n: u64,
) -> Option<super::chain::TakenBlock> {
    let block = registry.slot(index).take_block_for(generation, n)?;
    note_take(index);
    if block.hit_mark {
        wake_worker(registry, index);
    }
    Some(block)
}

/// This backend's own blocks of hot tags' IDs (`backend_block.rs`), one per
/// slot, folded into 64 entries (two slots sharing an entry only give each
/// other's blocks up more often).
struct Blocks([UnsafeCell<BackendBlock>; 64]);

// SAFETY: a backend is one single-threaded process: PostgreSQL calls the
// functions that use these on its one thread, never concurrently.
unsafe impl Sync for Blocks {}

static BLOCKS: Blocks = Blocks([const { UnsafeCell::new(BackendBlock::EMPTY) }; 64]);

/// The block entry of slot `index`.
///
/// # Safety
/// Called on the backend's thread, and the reference is dropped before the
/// next call (no function holding one calls another that takes one).
#[inline]
unsafe fn block_of(index: usize) -> &'static mut BackendBlock {
    // SAFETY: the caller's promise: one thread, no two references alive.
    unsafe { &mut *BLOCKS.0[index % 64].get() }
}

/// The next ID of slot `index` for a scalar call: from this backend's
/// block while its slot has `generation`, else taken from the chain — one
/// ID, or a block of several while backends contend (`backend_block.rs`).
/// `None`: the chain is empty, or the slot was given up.
///
/// Inlined into the call: a backend drawing a tag alone, the common case,
/// costs one check of its block more than a take without blocks; the
/// block's own path is out of line (`take_with_block`).
#[inline(always)]
fn take_one(registry: &Registry, index: usize, generation: u64) -> Option<i64> {
    {
        // SAFETY: no other block reference is alive in this call; this one
        // ends with the block.
        let block = unsafe { block_of(index) };
        if block.takes_single(index, generation) && crate::failpoints::forced_block_size().is_none()
        {
            // Alone: one ID from the chain, as without blocks (a size
            // grown by contention seen here is written at the next take,
            // in `take_with_block`).
            let taken = registry.slot(index).take_for(generation)?;
            block.took_single(taken.id);
            return Some(after_take(registry, index, taken));
        }
    }
    take_with_block(registry, index, generation)
}

/// `take_one` for a backend whose block holds IDs, is of another slot or
/// takes more than one at a time.
#[inline(never)]
fn take_with_block(registry: &Registry, index: usize, generation: u64) -> Option<i64> {
    let slot = registry.slot(index);
    // SAFETY: no other block reference is alive in this call.
    let block = unsafe { block_of(index) };
    if block.is_for(index, generation) {
        if slot.generation.load(Ordering::Acquire) != generation {
            block.clear();
            return None;
        }
        if let Some(id) = block.next_id() {
            return Some(id);
        }
    }
    let size = match crate::failpoints::forced_block_size() {
        Some(forced) => forced.clamp(1, super::backend_block::MAX_BLOCK),
        None if block.is_for(index, generation) => block.size(),
        None => 1,
    };
    let id = if size <= 1 {
        let taken = slot.take_for(generation)?;
        block.took_one(index, generation, taken.id);
        after_take(registry, index, taken)
    } else {
        let taken = take_chain_block(registry, index, generation, size)?;
        block.took(index, generation, &taken)?
    };
    if block.reported_size != size {
        // Written when the size changes, not at every take.
        block.reported_size = size;
        slot.stats.block_size.store(size, Ordering::Relaxed);
    }
    Some(id)
}

/// The next ID of `tag`'s slot, waiting for a refill if none is cached.
/// Returns `None` when the slot was freed or reassigned meanwhile (the
/// caller resolves the tag again).
fn next_id_slow(
    registry: &Registry,
    index: usize,
    generation: u64,
    tag: &[u8],
    table_oid: u32,
    allow_fallback: bool,
) -> Option<i64> {
    let slot = registry.slot(index);
    if let Some(id) = take_one(registry, index, generation) {
        return Some(id);
    }
    // SAFETY: plain query of the backend's recovery state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        IdgenError::DuringRecovery {
            function: "segment_nextval()",
        }
        .raise();
    }
    // Before waiting for the worker: is there still a row, and is it one
    // the worker can take from (not one this transaction holds)?
    check_row(table_oid, tag);
    // Falling back already: no new range since a call waited in vain.
    let fallback = allow_fallback && gucs::SNOWFLAKE_FALLBACK.get();
    if fallback && slot.stats.falling_back.load(Ordering::Relaxed) {
        // Ask the worker now and then only: each ask skips its back-off,
        // and a central server in trouble should not see a retry storm.
        if first_in(&slot.stats.fallback_asked_at_ms, FALLBACK_ASK_EVERY_MS) {
            if let Err(e) = request_refill(registry, index) {
                e.raise();
            }
        }
        return Some(fallback_id(slot, tag, Duration::ZERO, "still no new range"));
    }
    match wait_for_range(registry, index, generation) {
        WaitEnd::Taken(taken) => {
            // SAFETY: no other block reference is alive here.
            unsafe { block_of(index) }.took_one(index, generation, taken.id);
            Some(after_take(registry, index, taken))
        }
        WaitEnd::SlotGone => None,
        WaitEnd::Failed(e) => IdgenError::RefillFailed {
            tag: tag_text(tag),
            sqlstate: e.sqlstate,
            message: e.message,
            hint: e.hint,
        }
        .raise(),
        WaitEnd::TimedOut { waited, transient } if fallback => {
            let cause = transient.map_or_else(
                || "the refill worker did not deliver".to_string(),
                |e| e.message,
            );
            Some(fallback_id(slot, tag, waited, &cause))
        }
        // Say what kept the refill from succeeding, and for how long.
        WaitEnd::TimedOut {
            waited,
            transient: Some(e),
        } => IdgenError::RefillTimedOutBecause {
            tag: tag_text(tag),
            waited_ms: waited.as_millis() as i64,
            sqlstate: e.sqlstate,
            message: e.message,
            hint: e.hint,
        }
        .raise(),
        WaitEnd::TimedOut {
            waited,
            transient: None,
        } => IdgenError::RefillTimeout {
            tag: tag_text(tag),
            waited_ms: waited.as_millis() as i64,
        }
        .raise(),
    }
}

/// How a wait for a slot's next range ended.
enum WaitEnd {
    /// A range came: the ID taken from it.
    Taken(Taken),
    /// The slot was freed or reassigned while the caller waited.
    SlotGone,
    /// The worker stored an error that will not pass by waiting.
    Failed(StoredError),
    /// `pg_idgen.refill_timeout` passed; the last error that might have
    /// passed, if the worker stored one.
    TimedOut {
        waited: Duration,
        transient: Option<StoredError>,
    },
}

/// A caller's sleep on a slot's condition variable: prepared when it
/// begins, cancelled — and its time added to the slot's `wait_ms` — when
/// it is dropped, on every way out, an ERROR unwinding through it
/// included.
struct SlotWait<'a> {
    slot: &'a Slot,
    started: Instant,
}

impl<'a> SlotWait<'a> {
    fn begin(slot: &'a Slot) -> SlotWait<'a> {
        slot.stats.waits.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the CV lives in shared memory; the sleep prepared here is
        // cancelled by `drop` (and by AbortTransaction, harmlessly again).
        unsafe { pg_sys::ConditionVariablePrepareToSleep(slot.cv()) };
        SlotWait {
            slot,
            started: Instant::now(),
        }
    }

    fn waited(&self) -> Duration {
        self.started.elapsed()
    }

    /// Sleeps until the slot's CV is signalled or `sleep` passes.
    fn sleep(&self, sleep: Duration) {
        // SAFETY: prepared in `begin`; CHECK_FOR_INTERRUPTS inside makes
        // cancel, terminate and statement_timeout end the wait with their
        // ERROR.
        unsafe {
            pg_sys::ConditionVariableTimedSleep(
                self.slot.cv(),
                sleep.as_millis().max(1) as _,
                crate::wait_events::refill_wait(),
            );
        }
    }
}

impl Drop for SlotWait<'_> {
    fn drop(&mut self) {
        // SAFETY: matches the prepare in `begin`; cancelling a sleep that
        // is no longer prepared does nothing.
        unsafe { pg_sys::ConditionVariableCancelSleep() };
        self.slot
            .stats
            .wait_micros
            .fetch_add(self.started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}

/// Waits on the slot until a range comes, asking the worker for one at
/// every look, for at most `pg_idgen.refill_timeout`.
fn wait_for_range(registry: &Registry, index: usize, generation: u64) -> WaitEnd {
    let slot = registry.slot(index);
    let timeout = Duration::from_millis(gucs::REFILL_TIMEOUT_MS.get() as u64);
    let errors_before = slot.error_seq.load(Ordering::Acquire);
    let mut transient = None;
    let wait = SlotWait::begin(slot);
    loop {
        if let Some(taken) = slot.take_for(generation) {
            return WaitEnd::Taken(taken);
        }
        // Errors first: a worker that finds the row gone stores the error,
        // then frees the slot.
        if slot.error_seq.load(Ordering::Acquire) != errors_before {
            let stored = {
                let shared = registry.lock(false);
                slot.last_error(&shared)
            };
            match stored {
                Some(e) if e.is_transient() => transient = Some(e),
                Some(e) => return WaitEnd::Failed(e),
                None => {}
            }
        }
        if slot.generation.load(Ordering::Acquire) != generation {
            return WaitEnd::SlotGone;
        }
        if let Err(e) = request_refill(registry, index) {
            e.raise();
        }
        let waited = wait.waited();
        if waited >= timeout {
            return WaitEnd::TimedOut { waited, transient };
        }
        wait.sleep(WAIT_SLICE.min(timeout - waited));
    }
}

/// How often, at most, a tag's fallback IDs are logged.
const FALLBACK_WARNING_EVERY_MS: i64 = 60_000;

/// How often, at most, falling-back calls ask the worker for a range.
const FALLBACK_ASK_EVERY_MS: i64 = 1_000;

/// Whether this caller is the first, among all backends, in `every_ms`
/// since `stamp` (ms, `registry::now_ms`; 0: never) was last moved; if so,
/// it moves it to now.
fn first_in(stamp: &std::sync::atomic::AtomicI64, every_ms: i64) -> bool {
    let now = super::registry::now_ms();
    let last = stamp.load(Ordering::Relaxed);
    (last == 0 || now - last >= every_ms)
        && stamp
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}

/// A snowflake ID in place of a segment ID that did not come in time
/// (`pg_idgen.snowflake_fallback`): counted in the slot, and logged as a
/// WARNING at most once a minute per tag.
/// Refused (55000) while this server's machine id is not set: every
/// server that forgot it would fall back to the same IDs.
fn fallback_id(slot: &Slot, tag: &[u8], waited: Duration, cause: &str) -> i64 {
    if !crate::snowflake::config::machine_id_is_set() {
        IdgenError::FallbackWithoutMachineId {
            tag: tag_text(tag),
            waited_ms: waited.as_millis() as i64,
            cause: cause.to_string(),
        }
        .raise();
    }
    let state = crate::snowflake::shared::snowflake_or_raise();
    let id = state.next_id(&state.main);
    let stats = &slot.stats;
    stats.falling_back.store(true, Ordering::Relaxed);
    let count = stats.fallback_ids.fetch_add(1, Ordering::Relaxed) + 1;
    if first_in(&stats.fallback_warned_at_ms, FALLBACK_WARNING_EVERY_MS) {
        IdgenError::FallbackIds {
            tag: tag_text(tag),
            waited_ms: waited.as_millis() as i64,
            cause: cause.to_string(),
            count,
        }
        .warn();
    }
    id
}

/// The next ID of `tag`, resolving it as needed; also returns the slot
/// `(index, generation)` it came from, if it came from one.
fn next_id(registry: &Registry, tag: &[u8], table_oid: u32) -> (i64, Option<(usize, u64)>) {
    // A tag the calling transaction created hands out its own IDs.
    if let Some(id) = created_here::next_id(tag, table_oid) {
        return (id, None);
    }
    loop {
        let (index, generation) = resolve_slot(registry, tag, table_oid);
        if let Some(id) = next_id_slow(registry, index, generation, tag, table_oid, true) {
            let from_slot = RESOLVED.with(|map| map.borrow().contains_key(tag));
            return (id, from_slot.then_some((index, generation)));
        }
    }
}

/// The bytes of a `text` datum, detoasted if need be.
///
/// # Safety
/// `datum` is a non-NULL `text` datum valid for the current call.
unsafe fn text_bytes<'a>(datum: pg_sys::Datum) -> &'a [u8] {
    // SAFETY (whole body): `datum` is a valid text datum; a packed short
    // varlena is returned as is, a toasted one is copied into the current
    // memory context, which outlives the call.
    let varlena = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
    let len = pgrx::varlena::varsize_any_exhdr(varlena);
    std::slice::from_raw_parts(pgrx::varlena::vardata_any(varlena) as *const u8, len)
}

/// What every hand-written C-level function's information function
/// returns: PostgreSQL's version-1 calling convention.
pub const V1_API: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_segment_nextval_fast() -> &'static pg_sys::Pg_finfo_record {
    &V1_API
}

/// `segment_nextval(tag text) → bigint`, declared in `sql/bootstrap.sql`.
///
/// Not `#[pg_guard]`: the common call — a constant tag, its slot known to
/// the call site, a backend drawing it alone — is served by `take_alone`,
/// which can neither raise an ERROR nor panic, in a frame with nothing to
/// drop, so it needs no boundary between Rust and PostgreSQL (pgrx's
/// "plain old frames"). Every other call, and every ERROR, goes through
/// the guarded `segment_nextval_guarded`; so does the wake of the worker
/// that a take crossing the prefetch mark asks for.
///
/// # Safety
/// Called by the function manager with a valid `fcinfo` for a function of
/// one `text` argument.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn segment_nextval_fast(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the caller's promise.
    match unsafe { take_alone(fcinfo) } {
        Some((id, None)) => pg_sys::Datum::from(id),
        Some((id, Some(index))) => {
            wake_worker_guarded(index);
            pg_sys::Datum::from(id)
        }
        // SAFETY: the caller's promise; this frame holds nothing to drop
        // if the guarded call raises an ERROR through it.
        None => unsafe { segment_nextval_guarded(fcinfo) },
    }
}

/// The next ID for a call whose tag is a constant with its slot known to
/// the call site, while this backend draws the tag alone (its block takes
/// single IDs): the ID, and the slot index if the take crossed the
/// prefetch mark (the worker is to be woken). `None` for anything else —
/// and then nothing was changed but a ticket spent on an empty chain,
/// which the guarded path spends again. Raises nothing, panics nowhere.
///
/// # Safety
/// As `segment_nextval_fast`.
#[inline(always)]
unsafe fn take_alone(fcinfo: pg_sys::FunctionCallInfo) -> Option<(i64, Option<usize>)> {
    let registry = registry()?;
    // SAFETY: a plain read of a backend-local global.
    if unsafe { pg_sys::XactReadOnly } {
        return None;
    }
    // SAFETY: the function manager passes a valid fcinfo with one argument
    // and a valid flinfo; fn_extra is ours (NULL or a CallSite we put there).
    let (arg, site) = unsafe {
        let call = &*fcinfo;
        let site = (*call.flinfo).fn_extra as *const CallSite;
        (call.args.as_slice(1)[0], site.as_ref()?)
    };
    if arg.isnull || !site.has_slot || !site.arg_is_const {
        return None;
    }
    let (index, generation) = (site.index, site.generation);
    // SAFETY: no other block reference is alive in this call; this one
    // ends with the function.
    let block = unsafe { block_of(index) };
    if !block.takes_single(index, generation) || crate::failpoints::forced_block_size().is_some() {
        return None;
    }
    let taken = registry.slot_checked(index)?.take_for(generation)?;
    block.took_single(taken.id);
    note_take(index);
    note_last(registry, index, generation, taken.id);
    Some((taken.id, taken.hit_mark.then_some(index)))
}

/// `wake_worker` behind pgrx's guard, for the unguarded common call.
#[cold]
#[inline(never)]
#[pg_guard]
extern "C-unwind" fn wake_worker_guarded(index: usize) {
    wake_worker(registry_or_raise(), index);
}

/// `segment_nextval(tag)` for every call `take_alone` does not serve.
///
/// # Safety
/// As `segment_nextval_fast`.
#[inline(never)]
#[pg_guard]
unsafe extern "C-unwind" fn segment_nextval_guarded(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let registry = registry_or_raise();
    check_writable("segment_nextval()");
    // SAFETY: the function manager passes a valid fcinfo with one argument
    // and a valid flinfo; fn_extra is ours (NULL or a CallSite we put there).
    let call = &mut *fcinfo;
    let arg = call.args.as_slice(1)[0];
    if arg.isnull {
        IdgenError::NullArgument {
            what: "segment tag",
        }
        .raise();
    }
    let flinfo = &mut *call.flinfo;
    let site = flinfo.fn_extra as *mut CallSite;
    if let Some(site) = site.as_mut() {
        if site.has_slot
            && (site.arg_is_const || text_bytes(arg.value) == &site.tag[..site.tag_len])
        {
            if let Some(id) = take_one(registry, site.index, site.generation) {
                note_last(registry, site.index, site.generation, id);
                return pg_sys::Datum::from(id);
            }
        }
    }
    let site = match site.as_mut() {
        Some(site) => site,
        None => {
            // SAFETY: fn_mcxt lives as long as the flinfo, i.e. the whole
            // query; the zeroed allocation is a valid CallSite.
            let site = &mut *(pg_sys::MemoryContextAllocZero(
                flinfo.fn_mcxt,
                std::mem::size_of::<CallSite>(),
            ) as *mut CallSite);
            site.arg_is_const = first_arg_is_const(flinfo);
            site.table_oid = current_table_oid(fcinfo);
            flinfo.fn_extra = (site as *mut CallSite).cast();
            site
        }
    };
    let tag = text_bytes(arg.value);
    // `site.table_oid` was looked up once, at the first call. A statement
    // that began before DROP EXTENSION cannot go on with the dropped
    // table: the drop freed the database's slots (`lifecycle.rs`), so the
    // tag is resolved again, and `check_row` finds that table gone.
    let (id, from_slot) = next_id(registry, tag, site.table_oid);
    // Remember the slot for the next call of this call site.
    site.has_slot = from_slot.is_some();
    match from_slot {
        Some((index, generation)) => {
            site.index = index;
            site.generation = generation;
            note_last(registry, index, generation, id);
        }
        None => {
            note_last_of_tag(tag, id);
        }
    }
    site.tag_len = tag.len();
    site.tag[..tag.len()].copy_from_slice(tag);
    pg_sys::Datum::from(id)
}

/// IDs a `segment_nextval(tag, n)` takes from shared memory at a time.
const BATCH_CHUNK: u64 = 1024;

/// The most IDs one `segment_reserve` call hands out.
pub const RESERVE_MAX: i32 = 1_000_000;

/// The rows of one `segment_nextval(tag, n)`: IDs taken a block at a time
/// (`RangeChain::take_block`) and handed out one per row. A block is given
/// up (a gap) when this backend took IDs elsewhere meanwhile (`TAKES_HERE`)
/// or the slot was freed, so IDs still increase within the backend and
/// never outlive a dropped tag.
struct Batch {
    registry: &'static Registry,
    tag: Vec<u8>,
    table_oid: u32,
    remaining: u64,
    block: Option<super::chain::TakenBlock>,
    run: usize,
    next: i64,
    left_in_run: u64,
    slot: (usize, u64),
    takes_seen: u64,
    /// The last ID came from `slot` (false: from no slot).
    from_slot: bool,
}

impl Batch {
    /// The next ID of the held block, if it may still be handed out.
    #[inline]
    fn next_held(&mut self) -> Option<i64> {
        let block = self.block.as_ref()?;
        if takes_here(self.slot.0).load(Ordering::Relaxed) != self.takes_seen
            || self
                .registry
                .slot(self.slot.0)
                .generation
                .load(Ordering::Acquire)
                != self.slot.1
        {
            self.block = None;
            return None;
        }
        if self.left_in_run == 0 {
            self.run += 1;
            let &(first, len) = block.runs().get(self.run)?;
            self.next = first;
            self.left_in_run = len;
        }
        let id = self.next;
        self.next += 1;
        self.left_in_run -= 1;
        Some(id)
    }

    /// Takes a new block, or one ID the slow way (waiting for a refill).
    fn take(&mut self) -> i64 {
        self.block = None;
        loop {
            self.from_slot = false;
            match resolve(self.registry, &self.tag, self.table_oid) {
                Source::OwnTransaction => {
                    return created_here::next_id(&self.tag, self.table_oid).unwrap_or_else(|| {
                        IdgenError::UnknownTag {
                            tag: tag_text(&self.tag),
                        }
                        .raise()
                    })
                }
                Source::Slot { index, generation } => {
                    self.slot = (index, generation);
                    self.from_slot = true;
                    let wanted = self.remaining.min(BATCH_CHUNK);
                    if let Some(block) = take_block(self.registry, index, generation, wanted) {
                        let (first, len) = block.runs()[0];
                        self.block = Some(block);
                        self.run = 0;
                        self.next = first + 1;
                        self.left_in_run = len - 1;
                        self.slot = (index, generation);
                        self.takes_seen = takes_here(index).load(Ordering::Relaxed);
                        return first;
                    }
                    let waited = next_id_slow(
                        self.registry,
                        index,
                        generation,
                        &self.tag,
                        self.table_oid,
                        true,
                    );
                    if let Some(id) = waited {
                        return id;
                    }
                }
            }
        }
    }
}

impl Iterator for Batch {
    type Item = i64;

    #[inline]
    fn next(&mut self) -> Option<i64> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let id = match self.next_held() {
            Some(id) => id,
            None => self.take(),
        };
        match self.from_slot {
            true => note_last(self.registry, self.slot.0, self.slot.1, id),
            false => {
                note_last_of_tag(&self.tag, id);
            }
        }
        Some(id)
    }
}

/// `segment_nextval(tag, n)`: `n` IDs of `tag`, increasing.
#[pg_extern(name = "segment_nextval", volatile, parallel_unsafe)]
fn segment_nextval_many(
    tag: Option<&str>,
    n: Option<i32>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> SetOfIterator<'static, i64> {
    let registry = registry_or_raise();
    check_writable("segment_nextval()");
    let (tag, n) = (required(tag, "segment tag"), required(n, "number of IDs"));
    if n < 0 {
        IdgenError::BadCount { n }.raise();
    }
    check_tag(tag.as_bytes());
    // Drawn a block at a time as the executor asks, not collected first:
    // n may be two billion.
    SetOfIterator::new(Batch {
        registry,
        tag: tag.as_bytes().to_vec(),
        table_oid: current_table_oid(fcinfo),
        remaining: n as u64,
        block: None,
        run: 0,
        next: 0,
        left_in_run: 0,
        slot: (0, 0),
        takes_seen: 0,
        from_slot: false,
    })
}

/// `segment_reserve(tag, n)`: `n` IDs of `tag` at once, as blocks of
/// consecutive IDs `(first, last)` — one block unless the reservation
/// crosses a range boundary — for a cache in the application. The same
/// guarantees as `segment_nextval`; never a snowflake fallback.
#[pg_extern(volatile, parallel_unsafe)]
fn segment_reserve(
    tag: Option<&str>,
    n: Option<i32>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> TableIterator<'static, (name!(first, i64), name!(last, i64))> {
    let registry = registry_or_raise();
    check_writable("segment_reserve()");
    let (tag, n) = (required(tag, "segment tag"), required(n, "number of IDs"));
    if !(1..=RESERVE_MAX).contains(&n) {
        IdgenError::BadReserveCount {
            n,
            max: RESERVE_MAX,
        }
        .raise();
    }
    let tag = tag.as_bytes();
    check_tag(tag);
    let table_oid = current_table_oid(fcinfo);
    let mut blocks: Vec<(i64, i64)> = Vec::new();
    fn add(blocks: &mut Vec<(i64, i64)>, first: i64, len: u64) {
        match blocks.last_mut() {
            Some((_, last)) if *last + 1 == first => *last += len as i64,
            _ => blocks.push((first, first + (len as i64 - 1))),
        }
    }
    let mut remaining = n as u64;
    // The slot the blocks so far came from: if the tag is dropped (and
    // made again) while the call waits, they are given up (a gap) and the
    // reservation starts over, so it never mixes the two tags' IDs.
    let mut taken_from: Option<(usize, u64)> = None;
    while remaining > 0 {
        let source = resolve(registry, tag, table_oid);
        let current = match source {
            Source::Slot { index, generation } => Some((index, generation)),
            Source::OwnTransaction => None,
        };
        if taken_from.is_some() && taken_from != current {
            blocks.clear();
            remaining = n as u64;
        }
        taken_from = current;
        match source {
            Source::OwnTransaction => {
                let (first, last) = created_here::next_ids(tag, table_oid, remaining as i64)
                    .unwrap_or_else(|| IdgenError::UnknownTag { tag: tag_text(tag) }.raise());
                add(&mut blocks, first, (last - first + 1) as u64);
                remaining = 0;
            }
            Source::Slot { index, generation } => {
                if let Some(block) = take_block(registry, index, generation, remaining) {
                    for &(first, len) in block.runs() {
                        add(&mut blocks, first, len);
                        remaining -= len;
                    }
                    continue;
                }
                // Nothing cached: wait for a range as a single call does,
                // and keep the ID it takes.
                if let Some(id) = next_id_slow(registry, index, generation, tag, table_oid, false) {
                    add(&mut blocks, id, 1);
                    remaining -= 1;
                }
            }
        }
    }
    TableIterator::new(blocks)
}

/// The coordinator's side of a Citus worker's refill (`citus_source.rs`):
/// the version-CAS on this node's `id_segment`, answered as one row — a
/// problem too, an error of the CAS (a row locked past its short wait:
/// 55P03, which the worker retries) included, so the command itself
/// succeeds. Refused (0A000) on a node that is not the coordinator. Not executable
/// by `PUBLIC`: Citus connects as the worker's `id_segment` owner.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_unsafe)]
fn segment_citus_range(
    tag: Option<&str>,
    steps: Option<i64>,
    floor: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(first, Option<i64>),
        name!(len, Option<i64>),
        name!(asked, Option<i64>),
        name!(step, Option<i64>),
        name!(cas_conflicts, Option<i64>),
        name!(sqlstate, Option<i32>),
        name!(message, Option<String>),
        name!(hint, Option<String>),
    ),
> {
    require_coordinator("segment_citus_range");
    let tag = required(tag, "segment tag");
    let steps = u64::try_from(required(steps, "steps")).unwrap_or(1).max(1);
    let mut central = None;
    // A row locked past the refill's short wait (this coordinator's own
    // refill worker, another worker's refill) is answered as 55P03, which
    // the worker's waiting callers wait through while it retries, like a
    // local refill's; not as an error of the whole command.
    let taken = crate::bgworker::in_subtransaction(|| {
        distributor::take_range(
            tag,
            steps,
            super::registry::WorkerKey::LOCAL,
            0,
            floor,
            &mut central,
        )
    });
    let taken = match taken {
        Ok(taken) => taken,
        Err(caught) => {
            let locked = caught.sqlstate == PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE as i32;
            let e = match locked {
                true => IdgenError::RefillRowLocked { central: None }.stored(),
                false => caught,
            };
            // The worker's hint may send the DBA to this server's log; a
            // row locked for a moment is routine and retried.
            if !locked {
                pgrx::log!(
                    "pg_idgen: a Citus worker's refill of segment tag \"{tag}\" failed here: {} (hint: {})",
                    e.message,
                    e.hint
                );
            }
            return TableIterator::once((
                None,
                None,
                None,
                None,
                None,
                Some(e.sqlstate),
                Some(e.message),
                Some(e.hint),
            ));
        }
    };
    let row = match taken {
        Ok(Ok(g)) => (
            Some(g.first),
            Some(g.len as i64),
            Some(g.asked as i64),
            Some(g.step),
            Some(g.cas_conflicts as i64),
            None,
            None,
            None,
        ),
        Ok(Err(problem)) => {
            let problem = match problem {
                // An attached tag on the coordinator: its lane is not this
                // call's, and a worker cannot reach that central server.
                RefillProblem::ServedByAnotherLane { .. } => RefillProblem::NoRow,
                // Below the worker's own mark: the hint must name every
                // worker's, which the catch-up asks for.
                RefillProblem::MaxIdBehind { max_id, handed_out } => RefillProblem::CitusWentBack {
                    max_id,
                    seen: handed_out,
                },
                other => other,
            };
            let report = problem.stored(tag);
            (
                None,
                None,
                None,
                None,
                None,
                Some(report.sqlstate),
                Some(report.message),
                Some(report.hint),
            )
        }
        Err(e) => IdgenError::Internal {
            context: "segment_citus_range",
            message: e.to_string(),
        }
        .raise(),
    };
    TableIterator::once(row)
}

/// Refuses (0A000) a coordinator-only function anywhere but on the Citus
/// coordinator, saying where it was called.
fn require_coordinator(function: &'static str) {
    use crate::citus::Node;
    use crate::errors::NotCoordinator;
    let elsewhere = match crate::citus::node() {
        Ok(Node::Coordinator) => return,
        Ok(Node::NotCitus) => NotCoordinator::NoCitus,
        Ok(Node::NotJoined) => NotCoordinator::NotJoined,
        Ok(Node::Worker { .. }) => NotCoordinator::Worker,
        Err(e) => IdgenError::Internal {
            context: function,
            message: e.to_string(),
        }
        .raise(),
    };
    IdgenError::CitusNotCoordinator {
        function,
        elsewhere,
    }
    .raise();
}

/// `segment_citus_catch_up()`: on the Citus coordinator, raises every
/// tag's row above what every worker took (`id_segment_citus.max_id_seen`)
/// and records the timeline as caught up (`citus_catch_up.rs`; the first
/// refill on a new timeline does the same by itself). Refused (08006,
/// nothing changed) when a worker does not answer. Returns the rows it
/// raised. Not executable by `PUBLIC`.
#[pg_extern(volatile, parallel_unsafe)]
fn segment_citus_catch_up() -> TableIterator<
    'static,
    (
        name!(biz_tag, String),
        name!(raised_from, i64),
        name!(raised_to, i64),
    ),
> {
    require_coordinator("segment_citus_catch_up");
    match distributor::citus_catch_up_now() {
        Ok(Ok(raised)) => TableIterator::new(raised.into_iter().map(|r| (r.tag, r.from, r.to))),
        Ok(Err(unanswered)) => super::citus_catch_up::refuse(unanswered),
        Err(e) => IdgenError::Internal {
            context: "segment_citus_catch_up",
            message: e.to_string(),
        }
        .raise(),
    }
}
