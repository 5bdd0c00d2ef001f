//! `segment_status`: one row per (database, tag) in shared memory — the
//! allocator's dashboard. Reads each slot under the registry lock (shared)
//! for its identity and error text; the chain and counters are atomics, so
//! a row is exact field by field, not as one snapshot.

use super::registry::{registry_or_raise, WorkerKey, WORKER_RUNNING};
use crate::catalog::database_name;
use crate::errors::IdgenError;
use pgrx::prelude::*;
use std::sync::atomic::Ordering;

// The row type must be spelled out for pgrx to derive the SQL columns.
#[allow(clippy::type_complexity)]
#[pg_extern(name = "segment_status", volatile)]
fn segment_status_rows(
    fcinfo: pg_sys::FunctionCallInfo,
) -> TableIterator<
    'static,
    (
        name!(database, String),
        name!(tag, String),
        name!(range_first, Option<i64>),
        name!(range_last, Option<i64>),
        name!(next_id, Option<i64>),
        name!(remaining_in_range, i64),
        name!(pct_used, f64),
        name!(ranges_ahead, i64),
        name!(ids_ahead, i64),
        name!(safe_distance, i64),
        name!(step, Option<i64>),
        name!(steps_per_refill, Option<i64>),
        name!(ids_per_refill, Option<i64>),
        name!(refills, i64),
        name!(cas_conflicts, i64),
        name!(refill_failures, i64),
        name!(waits, i64),
        name!(wait_ms, f64),
        name!(fallback_ids, i64),
        name!(ids_taken, i64),
        name!(ids_per_second, i64),
        name!(last_refill, Option<pgrx::datum::TimestampWithTimeZone>),
        name!(last_refill_ms, Option<f64>),
        name!(last_error, Option<String>),
        name!(worker_pid, Option<i32>),
        name!(block_size, i64),
    ),
> {
    check_declared_columns(fcinfo);
    let registry = registry_or_raise();
    let workers = registry.workers();
    let mut rows = Vec::new();
    for (_, slot) in registry.slots() {
        let (tag, database, error) = {
            let shared = registry.lock(false);
            if !slot.is_active() {
                continue;
            }
            (slot.tag(&shared), slot.database(), slot.last_error(&shared))
        };
        let chain = slot.status();
        let stats = &slot.stats;
        let has_range = chain.current_len > 0;
        let remaining = chain.current_len - chain.current_used;
        let refills = stats.refills.load(Ordering::Relaxed);
        let last_refill_at = stats.last_refill_at.load(Ordering::Relaxed);
        let serving = WorkerKey {
            database,
            lane: slot.lane(),
        };
        let worker_pid = workers
            .iter()
            .find(|(key, _, state)| *key == serving && *state == WORKER_RUNNING)
            .map(|(_, pid, _)| *pid);
        rows.push((
            database_name(database),
            tag,
            has_range.then_some(chain.current_first),
            has_range.then(|| chain.current_first + chain.current_len as i64 - 1),
            (remaining > 0).then(|| chain.current_first + chain.current_used as i64),
            remaining as i64,
            if has_range {
                100.0 * chain.current_used as f64 / chain.current_len as f64
            } else {
                0.0
            },
            chain.ranges_ahead as i64,
            chain.ids_ahead as i64,
            stats.safe_distance.load(Ordering::Relaxed) as i64,
            (refills > 0).then(|| stats.step.load(Ordering::Relaxed)),
            (refills > 0).then(|| stats.last_refill_steps.load(Ordering::Relaxed) as i64),
            (refills > 0).then(|| stats.last_refill_ids.load(Ordering::Relaxed) as i64),
            refills as i64,
            stats.cas_conflicts.load(Ordering::Relaxed) as i64,
            stats.refill_failures.load(Ordering::Relaxed) as i64,
            stats.waits.load(Ordering::Relaxed) as i64,
            stats.wait_micros.load(Ordering::Relaxed) as f64 / 1000.0,
            stats.fallback_ids.load(Ordering::Relaxed) as i64,
            chain
                .ids_taken
                .saturating_sub(stats.taken_base.load(Ordering::Relaxed)) as i64,
            stats.ids_per_second.load(Ordering::Relaxed) as i64,
            (last_refill_at != 0).then(|| {
                // SAFETY: a TimestampTz stored by the worker.
                unsafe {
                    pgrx::datum::TimestampWithTimeZone::from_datum(
                        pg_sys::Datum::from(last_refill_at),
                        false,
                    )
                }
                .expect("non-null timestamp")
            }),
            (refills > 0).then(|| stats.last_refill_micros.load(Ordering::Relaxed) as f64 / 1000.0),
            error.map(|e| e.message),
            worker_pid,
            stats.block_size.load(Ordering::Relaxed).max(1) as i64,
        ));
    }
    TableIterator::new(rows)
}

/// The types of the row above, in its order.
fn column_types() -> [pg_sys::Oid; 26] {
    let (text, int8, float8) = (pg_sys::TEXTOID, pg_sys::INT8OID, pg_sys::FLOAT8OID);
    [
        text,                   // database
        text,                   // tag
        int8,                   // range_first
        int8,                   // range_last
        int8,                   // next_id
        int8,                   // remaining_in_range
        float8,                 // pct_used
        int8,                   // ranges_ahead
        int8,                   // ids_ahead
        int8,                   // safe_distance
        int8,                   // step
        int8,                   // steps_per_refill
        int8,                   // ids_per_refill
        int8,                   // refills
        int8,                   // cas_conflicts
        int8,                   // refill_failures
        int8,                   // waits
        float8,                 // wait_ms
        int8,                   // fallback_ids
        int8,                   // ids_taken
        int8,                   // ids_per_second
        pg_sys::TIMESTAMPTZOID, // last_refill
        float8,                 // last_refill_ms
        text,                   // last_error
        pg_sys::INT4OID,        // worker_pid
        int8,                   // block_size
    ]
}

/// Refuses a call through a declaration whose columns are not a prefix of
/// this row type (0.1.0's: 0.2.0 put `ids_per_second` in the middle). The
/// rows are built in the declared type (pgrx's `TableIterator`), so a
/// column of another type would hold a value read as that type — a
/// `float8` read as a pointer to text crashed the server. A declaration
/// with fewer columns of the same types (0.2.0's, 0.3.0's) reads well.
fn check_declared_columns(fcinfo: pg_sys::FunctionCallInfo) {
    let mut declared: pg_sys::TupleDesc = std::ptr::null_mut();
    // SAFETY: the function manager's fcinfo of this call; the descriptor
    // it returns lives for the call.
    let class =
        unsafe { pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut declared) };
    if class != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE || declared.is_null() {
        return;
    }
    // SAFETY: a valid descriptor, not ours to free.
    let declared = unsafe { pgrx::PgTupleDesc::from_pg_unchecked(declared) };
    let ours = column_types();
    for (i, attribute) in (0..declared.len()).filter_map(|i| declared.get(i).map(|a| (i, a))) {
        if ours.get(i) != Some(&attribute.atttypid) {
            IdgenError::DeclarationOutdated {
                function: "segment_status()",
                column: i as i32 + 1,
            }
            .raise();
        }
    }
}
