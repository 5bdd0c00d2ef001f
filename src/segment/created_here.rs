//! Tags created by the calling transaction (`segment_create` in a
//! migration, say): their row is invisible to the refill worker until the
//! transaction commits, so the transaction hands out their IDs itself.
//!
//! For each tag name it touched, the transaction keeps the largest ID it
//! handed out under that name (`high_water`, never lowered) and the stack
//! of its `segment_create`s and `segment_drop`s, each marked with the
//! subtransaction that made it:
//!
//! * an ID is `max(high_water + 1, start of the live creation)`, from the
//!   backend, never from UPDATEs of the row — a savepoint rolled back (or a
//!   PL/pgSQL `EXCEPTION` block left by an error) does not take it back;
//! * a subtransaction that aborts takes the creations made inside it and
//!   inside its children (their subtransaction IDs are larger), and undoes
//!   the drops made there — but never `high_water`;
//! * just before the transaction commits or is prepared
//!   (`XACT_EVENT_PRE_COMMIT`, `XACT_EVENT_PRE_PREPARE`), the tag's row, if
//!   there is one, gets `max_id >= high_water`, checked, so every allocator
//!   continues above every ID the transaction handed out under the name.
//!
//! Backend-local state: PostgreSQL backends are single-threaded processes.

use super::distributor;
use crate::errors::IdgenError;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;

struct Creation {
    subtransaction: pg_sys::SubTransactionId,
    start: i64,
    /// The subtransaction whose `segment_drop` removed it, if any.
    dropped_in: Option<pg_sys::SubTransactionId>,
}

struct TagState {
    transaction: pg_sys::TransactionId,
    table_oid: u32,
    high_water: Option<i64>,
    creations: Vec<Creation>,
}

impl TagState {
    fn live(&self) -> Option<&Creation> {
        self.creations.last().filter(|c| c.dropped_in.is_none())
    }
}

thread_local! {
    static TAGS: RefCell<HashMap<Vec<u8>, TagState>> = RefCell::new(HashMap::new());
    static CALLBACKS_REGISTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn transaction_ids() -> (pg_sys::TransactionId, pg_sys::SubTransactionId) {
    // SAFETY: plain reads of the backend's transaction state.
    unsafe {
        (
            pg_sys::GetTopTransactionIdIfAny(),
            pg_sys::GetCurrentSubTransactionId(),
        )
    }
}

/// The state of `tag` in the current transaction, made if need be.
fn with_state<R>(tag: &[u8], table_oid: u32, body: impl FnOnce(&mut TagState) -> R) -> R {
    register_callbacks();
    let (transaction, _) = transaction_ids();
    TAGS.with(|tags| {
        let mut tags = tags.borrow_mut();
        tags.retain(|_, state| state.transaction == transaction);
        let state = tags.entry(tag.to_vec()).or_insert_with(|| TagState {
            transaction,
            table_oid,
            high_water: None,
            creations: Vec::new(),
        });
        state.table_oid = table_oid;
        body(state)
    })
}

/// Records that the current (sub)transaction created `tag` in `table_oid`
/// with `max_id = start - 1`.
pub fn created(tag: &[u8], table_oid: u32, start: i64) {
    let (_, subtransaction) = transaction_ids();
    with_state(tag, table_oid, |state| {
        state.creations.push(Creation {
            subtransaction,
            start,
            dropped_in: None,
        })
    });
}

/// Records that the current (sub)transaction dropped `tag`.
pub fn dropped(tag: &[u8], table_oid: u32) {
    let (_, subtransaction) = transaction_ids();
    with_state(tag, table_oid, |state| {
        if let Some(live) = state.creations.last_mut() {
            live.dropped_in.get_or_insert(subtransaction);
        }
    });
}

/// Whether the current transaction created `tag` and has not dropped it
/// (or rolled either back).
pub fn is_created_here(tag: &[u8]) -> bool {
    let (transaction, _) = transaction_ids();
    transaction != pg_sys::InvalidTransactionId
        && TAGS.with(|tags| {
            tags.borrow()
                .get(tag)
                .is_some_and(|s| s.transaction == transaction && s.live().is_some())
        })
}

/// The next ID of a tag this transaction created, or `None` if it did not.
pub fn next_id(tag: &[u8]) -> Option<i64> {
    next_ids(tag, 1).map(|(first, _)| first)
}

/// The next `n` IDs (`n >= 1`) of a tag this transaction created, as
/// `(first, last)`, or `None` if it did not create it.
pub fn next_ids(tag: &[u8], n: i64) -> Option<(i64, i64)> {
    let (transaction, _) = transaction_ids();
    let (first, last, table_oid) = TAGS.with(|tags| {
        let mut tags = tags.borrow_mut();
        let state = tags.get_mut(tag).filter(|s| s.transaction == transaction)?;
        let start = state.live()?.start;
        let first = match state.high_water {
            Some(i64::MAX) => exhausted(tag),
            Some(high) => (high + 1).max(start),
            None => start,
        };
        let last = first
            .checked_add(n.max(1) - 1)
            .unwrap_or_else(|| exhausted(tag));
        state.high_water = Some(last);
        Some((first, last, state.table_oid))
    })?;
    // The row must still be there (a plain DELETE, a dropped extension).
    match distributor::row_state(table_oid, tag) {
        distributor::RowState::NoTable => IdgenError::ExtensionDropped.raise(),
        distributor::RowState::Missing => IdgenError::UnknownTag {
            tag: String::from_utf8_lossy(tag).into_owned(),
        }
        .raise(),
        _ => Some((first, last)),
    }
}

fn exhausted(tag: &[u8]) -> ! {
    let tag = String::from_utf8_lossy(tag).into_owned();
    IdgenError::RefillFailed {
        message: format!("segment tag \"{tag}\" is exhausted: its last ID is the largest bigint"),
        tag,
        sqlstate: pgrx::PgSqlErrorCode::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED as i32,
        hint: "No more IDs can be handed out for this tag; move the table to a new tag.".into(),
    }
    .raise()
}

fn register_callbacks() {
    if CALLBACKS_REGISTERED.with(|r| r.replace(true)) {
        return;
    }
    // SAFETY: registers process-lifetime callbacks once per backend.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_transaction_event), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subtransaction_event), std::ptr::null_mut());
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_subtransaction_event(
    event: pg_sys::SubXactEvent::Type,
    aborted: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event != pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        return;
    }
    // Undo what the aborted subtransaction and its children did; keep
    // every high-water mark.
    TAGS.with(|tags| {
        for state in tags.borrow_mut().values_mut() {
            state.creations.retain(|c| c.subtransaction < aborted);
            for creation in &mut state.creations {
                if creation.dropped_in.is_some_and(|s| s >= aborted) {
                    creation.dropped_in = None;
                }
            }
        }
    });
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_transaction_event(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PRE_PREPARE => raise_max_ids(),
        XACT_EVENT_COMMIT | XACT_EVENT_ABORT | XACT_EVENT_PREPARE => {
            TAGS.with(|tags| tags.borrow_mut().clear())
        }
        _ => {}
    }
}

/// Raises each touched tag's `max_id` past the IDs handed out under its
/// name, in the committing transaction, before it commits.
fn raise_max_ids() {
    let (transaction, _) = transaction_ids();
    let pending: Vec<(Vec<u8>, u32, i64)> = TAGS.with(|tags| {
        tags.borrow()
            .iter()
            .filter(|(_, s)| s.transaction == transaction)
            .filter_map(|(tag, s)| s.high_water.map(|h| (tag.clone(), s.table_oid, h)))
            .collect()
    });
    for (tag, table_oid, high_water) in pending {
        distributor::raise_max_id(table_oid, &String::from_utf8_lossy(&tag), high_water);
    }
}
