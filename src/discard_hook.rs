//! The one `ProcessUtility` hook: `DISCARD ALL` and `DISCARD SEQUENCES`
//! forget what `segment_currval` would give, as they forget a sequence's
//! `currval` — so a pooled connection that a session pooler resets with
//! `DISCARD ALL` (PgBouncer's `server_reset_query`) gives its next client
//! none of the previous client's IDs.
//!
//! Chained to the hook installed before ours (Citus's, when it is
//! preloaded first); acts only after the statement has run without error.
//! Invariant: an ERROR raised inside any utility statement reaches the
//! client exactly as raised — the hook adds no error boundary of its own.

use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREV_PROCESS_UTILITY_HOOK: pg_sys::ProcessUtility_hook_type = None;

/// Installs the hook; called from `_PG_init` while preloading.
pub fn install() {
    // SAFETY: `_PG_init` runs once in the postmaster, single-threaded,
    // before any hook is called; the previous hook is chained.
    unsafe {
        PREV_PROCESS_UTILITY_HOOK = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(process_utility);
    }
}

// PostgreSQL's own processing of a utility statement, bound here without
// pgrx's error boundary, which would turn an ERROR raised inside the
// statement into a Rust panic and raise it again without its SQLSTATE (if
// pgrx does not know it), CONTEXT, position and constraint, table and
// column fields.
unsafe extern "C-unwind" {
    #[link_name = "standard_ProcessUtility"]
    fn standard_process_utility(
        pstmt: *mut pg_sys::PlannedStmt,
        query_string: *const std::ffi::c_char,
        read_only_tree: bool,
        context: pg_sys::ProcessUtilityContext::Type,
        params: pg_sys::ParamListInfo,
        query_env: *mut pg_sys::QueryEnvironment,
        dest: *mut pg_sys::DestReceiver,
        qc: *mut pg_sys::QueryCompletion,
    );
}

/// The hook. Not `#[pg_guard]`, for the reason above: an ERROR inside the
/// statement leaves through this frame by PostgreSQL's `longjmp`, which
/// it may, holding nothing to drop (a plain old frame); the one call that
/// could panic goes through a guarded function (`forget_after_discard`).
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: the executor passes a valid PlannedStmt whose utilityStmt is
    // a Node; a DiscardStmt is read only after its tag says so. The
    // statement is handed on unchanged, to the previous hook or to
    // PostgreSQL's own processing.
    unsafe {
        let statement = (*pstmt).utilityStmt;
        let discards_currval = !statement.is_null()
            && (*statement).type_ == pg_sys::NodeTag::T_DiscardStmt
            && matches!(
                (*statement.cast::<pg_sys::DiscardStmt>()).target,
                pg_sys::DiscardMode::DISCARD_ALL | pg_sys::DiscardMode::DISCARD_SEQUENCES
            );
        let run = PREV_PROCESS_UTILITY_HOOK.unwrap_or(standard_process_utility);
        run(
            pstmt,
            query_string,
            read_only_tree,
            context,
            params,
            query_env,
            dest,
            qc,
        );
        if discards_currval {
            forget_after_discard();
        }
    }
}

/// After a `DISCARD ALL` or `DISCARD SEQUENCES` that ran.
#[pg_guard]
extern "C-unwind" fn forget_after_discard() {
    crate::segment::sql::forget_currvals();
}
