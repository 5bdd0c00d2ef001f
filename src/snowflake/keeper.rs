//! The snowflake keeper: the background worker, one per cluster, that
//! writes the generators' high-water marks ahead into the state file
//! (`state_file.rs`) so that callers never wait for a disk in the common
//! case — as `segment/worker.rs` is for segment ranges.
//!
//! Every `KEEPER_INTERVAL` (or when a caller wakes it) it asks each
//! generator for the mark it wants persisted (`mark_to_persist`: the
//! current time plus `pg_idgen.snowflake_persist_ahead`), writes the file
//! durably, and only then tells the generators they may issue up to it
//! (`persisted`). A write that fails is retried at every pass; callers that
//! reach the persisted mark wait and then fail with the OS error. A file
//! removed under a running server is written again at once.
//!
//! It is registered in `_PG_init` and started by the postmaster; the server
//! refuses to start without a worker slot for it, since without a keeper no
//! snowflake ID can ever be issued.

use super::clock::now_unix_ms;
use super::shared::{snowflake, KEEPER_RESTART};
use super::state_file::{self, HighWater};
use crate::bgworker;
use crate::errors::IdgenError;
use crate::gucs;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::prelude::*;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the keeper looks at the generators when nobody wakes it.
const KEEPER_INTERVAL: Duration = Duration::from_millis(100);

/// Set by the log hook while the keeper is being registered, when
/// PostgreSQL refuses the registration (it only logs that).
static REGISTRATION_REFUSED: AtomicBool = AtomicBool::new(false);
static mut PREV_EMIT_LOG_HOOK: pg_sys::emit_log_hook_type = None;

#[pg_guard]
unsafe extern "C-unwind" fn registration_log_hook(edata: *mut pg_sys::ErrorData) {
    // SAFETY: PostgreSQL passes the ErrorData being emitted.
    unsafe {
        if (*edata).sqlerrcode == PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED as i32 {
            REGISTRATION_REFUSED.store(true, Ordering::Relaxed);
        }
        if let Some(prev) = PREV_EMIT_LOG_HOOK {
            prev(edata);
        }
    }
}

/// Registers the keeper; called from `_PG_init` while preloading. Refuses
/// to start the server when there is no worker slot for it: without a
/// keeper no snowflake ID can ever be issued, and PostgreSQL's own message
/// ("too many background workers") does not say whose worker is missing.
pub fn register() {
    // SAFETY: a plain read of a setting, in the postmaster.
    let max_workers = unsafe { pg_sys::max_worker_processes };
    if max_workers == 0 {
        IdgenError::SnowflakeKeeperNotRegistered {
            max_worker_processes: max_workers,
        }
        .raise();
    }
    // PostgreSQL reports a refused registration at LOG level only, with
    // ERRCODE_CONFIGURATION_LIMIT_EXCEEDED; listen for it around the call.
    // SAFETY: _PG_init runs single-threaded in the postmaster; the hook is
    // put back right after the call.
    unsafe {
        PREV_EMIT_LOG_HOOK = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(registration_log_hook);
    }
    BackgroundWorkerBuilder::new("pg_idgen snowflake keeper")
        .set_type("pg_idgen snowflake keeper")
        .set_library("pg_idgen")
        .set_function("pg_idgen_snowflake_keeper_main")
        .enable_shmem_access(None)
        .set_start_time(BgWorkerStartTime::PostmasterStart)
        .set_restart_time(Some(KEEPER_RESTART))
        .load();
    // SAFETY: as above.
    unsafe { pg_sys::emit_log_hook = PREV_EMIT_LOG_HOOK };
    if REGISTRATION_REFUSED.load(Ordering::Relaxed) {
        IdgenError::SnowflakeKeeperNotRegistered {
            max_worker_processes: max_workers,
        }
        .raise();
    }
}

/// Runs when the keeper exits, however it exits: it no longer runs.
#[pg_guard]
unsafe extern "C-unwind" fn keeper_exit(_code: i32, _arg: pg_sys::Datum) {
    if let Some(state) = snowflake() {
        state.keeper_gone();
    }
}

/// The keeper's entry point, named in `bgw_function_name`.
///
/// On SIGTERM it exits with code 1, so the postmaster starts it again after
/// `KEEPER_RESTART` (code 0 would unregister it for good; at shutdown the
/// postmaster restarts nothing anyway).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_idgen_snowflake_keeper_main(_arg: pg_sys::Datum) {
    bgworker::attach_signal_handlers();
    let Some(state) = snowflake() else { return };
    // SAFETY: MyLatch and MyProcPid are set in every started process; the
    // exit callback is registered once, with no argument.
    unsafe {
        pg_sys::before_shmem_exit(Some(keeper_exit), pg_sys::Datum::from(0));
        state.keeper_started(pg_sys::MyProcPid, pg_sys::MyLatch);
    }
    let generators = [&state.main, &state.javascript];
    // The data directory: every server process's working directory.
    let data_dir = Path::new(".");
    let mut failing = false;
    loop {
        bgworker::reload_if_asked();
        let window = i64::from(gucs::SNOWFLAKE_PERSIST_AHEAD_MS.get());
        let now = now_unix_ms();
        let wanted = generators.map(|g| g.mark_to_persist(now, window));
        // A file removed under a running server is written again at once:
        // otherwise a crash would look like a first start.
        let removed =
            generators.iter().any(|g| g.persisted_limit() >= 0) && state_file::is_missing(data_dir);
        if removed || wanted.iter().any(Option::is_some) {
            let limits: Vec<i64> = generators
                .iter()
                .zip(wanted)
                .map(|(g, w)| w.unwrap_or(g.persisted_limit()))
                .collect();
            let content = state_file::render(&HighWater {
                layout: *state.main.layout(),
                main: state_file::high_water_id(state.main.layout(), limits[0]),
                javascript: state_file::high_water_id(state.javascript.layout(), limits[1]),
            });
            match state_file::write_durably(data_dir, &content) {
                Ok(()) => {
                    for (g, limit) in generators.iter().zip(&limits) {
                        g.persisted(*limit);
                    }
                    state.keeper_wrote(0);
                    failing = false;
                }
                Err(e) => {
                    state.keeper_wrote(e.raw_os_error().unwrap_or(libc::EIO));
                    if !failing {
                        failing = true;
                        IdgenError::StateFileWriteFailed {
                            problem: e.to_string(),
                        }
                        .warn();
                    }
                }
            }
        }
        if !BackgroundWorker::wait_latch(Some(KEEPER_INTERVAL)) {
            break;
        }
    }
    // SAFETY: ends this process; the exit callback clears the pid.
    unsafe { pg_sys::proc_exit(1) };
}
