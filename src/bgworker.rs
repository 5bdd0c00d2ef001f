//! What every background worker of the extension shares: its start (the
//! signal handlers), re-reading the configuration on SIGHUP, and running a
//! piece of work in a transaction of its own under a timeout the caller
//! names, turning any ERROR into a `StoredError` for the worker to log,
//! store or retry. The refill worker, the snowflake keeper and the lease
//! keeper each pass their own setting; nothing here reads one.

use crate::errors::{in_class, StoredError, SEE_SERVER_LOG};
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::pg_sys::PgTryBuilder;
use pgrx::prelude::*;

/// The first thing a worker does: SIGHUP and SIGTERM set its latch (and a
/// flag it reads), as pg_cron's launcher does.
pub fn attach_signal_handlers() {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
}

/// Re-reads `postgresql.conf` if a SIGHUP came since the last look; called
/// at the top of a worker's loop, outside any transaction. True if it
/// did.
pub fn reload_if_asked() -> bool {
    if !BackgroundWorker::sighup_received() {
        return false;
    }
    // SAFETY: in a worker's main loop, outside any transaction.
    unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
    true
}

// utils/timeout.h, which pgrx does not bind; `TimeoutId` has the same
// first members in PostgreSQL 15 to 18.
const STATEMENT_TIMEOUT: std::ffi::c_int = 3;
unsafe extern "C-unwind" {
    fn enable_timeout_after(id: std::ffi::c_int, delay_ms: std::ffi::c_int);
    fn disable_timeout(id: std::ffi::c_int, keep_indicator: bool);
}

/// Runs `body` in a transaction of its own and commits it, all of it —
/// commit included — bounded by `timeout_ms` (the statement-timeout
/// handler InitPostgres registered: through postgres_fdw it is a cancel of
/// the remote statement). A PostgreSQL error anywhere in it aborts the
/// transaction and comes back as the error's report.
pub fn in_transaction<R>(timeout_ms: i32, body: impl FnOnce() -> R) -> Result<R, StoredError> {
    // The body runs once; if it fails, nothing of it is used again.
    let body = std::panic::AssertUnwindSafe(body);
    PgTryBuilder::new(move || {
        let body = body;
        // SAFETY: the worker is outside any transaction here; every start
        // is matched by the commit below or the abort in the catch. The
        // timeout is disarmed on both paths.
        unsafe {
            enable_timeout_after(STATEMENT_TIMEOUT, timeout_ms);
            pg_sys::SetCurrentStatementStartTimestamp();
            pg_sys::StartTransactionCommand();
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        }
        let result = (body.0)();
        // SAFETY: matches the push and start above.
        unsafe {
            pg_sys::PopActiveSnapshot();
            pg_sys::CommitTransactionCommand();
            disable_timeout(STATEMENT_TIMEOUT, false);
        }
        Ok(result)
    })
    .catch_others(|caught| {
        // SAFETY: we are in the worker's top level with an aborted (or no)
        // transaction; this is how a background worker recovers from ERROR.
        unsafe {
            disable_timeout(STATEMENT_TIMEOUT, false);
            pg_sys::AbortCurrentTransaction();
        }
        Err(stored_from(caught))
    })
    .execute()
}

/// The SQLSTATE, message and hint of a caught ERROR.
fn stored_from(caught: CaughtError) -> StoredError {
    let report = match &caught {
        CaughtError::PostgresError(r)
        | CaughtError::ErrorReport(r)
        | CaughtError::RustPanic { ereport: r, .. } => r,
    };
    let sqlstate = report.sql_error_code() as i32;
    // A connection problem (class 08, e.g. postgres_fdw's "could not
    // connect to server") says what went wrong in its detail.
    let message = match report.detail() {
        Some(detail) if in_class(sqlstate, PgSqlErrorCode::ERRCODE_CONNECTION_EXCEPTION) => {
            let detail: Vec<&str> = detail.split_whitespace().collect();
            format!("{}: {}", report.message(), detail.join(" "))
        }
        _ => report.message().to_string(),
    };
    StoredError {
        sqlstate,
        message,
        hint: report.hint().unwrap_or(SEE_SERVER_LOG).to_string(),
    }
}
