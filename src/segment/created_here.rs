//! Tags created by the calling transaction (`segment_create` in a
//! migration, say): their row is invisible to the refill worker until the
//! transaction commits, so the transaction hands out their IDs itself.
//!
//! IDs come from a counter in the backend that starts at the tag's
//! `start`, and never from UPDATEs of the row: a savepoint rolled back (or
//! a PL/pgSQL `EXCEPTION` block left by an error) does not take the counter
//! back, so no ID comes out twice within the transaction. Just before the
//! transaction commits or is prepared (`XACT_EVENT_PRE_COMMIT`,
//! `XACT_EVENT_PRE_PREPARE`) the row's `max_id` is raised past the last
//! ID handed out, so every allocator continues above it afterwards. If the
//! creation itself is rolled back — the whole transaction, or the
//! subtransaction that made it — the tag never existed, and its entry is
//! dropped with it: a subtransaction that aborts takes every entry made
//! inside it, and inside its children (their IDs are larger than its own).
//!
//! Backend-local state: PostgreSQL backends are single-threaded processes.

use super::distributor;
use crate::errors::IdgenError;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;

struct Created {
    /// The top-level transaction and the subtransaction that created it.
    transaction: pg_sys::TransactionId,
    subtransaction: pg_sys::SubTransactionId,
    table_oid: u32,
    next_id: i64,
    /// Largest ID handed out (`start - 1` before the first).
    handed_out: i64,
    drew: bool,
}

thread_local! {
    static CREATED: RefCell<HashMap<Vec<u8>, Created>> = RefCell::new(HashMap::new());
    static CALLBACKS_REGISTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn top_transaction() -> pg_sys::TransactionId {
    // SAFETY: plain read of the backend's transaction state.
    unsafe { pg_sys::GetTopTransactionIdIfAny() }
}

/// Records that the current (sub)transaction created `tag` in `table_oid`
/// with `max_id = start - 1`.
pub fn created(tag: &[u8], table_oid: u32, start: i64) {
    register_callbacks();
    // SAFETY: plain reads of the backend's transaction state; the caller's
    // INSERT gave the transaction an ID.
    let (transaction, subtransaction) = unsafe {
        (
            pg_sys::GetTopTransactionId(),
            pg_sys::GetCurrentSubTransactionId(),
        )
    };
    CREATED.with(|map| {
        let mut map = map.borrow_mut();
        map.retain(|_, c| c.transaction == transaction);
        map.insert(
            tag.to_vec(),
            Created {
                transaction,
                subtransaction,
                table_oid,
                next_id: start,
                handed_out: start - 1,
                drew: false,
            },
        );
    });
}

/// Forgets `tag` (dropped by this transaction).
pub fn dropped(tag: &[u8]) {
    CREATED.with(|map| map.borrow_mut().remove(tag));
}

/// Whether the current transaction created `tag` (and has not rolled that
/// back).
pub fn is_created_here(tag: &[u8]) -> bool {
    let top = top_transaction();
    top != pg_sys::InvalidTransactionId
        && CREATED.with(|map| map.borrow().get(tag).is_some_and(|c| c.transaction == top))
}

/// The next ID of a tag this transaction created, or `None` if it did not.
pub fn next_id(tag: &[u8]) -> Option<i64> {
    let top = top_transaction();
    CREATED.with(|map| {
        let mut map = map.borrow_mut();
        let created = map.get_mut(tag).filter(|c| c.transaction == top)?;
        let id = created.next_id;
        if created.handed_out == i64::MAX {
            IdgenError::RefillFailed {
                tag: String::from_utf8_lossy(tag).into_owned(),
                sqlstate: pgrx::PgSqlErrorCode::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED as i32,
                message: format!(
                    "segment tag \"{}\" is exhausted: its last ID is the largest bigint",
                    String::from_utf8_lossy(tag)
                ),
                hint: "No more IDs can be handed out for this tag; move the table to a new tag."
                    .into(),
            }
            .raise();
        }
        created.handed_out = id;
        created.next_id = id.saturating_add(1);
        created.drew = true;
        Some(id)
    })
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
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        // Everything made in the aborted subtransaction or its children.
        CREATED.with(|map| map.borrow_mut().retain(|_, c| c.subtransaction < aborted));
    }
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
            CREATED.with(|map| map.borrow_mut().clear())
        }
        _ => {}
    }
}

/// Raises each created tag's `max_id` past its last ID, in the committing
/// transaction, before it commits.
fn raise_max_ids() {
    let top = top_transaction();
    let pending: Vec<(Vec<u8>, u32, i64)> = CREATED.with(|map| {
        map.borrow()
            .iter()
            .filter(|(_, c)| c.transaction == top && c.drew)
            .map(|(tag, c)| (tag.clone(), c.table_oid, c.handed_out))
            .collect()
    });
    for (tag, table_oid, handed_out) in pending {
        distributor::raise_max_id(table_oid, &String::from_utf8_lossy(&tag), handed_out);
    }
}
