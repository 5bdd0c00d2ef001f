//! What every background worker of the extension shares: its start (the
//! signal handlers, the connection to its database with the search path
//! pinned), re-reading the configuration on SIGHUP, waiting on its latch,
//! and running a piece of work in a transaction of its own under a
//! timeout the caller names (or in a subtransaction of the caller's),
//! turning any ERROR into a `StoredError` for the worker to log, store or
//! retry. The refill worker, the snowflake
//! keeper and the lease keeper each pass their own setting; nothing here
//! reads one.
//!
//! # Privileges
//!
//! A worker runs as the bootstrap superuser. Every statement it runs
//! resolves names with `search_path = pg_catalog, pg_temp` (`connect`
//! pins it for the worker's whole life, above `ALTER DATABASE` and
//! `ALTER ROLE` settings), names every object of the extension by its
//! schema, and touches a table only as that table's owner inside a
//! security-restricted operation (`catalog::as_owner`): no schema,
//! function, operator or view a user creates is ever found by a worker's
//! statement, and nothing a table's triggers run has more rights than its
//! owner.
//!
//! # Never stuck on a dead network
//!
//! A transaction's remote statements (postgres_fdw) are cancelled at its
//! timeout; but on a network that stopped, postgres_fdw's own clean-up
//! after a cancel can wait for the cancel request and the remote abort for
//! 30 s each (PostgreSQL 15 and 16 wait for the cancel with no bound at
//! all), and it ignores SIGTERM meanwhile. So while a transaction of
//! `in_transaction` runs, two things cut the process's connections — a
//! `shutdown(2)` of every stream socket it holds, which makes libpq fail
//! at once and postgres_fdw drop the connection instead of cleaning it up:
//!
//! * SIGTERM (a fast shutdown, `pg_terminate_backend`): the worker then
//!   leaves within moments, whatever the network does;
//! * a hard deadline `CUT_AFTER_TIMEOUT_MS` after the transaction's
//!   timeout (a PostgreSQL timeout of our own, `RegisterTimeout`).
//!
//! Outside such a transaction a worker holds no remote statement, and
//! nothing is cut (a cached postgres_fdw connection stays). A background
//! worker of PostgreSQL 15 and later holds no other stream socket: the
//! postmaster's listening sockets are closed in its children, and the
//! latch and the postmaster-death watch are pipes or signalfds. The
//! handlers only set atomics, make async-signal-safe calls (`getsockopt`,
//! `shutdown`, `SetLatch`) and keep `errno`.

use crate::errors::{in_class, StoredError, SEE_SERVER_LOG};
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::pg_sys::PgTryBuilder;
use pgrx::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

/// How long after a transaction's timeout its connections are cut, if
/// the cancel has not ended it by then: a cancel that reaches the remote
/// server ends its statement in milliseconds.
pub const CUT_AFTER_TIMEOUT_MS: i32 = 1000;

/// SIGTERM came.
static SHUTDOWN: AtomicBool = AtomicBool::new(false);
/// A transaction of `in_transaction` runs: its connections may be cut.
static IN_TRANSACTION: AtomicBool = AtomicBool::new(false);
/// The cut's timeout id (`RegisterTimeout`), and the highest descriptor
/// to look at (from `RLIMIT_NOFILE`, read at start).
static CUT_TIMEOUT: AtomicI32 = AtomicI32::new(-1);
static FD_LIMIT: AtomicI32 = AtomicI32::new(1024);

/// The first thing a worker does: SIGHUP sets its latch and asks for a
/// reload (pgrx's handler, as pg_cron's launcher has); SIGTERM sets its
/// latch and `shutdown_requested`, and cuts the connections of a
/// transaction in flight; the hard deadline's timeout is registered.
pub fn attach_signal_handlers() {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        FD_LIMIT.store(limit.rlim_cur.min(65_536) as i32, Ordering::Relaxed);
    }
    // SAFETY: a worker's start, before it waits or connects: installs a
    // handler that only touches atomics, sockets and the latch; the
    // timeout id is valid for this process's life.
    unsafe {
        #[cfg(any(feature = "pg15", feature = "pg16", feature = "pg17"))]
        pg_sys::pqsignal(libc::SIGTERM, Some(on_sigterm));
        #[cfg(feature = "pg18")]
        pg_sys::pqsignal_be(libc::SIGTERM, Some(on_sigterm));
        CUT_TIMEOUT.store(
            RegisterTimeout(USER_TIMEOUT, Some(on_cut_deadline)),
            Ordering::Relaxed,
        );
    }
}

unsafe extern "C-unwind" fn on_sigterm(_signal: std::ffi::c_int) {
    // SAFETY: errno is this thread's; restored before returning, as
    // PostgreSQL's own handlers do.
    let saved_errno = unsafe { *libc::__errno_location() };
    SHUTDOWN.store(true, Ordering::SeqCst);
    // SAFETY: a flag PostgreSQL's own SIGTERM handler of workers sets.
    unsafe { (&raw mut pg_sys::ShutdownRequestPending).write_volatile(1) };
    if IN_TRANSACTION.load(Ordering::SeqCst) {
        cut_connections();
    }
    // SAFETY: SetLatch is async-signal-safe (called straight, not through
    // pgrx's error-handling wrapper); MyLatch is this process's.
    unsafe {
        set_latch_in_handler(pg_sys::MyLatch);
        *libc::__errno_location() = saved_errno;
    }
}

/// The hard deadline (called by PostgreSQL's SIGALRM handler).
unsafe extern "C-unwind" fn on_cut_deadline() {
    if IN_TRANSACTION.load(Ordering::SeqCst) {
        cut_connections();
    }
}

/// Shuts down every connected or connecting stream socket of the process
/// (async-signal-safe). A listening socket is left alone: one inherited
/// from the postmaster would be shut for the whole server.
fn cut_connections() {
    for fd in 3..FD_LIMIT.load(Ordering::Relaxed) {
        if socket_option(fd, libc::SO_TYPE) == Some(libc::SOCK_STREAM)
            && socket_option(fd, libc::SO_ACCEPTCONN) == Some(0)
        {
            // SAFETY: shutdown is async-signal-safe; fd is a socket.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    }
}

/// An int-valued `SOL_SOCKET` option of `fd`; `None` if it is not a
/// socket (ENOTSOCK), or not open (EBADF). Async-signal-safe.
fn socket_option(fd: libc::c_int, option: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `value`.
    let done = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&raw mut value).cast(),
            &mut len,
        )
    };
    (done == 0).then_some(value)
}

/// The search path of every worker statement: PostgreSQL's own catalog,
/// then the worker's own temporary schema (which no other session can
/// write), as `RestrictSearchPath` gives maintenance commands.
const PINNED_SEARCH_PATH: &std::ffi::CStr = c"pg_catalog, pg_temp";

/// Connects the worker to database `name` (by name) or `oid` and pins
/// its search path (`PINNED_SEARCH_PATH`) for the rest of its life, as an
/// override no later setting of lower priority changes.
pub fn connect(database: Database<'_>) {
    match database {
        Database::Name(name) => BackgroundWorker::connect_worker_to_spi(Some(name), None),
        // SAFETY: a registered background worker that asked for a
        // database connection; BYPASS_ALLOWCONN lets it serve the sessions
        // still connected to a database with ALLOW_CONNECTIONS false.
        Database::Oid(oid) => unsafe {
            pg_sys::BackgroundWorkerInitializeConnectionByOid(
                pg_sys::Oid::from(oid),
                pg_sys::InvalidOid,
                pg_sys::BGWORKER_BYPASS_ALLOWCONN,
            )
        },
    }
    // SAFETY: connected, outside any transaction; search_path's check
    // only splits the list, so it needs no catalog access.
    unsafe {
        pg_sys::SetConfigOption(
            c"search_path".as_ptr(),
            PINNED_SEARCH_PATH.as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        )
    };
}

/// Which database a worker connects to.
pub enum Database<'a> {
    Name(&'a str),
    Oid(u32),
}

/// Whether SIGTERM came: the worker should leave.
pub fn shutdown_requested() -> bool {
    SHUTDOWN.load(Ordering::SeqCst)
}

/// Waits on the latch up to `timeout`; false once the worker should leave
/// (SIGTERM, or the postmaster died).
pub fn wait(timeout: Duration) -> bool {
    let events = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_POSTMASTER_DEATH;
    // SAFETY: this process's latch, in a worker's main loop.
    let woke = unsafe {
        let woke = pg_sys::WaitLatch(
            pg_sys::MyLatch,
            events as i32,
            timeout.as_millis().min(i32::MAX as u128) as _,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
        woke
    };
    pg_sys::check_for_interrupts!();
    woke & pg_sys::WL_POSTMASTER_DEATH as i32 == 0 && !shutdown_requested()
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
// first members in PostgreSQL 15 to 18, and 17 added one before
// USER_TIMEOUT (TRANSACTION_TIMEOUT).
const STATEMENT_TIMEOUT: std::ffi::c_int = 3;
#[cfg(any(feature = "pg15", feature = "pg16"))]
const USER_TIMEOUT: std::ffi::c_int = 12;
#[cfg(any(feature = "pg17", feature = "pg18"))]
const USER_TIMEOUT: std::ffi::c_int = 13;
unsafe extern "C" {
    /// `SetLatch` itself, for the signal handler: pgrx's `pg_sys::SetLatch`
    /// wraps every call in its error-handling boundary.
    #[link_name = "SetLatch"]
    fn set_latch_in_handler(latch: *mut pg_sys::Latch);
}
unsafe extern "C-unwind" {
    fn enable_timeout_after(id: std::ffi::c_int, delay_ms: std::ffi::c_int);
    fn disable_timeout(id: std::ffi::c_int, keep_indicator: bool);
    fn RegisterTimeout(
        id: std::ffi::c_int,
        handler: Option<unsafe extern "C-unwind" fn()>,
    ) -> std::ffi::c_int;
}

/// Arms (or disarms) the cut of this transaction's connections
/// `timeout_ms` + `CUT_AFTER_TIMEOUT_MS` from now.
fn arm_cut(timeout_ms: Option<i32>) {
    let id = CUT_TIMEOUT.load(Ordering::Relaxed);
    match timeout_ms {
        Some(ms) => {
            IN_TRANSACTION.store(true, Ordering::SeqCst);
            if id >= 0 {
                // SAFETY: a timeout this process registered.
                unsafe { enable_timeout_after(id, ms.saturating_add(CUT_AFTER_TIMEOUT_MS)) };
            }
        }
        None => {
            if id >= 0 {
                // SAFETY: as above; disabling an idle timeout is allowed.
                unsafe { disable_timeout(id, false) };
            }
            IN_TRANSACTION.store(false, Ordering::SeqCst);
        }
    }
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
        arm_cut(Some(timeout_ms));
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
        arm_cut(None);
        Ok(result)
    })
    .catch_others(|caught| {
        // SAFETY: we are in the worker's top level with an aborted (or no)
        // transaction; this is how a background worker recovers from ERROR.
        unsafe {
            disable_timeout(STATEMENT_TIMEOUT, false);
            pg_sys::AbortCurrentTransaction();
        }
        arm_cut(None);
        Err(stored_from(caught))
    })
    .execute()
}

/// Runs `body` in an internal subtransaction of the current transaction,
/// as a PL/pgSQL exception block does: an ERROR in it rolls back only
/// what it did and comes back as the error's report; the transaction goes
/// on. The memory context and resource owner are the caller's again on
/// both paths.
pub fn in_subtransaction<R>(body: impl FnOnce() -> R) -> Result<R, StoredError> {
    // SAFETY: inside a transaction (an internal subtransaction may also
    // start in TBLOCK_END, for deferred work at commit); every begin is
    // matched by the release or the rollback below, and the caller's
    // memory context and resource owner are put back on both paths, as
    // PL/pgSQL does around an exception block.
    let (context, owner) = unsafe {
        let saved = (pg_sys::CurrentMemoryContext, pg_sys::CurrentResourceOwner);
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(saved.0);
        saved
    };
    // The body runs once; if it fails, nothing of it is used again.
    let body = std::panic::AssertUnwindSafe(body);
    PgTryBuilder::new(move || {
        let body = body;
        let result = (body.0)();
        // SAFETY: ends the subtransaction begun above.
        unsafe {
            pg_sys::ReleaseCurrentSubTransaction();
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
        }
        Ok(result)
    })
    .catch_others(move |caught| {
        // SAFETY: rolls back the subtransaction begun above.
        unsafe {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
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
