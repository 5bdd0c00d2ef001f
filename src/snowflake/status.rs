//! `snowflake_status`: one row per generator (the default layout and the
//! JavaScript-safe one). Reads atomics only. `machine_id` is NULL while
//! the generators have none (unset, or a lease or Citus group not given
//! yet), and `machine_problem` says why — or what is wrong with the one
//! they have.

use super::clock::{now_unix_ms, to_timestamptz};
use super::config::config;
use super::generator::Generator;
use super::shared::{snowflake_or_raise, Snowflake};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use std::sync::atomic::Ordering;

/// Whether the generators have a machine id now, and what is wrong with
/// it: unset, not given yet (a lease or a Citus group: why), or shared
/// with another Citus node.
fn machine_state(state: &Snowflake) -> (bool, Option<String>) {
    let Some(config) = config() else {
        return (false, None);
    };
    if !config.machine_set {
        return (
            false,
            Some("pg_idgen.machine_id is not set: snowflake_nextval() refuses".into()),
        );
    }
    let given_later = config.lease || config.citus;
    if given_later && state.lease.machine.load(Ordering::Acquire) < 0 {
        let why = state
            .lease
            .last_problem()
            .unwrap_or_else(|| "not given yet".into());
        return (false, Some(why));
    }
    (true, state.machine_problem())
}

// The row type must be spelled out for pgrx to derive the SQL columns.
#[allow(clippy::type_complexity)]
#[pg_extern(name = "snowflake_status", volatile)]
fn snowflake_status_rows() -> TableIterator<
    'static,
    (
        name!(generator, String),
        name!(machine_id, Option<i64>),
        name!(time_bits, i32),
        name!(machine_bits, i32),
        name!(sequence_bits, i32),
        name!(epoch, TimestampWithTimeZone),
        name!(last_issued, Option<TimestampWithTimeZone>),
        name!(lead_ms, Option<i64>),
        name!(persisted_until, Option<TimestampWithTimeZone>),
        name!(restarted_above, Option<TimestampWithTimeZone>),
        name!(clock_backwards, i64),
        name!(lead_waits, i64),
        name!(persist_waits, i64),
        name!(ids_issued, i64),
        name!(keeper_pid, Option<i32>),
        name!(lease_machine_id, Option<i64>),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(lease_server, Option<String>),
        name!(lease_problem, Option<String>),
        name!(wal_mark, Option<TimestampWithTimeZone>),
        name!(wal_mark_problem, Option<String>),
        name!(machine_problem, Option<String>),
    ),
> {
    let state = snowflake_or_raise();
    // One row per generator.
    let keeper = state.keeper_pid();
    let lease = &state.lease;
    let leased = state.main.leased();
    let lease_machine = lease.machine.load(Ordering::Acquire);
    let lease_until = lease.until_unix_ms.load(Ordering::Acquire);
    let wal_mark = state.wal_mark_unix_ms();
    let wal_mark_problem = state.mark_problem();
    let (machine_known, machine_problem) = machine_state(state);
    let row = |name: &str, g: &Generator| {
        let layout = g.layout();
        let issued = g.stats.issued.load(Ordering::Relaxed) as i64;
        let last_ms = layout.epoch_ms + g.last_time();
        let persisted = g.persisted_limit();
        (
            name.to_string(),
            machine_known.then(|| g.machine()),
            layout.time_bits as i32,
            layout.machine_bits as i32,
            layout.sequence_bits as i32,
            to_timestamptz(layout.epoch_ms),
            (issued > 0).then(|| to_timestamptz(last_ms)),
            (issued > 0).then(|| last_ms - now_unix_ms()),
            (persisted >= 0).then(|| to_timestamptz(layout.epoch_ms + persisted)),
            (g.floor() >= 0).then(|| to_timestamptz(layout.epoch_ms + g.floor())),
            g.stats.clock_backwards.load(Ordering::Relaxed) as i64,
            g.stats.lead_waits.load(Ordering::Relaxed) as i64,
            g.stats.persist_waits.load(Ordering::Relaxed) as i64,
            issued,
            keeper,
            (leased && lease_machine >= 0).then_some(lease_machine),
            (leased && lease_machine >= 0 && lease_until > 0).then(|| to_timestamptz(lease_until)),
            leased.then(|| lease.source.get()).filter(|s| !s.is_empty()),
            if leased { lease.last_problem() } else { None },
            wal_mark.map(to_timestamptz),
            wal_mark_problem.clone(),
            machine_problem.clone(),
        )
    };
    let mut rows = vec![row("default", &state.main)];
    if state.javascript_ok.load(Ordering::Relaxed) {
        rows.push(row("javascript", &state.javascript));
    }
    TableIterator::new(rows)
}
