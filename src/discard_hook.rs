//! The one `ProcessUtility` hook: `DISCARD ALL` and `DISCARD SEQUENCES`
//! forget what `segment_currval` would give, as they forget a sequence's
//! `currval` — so a pooled connection that a session pooler resets with
//! `DISCARD ALL` (PgBouncer's `server_reset_query`) gives its next client
//! none of the previous client's IDs.
//!
//! Chained to the hook installed before ours (Citus's, when it is
//! preloaded first); acts only after the statement has run without error.

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

#[pg_guard]
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
        match PREV_PROCESS_UTILITY_HOOK {
            Some(prev) => prev(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
            None => pg_sys::standard_ProcessUtility(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
        }
        if discards_currval {
            crate::segment::sql::forget_currvals();
        }
    }
}
