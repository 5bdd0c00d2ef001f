//! `segment_status`: one row per (database, tag) in shared memory — the
//! allocator's dashboard. Reads each slot under the registry lock (shared)
//! for its identity and error text; the chain and counters are atomics, so
//! a row is exact field by field, not as one snapshot.

use super::registry::{registry_or_raise, WorkerKey, WORKER_RUNNING};
use crate::catalog::database_name;
use pgrx::prelude::*;
use std::sync::atomic::Ordering;

// The row type must be spelled out for pgrx to derive the SQL columns.
#[allow(clippy::type_complexity)]
#[pg_extern(name = "segment_status", volatile)]
fn segment_status_rows() -> TableIterator<
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
