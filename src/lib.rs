//! pg_idgen: ID generators inside PostgreSQL.
//!
//! This file only wires things together: the module magic, `_PG_init`
//! (settings, shared-memory and object-access hooks), the extension's
//! hand-written SQL, and the in-server tests of the top-level `pg_test/`
//! folder that `cargo pgrx test` needs. See `segment` for segment IDs,
//! `snowflake` for snowflake IDs and `base62` for short codes; both wings
//! share `errors` (every report), `gucs` (every setting), `catalog`
//! (quoting and catalog look-ups), `citus` (this node's place in a Citus
//! cluster), `hints` (hints for PostgreSQL's own errors about pg_idgen's
//! functions), `bgworker` (what every worker does),
//! `remote_session` (what a central server's session must pin) and
//! `shmem` (the shared-memory hooks).

use pgrx::prelude::*;

pub mod base62;
mod base62_sql;
mod bgworker;
mod catalog;
mod citus;
mod discard_hook;
mod drop_hook;
pub mod errors;
mod failpoints;
pub mod gucs;
mod hints;
mod remote_session;
pub mod segment;
mod shmem;
pub mod snowflake;
mod wait_events;

::pgrx::pg_module_magic!(name, version);

pgrx::extension_sql_file!("../sql/bootstrap.sql", name = "bootstrap", bootstrap);
pgrx::extension_sql_file!("../sql/finalize.sql", name = "finalize", finalize);

/// Loads the library. Shared memory and workers exist only when it is
/// loaded through `shared_preload_libraries`; loaded any other way it
/// installs nothing, and every function says so when called.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // SAFETY: a plain read of a global set by the postmaster.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    let hooks = gucs::CheckHooks {
        machine_id: Some(snowflake::config::check_machine_id),
        epoch: Some(snowflake::config::check_epoch),
        fallback: Some(snowflake::config::check_fallback),
    };
    gucs::register(&hooks);
    gucs::register_snowflake(&hooks);
    // SAFETY: called once from _PG_init with a static C string.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"pg_idgen".as_ptr()) };
    // The first step that may raise: from here on, no error a client sees
    // carries a Rust backtrace.
    errors::keep_backtraces_out_of_errors();
    // A bad snowflake setting raises here, which stops the server start.
    snowflake::config::load_config();
    shmem::install_hooks();
    citus::install_guard();
    hints::install_hook();
    drop_hook::install();
    discard_hook::install();
    // pg_upgrade starts the servers in binary-upgrade mode to move the
    // catalogs: no ID is issued then, and a keeper connected to a database
    // would stand in the way of pg_upgrade dropping and creating it.
    // SAFETY: a plain read of a global set before _PG_init runs.
    if unsafe { pg_sys::IsBinaryUpgrade } {
        return;
    }
    snowflake::keeper::register();
    if snowflake::config::config().is_some_and(|c| c.lease) {
        snowflake::lease_keeper::register();
    }
}

// The tests that run inside PostgreSQL live in the top-level `pg_test/`
// folder (`src/` is the extension, `tests/` drives servers from outside);
// `cargo pgrx test` needs them compiled into the crate.
#[cfg(any(test, feature = "pg_test"))]
#[path = "../pg_test/tests.rs"]
mod pg_tests;

/// Required by `cargo pgrx test`: at the crate root, `setup` and
/// `postgresql_conf_options` for the server it starts.
#[cfg(test)]
#[path = "../pg_test/mod.rs"]
pub mod pg_test;
