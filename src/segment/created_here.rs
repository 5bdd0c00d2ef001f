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
//! * a tag created after the transaction removed a committed tag of the
//!   same name hands out no ID: a rollback would bring that tag back,
//!   below the IDs handed out here, and no write survives the rollback to
//!   raise it. Removed means `segment_drop`, `segment_rename` away, a
//!   plain `DELETE` or `TRUNCATE`, of `id_segment` or of
//!   `id_segment_remote` (an attached tag detached):
//!   `tag::committed_row_removed_here` reads it from the table; or the
//!   whole table: `DROP EXTENSION` (`table_dropped`, from the drop hook),
//!   or the committed `id_segment` or `id_segment_remote` renamed or
//!   moved away, or the tag created in an `id_segment` made by this
//!   transaction while pg_idgen is older (`tag::tables_replaced_here`);
//! * the state is of a tag name in one `id_segment`: a call through
//!   functions beside another table is not served from it;
//! * a rename carries the old name's `high_water` over to the new name
//!   (its row is the old one, moved), never lowering it;
//! * just before the transaction commits or is prepared
//!   (`XACT_EVENT_PRE_COMMIT`, `XACT_EVENT_PRE_PREPARE`), the tag's row, if
//!   there is one, gets `max_id >= high_water`, checked, so every allocator
//!   continues above every ID the transaction handed out under the name.
//!
//! Backend-local state: PostgreSQL backends are single-threaded processes.

use super::tag::{row_state, RowState};
use crate::catalog::{as_owner, table_name_and_owner};
use crate::errors::IdgenError;
use pgrx::pg_sys;
use pgrx::spi::Spi;
use std::cell::RefCell;
use std::collections::HashMap;

struct Creation {
    subtransaction: pg_sys::SubTransactionId,
    start: i64,
    /// Whether the transaction had removed a committed tag of the name
    /// when it created this one (read once: a removal can only come before
    /// the creation, and only rolling back past both undoes it).
    over_removed: bool,
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
    /// The subtransaction that dropped an `id_segment` table (`DROP
    /// EXTENSION`) in the transaction in progress, if any: every tag of
    /// the table a rollback would bring back counts as removed.
    static TABLE_DROPPED_IN: std::cell::Cell<Option<pg_sys::SubTransactionId>> =
        const { std::cell::Cell::new(None) };
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
    let remote_oid = super::tag::remote_table_oid(table_oid);
    let over_removed = TABLE_DROPPED_IN.with(|dropped| dropped.get().is_some())
        || super::tag::committed_row_removed_here(table_oid, tag)
        || (remote_oid != 0 && super::tag::committed_row_removed_here(remote_oid, tag))
        || super::tag::tables_replaced_here(table_oid);
    with_state(tag, table_oid, |state| {
        state.creations.push(Creation {
            subtransaction,
            start,
            over_removed,
            dropped_in: None,
        })
    });
}

/// Records that the current (sub)transaction dropped an `id_segment`
/// table (`lifecycle.rs`, from the drop hook).
pub fn table_dropped() {
    register_callbacks();
    let (_, subtransaction) = transaction_ids();
    TABLE_DROPPED_IN.with(|dropped| {
        if dropped.get().is_none() {
            dropped.set(Some(subtransaction));
        }
    });
}

/// Records that the current (sub)transaction dropped `tag` (a tag it
/// created, if it did).
pub fn dropped(tag: &[u8], table_oid: u32) {
    let (_, subtransaction) = transaction_ids();
    with_state(tag, table_oid, |state| {
        if let Some(live) = state.creations.last_mut() {
            live.dropped_in.get_or_insert(subtransaction);
        }
    });
}

/// Records that the current (sub)transaction renamed `old` to `new`
/// (`segment_rename`): `old`'s name is free, as after a drop, and `new`'s
/// row — `old`'s, moved — is raised at commit past the IDs handed out
/// under `old` here (its `high_water`), as `old`'s would have been.
pub fn renamed(old: &[u8], new: &[u8], table_oid: u32) {
    dropped(old, table_oid);
    let (transaction, _) = transaction_ids();
    let carried = TAGS.with(|tags| {
        tags.borrow()
            .get(old)
            .filter(|s| s.transaction == transaction)
            .and_then(|s| s.high_water)
    });
    if let Some(high) = carried {
        with_state(new, table_oid, |state| {
            state.high_water = Some(state.high_water.map_or(high, |h| h.max(high)));
        });
    }
}

/// Whether the current transaction created `tag` in table `table_oid` and
/// has not dropped it (or rolled either back). A tag of the name it
/// created in another `id_segment` (its functions moved to another
/// schema meanwhile, say) is not this table's: found by an attack review,
/// that one's IDs were handed out under this table's tag.
pub fn is_created_here(tag: &[u8], table_oid: u32) -> bool {
    let (transaction, _) = transaction_ids();
    transaction != pg_sys::InvalidTransactionId
        && TAGS.with(|tags| {
            tags.borrow().get(tag).is_some_and(|s| {
                s.transaction == transaction && s.table_oid == table_oid && s.live().is_some()
            })
        })
}

/// The next ID of a tag this transaction created in table `table_oid`, or
/// `None` if it did not.
pub fn next_id(tag: &[u8], table_oid: u32) -> Option<i64> {
    next_ids(tag, table_oid, 1).map(|(first, _)| first)
}

/// The next `n` IDs (`n >= 1`) of a tag this transaction created in table
/// `table_oid`, as `(first, last)`, or `None` if it did not create it.
pub fn next_ids(tag: &[u8], table_oid: u32, n: i64) -> Option<(i64, i64)> {
    let (transaction, _) = transaction_ids();
    let (first, last, table_oid) = TAGS.with(|tags| {
        let mut tags = tags.borrow_mut();
        let state = tags
            .get_mut(tag)
            .filter(|s| s.transaction == transaction && s.table_oid == table_oid)?;
        let live = state.live()?;
        let start = live.start;
        if live.over_removed {
            IdgenError::DrawAfterRemovedHere {
                tag: String::from_utf8_lossy(tag).into_owned(),
            }
            .raise();
        }
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
    match row_state(table_oid, tag) {
        RowState::NoTable => IdgenError::ExtensionDropped.raise(),
        RowState::Missing => IdgenError::UnknownTag {
            tag: String::from_utf8_lossy(tag).into_owned(),
        }
        .raise(),
        _ => Some((first, last)),
    }
}

#[track_caller]
fn exhausted(tag: &[u8]) -> ! {
    IdgenError::TagExhausted {
        tag: String::from_utf8_lossy(tag).into_owned(),
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
    TABLE_DROPPED_IN.with(|dropped| {
        if dropped.get().is_some_and(|s| s >= aborted) {
            dropped.set(None);
        }
    });
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
            TAGS.with(|tags| tags.borrow_mut().clear());
            TABLE_DROPPED_IN.with(|dropped| dropped.set(None));
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
        raise_max_id(table_oid, &String::from_utf8_lossy(&tag), high_water);
    }
}

/// Raises `tag`'s `max_id` to at least `high_water` (bumping `version`,
/// so that an allocator's CAS in flight cannot write over it), in the
/// calling transaction as it is about to commit, for a tag under whose name
/// that transaction handed out IDs itself (see `created_here.rs`). A tag
/// whose row is gone needs nothing; a row that is there but was not raised
/// (a trigger, rule or policy in the way, a read-only transaction) fails
/// the commit, so that no ID can come out twice.
pub fn raise_max_id(table_oid: u32, tag: &str, high_water: i64) {
    let Some((name, owner)) = table_name_and_owner(table_oid) else {
        return;
    };
    let failed = |why: String| -> ! {
        IdgenError::MaxIdNotRaised {
            tag: tag.to_string(),
            high_water,
            why,
        }
        .raise()
    };
    // SAFETY: plain read of a backend-local global.
    if unsafe { pg_sys::XactReadOnly } {
        failed("the transaction is read-only".into());
    }
    let update = format!(
        "UPDATE {name} SET max_id = GREATEST(max_id, $2), version = version OPERATOR(pg_catalog.+) 1, \
                updated_at = pg_catalog.now() \
          WHERE biz_tag OPERATOR(pg_catalog.=) $1 RETURNING max_id"
    );
    let exists = format!("SELECT 1 FROM {name} WHERE biz_tag OPERATOR(pg_catalog.=) $1");
    // SAFETY: called before the commit, inside the transaction; the
    // snapshot pushed here is popped below (or by the abort on ERROR).
    unsafe {
        pg_sys::CommandCounterIncrement();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let result = as_owner(owner, || {
        Spi::connect_mut(|client| {
            let raised = client.update(update.as_str(), None, &[tag.into(), high_water.into()])?;
            let raised_to = raised.first().get::<i64>(1).ok().flatten();
            let there = !client
                .select(exists.as_str(), Some(1), &[tag.into()])?
                .is_empty();
            Ok::<_, pgrx::spi::Error>((raised_to, there))
        })
    });
    // SAFETY: matches the push above.
    unsafe { pg_sys::PopActiveSnapshot() };
    match result {
        Err(e) => failed(e.to_string()),
        Ok((Some(max_id), _)) if max_id >= high_water => {}
        Ok((Some(max_id), _)) => failed(format!("max_id ended at {max_id}")),
        Ok((None, true)) => failed("the UPDATE of its row changed nothing".into()),
        Ok((None, false)) => {} // dropped: nothing left to protect
    }
}
