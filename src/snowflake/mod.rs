//! Snowflake IDs: time-ordered 64-bit IDs (ms | machine | sequence), one
//! lock-free generator per cluster, safe when the clock steps back or the
//! server restarts.
//!
//! Pure (no PostgreSQL):
//! * `layout`: bit layout, friendly text form, epoch and machine-id
//!   settings.
//! * `generator`: the clock state machine.
//! * `state_file`: the state file's format, what a start makes of it, and
//!   writing it durably.
//! * `lease`: machine ids leased from a table on a central server — the
//!   table, its SQL and the rules (claim, renew, stop, the successor's
//!   floor).
//! * `backup_copy`: whether a primary started from a base backup may be a
//!   copy running beside its original.
//! * `lease_sim` (tests only): the lease protocol simulated — the table,
//!   servers' clocks, holders and claimers — and the tests that drive it.
//!
//! PostgreSQL glue:
//! * `config`: the settings, read and checked once at server start.
//! * `clock`: the wall and monotonic clocks, and ms as `timestamptz`.
//! * `shared`: the state in shared memory and `next_id`.
//! * `keeper`: the worker that persists the high-water mark.
//! * `wal_mark`: the mark's row in `snowflake_high_water`, in the WAL.
//! * `guard`: the trigger that keeps that row from being deleted or lowered.
//! * `lease_keeper`: the worker that claims and renews this server's lease
//!   through postgres_fdw and tells the generators.
//! * `sql`, `status`: the SQL functions and the status view.

pub mod backup_copy;
pub mod clock;
pub mod config;
pub mod generator;
pub mod guard;
pub mod keeper;
pub mod layout;
pub mod lease;
pub mod lease_keeper;
#[cfg(test)]
mod lease_sim;
pub mod shared;
pub mod sql;
pub mod state_file;
pub mod status;
pub mod wal_mark;
