//! Hints for PostgreSQL's own errors about pg_idgen's functions, where
//! its generic hint leads nowhere: a call in a database without the
//! extension ("function segment_nextval(unknown) does not exist ... add
//! explicit type casts"), and a role without `EXECUTE` ("permission denied
//! for function snowflake_nextval", no hint at all).
//!
//! An `emit_log_hook` (installed in `_PG_init`, chained) rewrites only the
//! hint of such an ERROR, before the server log and the client see it. It
//! reads nothing but the report itself — no catalog access while an error
//! is being reported — so it recognises the cases by their SQLSTATE and
//! message: an undefined `segment_nextval(unknown|text|character varying)`,
//! `snowflake_nextval()` or `snowflake_js_nextval()` (the argument types a
//! correct call has: with the extension there, such a call resolves; so
//! the extension is missing or not on the search path); and 42501 on one
//! of the generators.

use pgrx::pg_sys;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use std::ffi::CStr;

static mut PREVIOUS: pg_sys::emit_log_hook_type = None;

/// The calls that resolve wherever pg_idgen is installed and on the search
/// path, as PostgreSQL's message spells them.
const UNDEFINED: [&str; 6] = [
    "function segment_nextval(unknown) does not exist",
    "function segment_nextval(text) does not exist",
    "function segment_nextval(character varying) does not exist",
    "function snowflake_nextval() does not exist",
    "function snowflake_js_nextval() does not exist",
    "function segment_create(unknown) does not exist",
];

const NOT_INSTALLED: &CStr = c"pg_idgen is not installed in this database, or its schema is not on the search_path: run CREATE EXTENSION pg_idgen; in this database (the library is loaded by shared_preload_libraries, once per server; the extension is created in each database), or qualify the call with the extension's schema.";

/// The generators whose 42501 gets the grant as its hint.
const GRANTS: [(&str, &CStr); 4] = [
    ("permission denied for function segment_nextval", c"Drawing segment IDs needs EXECUTE, as nextval() needs USAGE on a sequence: GRANT EXECUTE ON FUNCTION segment_nextval(text) TO the role that inserts (run by the extension's owner or a superuser)."),
    ("permission denied for function snowflake_nextval", c"Drawing snowflake IDs needs EXECUTE, as nextval() needs USAGE on a sequence: GRANT EXECUTE ON FUNCTION snowflake_nextval() TO the role that inserts (run by the extension's owner or a superuser)."),
    ("permission denied for function snowflake_js_nextval", c"Drawing snowflake IDs needs EXECUTE, as nextval() needs USAGE on a sequence: GRANT EXECUTE ON FUNCTION snowflake_js_nextval() TO the role that inserts (run by the extension's owner or a superuser)."),
    ("permission denied for function segment_reserve", c"Reserving segment IDs needs EXECUTE: GRANT EXECUTE ON FUNCTION segment_reserve(text, int) TO the role that reserves (run by the extension's owner or a superuser)."),
];

/// Installs the hook; called from `_PG_init` while preloading.
pub fn install_hook() {
    // SAFETY: _PG_init, in the postmaster, single-threaded; chained.
    unsafe {
        PREVIOUS = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(add_hint);
    }
}

/// The hint for `message` with SQLSTATE `code`, if pg_idgen has one.
fn hint_for(code: i32, message: &str) -> Option<&'static CStr> {
    if code == PgSqlErrorCode::ERRCODE_UNDEFINED_FUNCTION as i32 {
        return UNDEFINED.contains(&message).then_some(NOT_INSTALLED);
    }
    if code == PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE as i32 {
        return GRANTS
            .iter()
            .find(|(m, _)| message == *m)
            .map(|(_, hint)| *hint);
    }
    None
}

/// The hook itself: no Rust panic and no PostgreSQL error can come out of
/// it (plain reads of the report, one `pstrdup`).
unsafe extern "C-unwind" fn add_hint(edata: *mut pg_sys::ErrorData) {
    // SAFETY: PostgreSQL passes the report being emitted; its message is a
    // NUL-terminated string or NULL; pstrdup copies into the current
    // context, ErrorContext while a report is emitted.
    unsafe {
        if !edata.is_null()
            && (*edata).elevel >= pgrx::PgLogLevel::ERROR as i32
            && !(*edata).message.is_null()
        {
            let message = CStr::from_ptr((*edata).message).to_str().unwrap_or("");
            if let Some(hint) = hint_for((*edata).sqlerrcode, message) {
                (*edata).hint = pg_sys::pstrdup(hint.as_ptr());
            }
        }
        if let Some(previous) = PREVIOUS {
            previous(edata);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::hint_for;
    use pgrx::PgSqlErrorCode::*;

    #[test]
    fn only_the_calls_that_resolve_with_the_extension_get_its_hint() {
        let undefined = ERRCODE_UNDEFINED_FUNCTION as i32;
        assert!(hint_for(
            undefined,
            "function segment_nextval(unknown) does not exist"
        )
        .is_some());
        assert!(hint_for(undefined, "function snowflake_nextval() does not exist").is_some());
        // A wrong call of an installed function keeps PostgreSQL's hint.
        assert!(hint_for(
            undefined,
            "function segment_nextval(integer) does not exist"
        )
        .is_none());
        assert!(hint_for(undefined, "function lower(integer) does not exist").is_none());
        let denied = ERRCODE_INSUFFICIENT_PRIVILEGE as i32;
        let grant = hint_for(denied, "permission denied for function snowflake_nextval").unwrap();
        assert!(grant
            .to_str()
            .unwrap()
            .contains("GRANT EXECUTE ON FUNCTION snowflake_nextval()"));
        assert!(hint_for(denied, "permission denied for table orders").is_none());
    }
}
