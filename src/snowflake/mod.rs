//! Snowflake IDs: time-ordered 64-bit IDs (ms | machine | sequence), one
//! lock-free generator per cluster, safe when the clock steps back or the
//! server restarts.
//!
//! * `layout`: bit layout, friendly text form, epoch and machine-id
//!   settings (pure).
//! * `generator`: the clock state machine (pure).
//! * `state_file`: the state file's format, and what a start makes of it
//!   (pure).
//! * `shared`: the state in shared memory, reading and writing the state
//!   file, the keeper worker that persists the high-water mark.
//! * `lease`: machine ids leased from a table on a central server — the
//!   table, its SQL and the pure rules (claim, renew, stop, the successor's
//!   floor).
//! * `lease_keeper`: the worker that claims and renews this server's lease
//!   through postgres_fdw and tells the generators.
//! * `sql`, `status`: the SQL functions and the status view.

pub mod generator;
pub mod layout;
pub mod lease;
pub mod lease_keeper;
pub mod shared;
pub mod sql;
pub mod state_file;
pub mod status;
