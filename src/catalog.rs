//! What both wings read from the catalog, and how they quote what they
//! write into SQL: PostgreSQL's own quoting rules (`quote_identifier`,
//! `quote_literal_cstr`), the name, schema and owner of a table by OID,
//! the name of a database, and running code as a table's owner.
//!
//! Everything here needs a backend (or a worker connected to a database)
//! inside a transaction, except the quoting, which only needs a memory
//! context.

use pgrx::pg_sys;
use std::ffi::{CStr, CString};

/// A C string read into an owned `String` (lossy: catalog names are in the
/// server's encoding, error texts are UTF-8).
///
/// # Safety
/// `ptr` is a valid NUL-terminated string.
unsafe fn owned(ptr: *const std::ffi::c_char) -> String {
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// `name` as a SQL identifier, quoted where PostgreSQL needs it (its own
/// `quote_identifier`: keywords included).
pub fn quote_identifier(name: &str) -> String {
    let name = CString::new(name).unwrap_or_default();
    // SAFETY: quote_identifier reads a NUL-terminated string and returns
    // it or a palloc'd quoted copy.
    unsafe { owned(pg_sys::quote_identifier(name.as_ptr())) }
}

/// `text` as a SQL string literal, by PostgreSQL's own `quote_literal`
/// (an `E'...'` literal when the text holds a backslash), so that it reads
/// the same whatever `standard_conforming_strings` says.
pub fn quote_literal(text: &str) -> String {
    let text = CString::new(text).unwrap_or_default();
    // SAFETY: quote_literal_cstr reads a NUL-terminated string and returns
    // a palloc'd quoted copy in the current memory context.
    unsafe { owned(pg_sys::quote_literal_cstr(text.as_ptr())) }
}

/// The name (unquoted) of the schema of table `table_oid`, if the table
/// still exists.
pub fn table_schema(table_oid: u32) -> Option<String> {
    // SAFETY: syscache look-ups inside a transaction; NULL: gone.
    unsafe {
        let schema =
            pg_sys::get_namespace_name(pg_sys::get_rel_namespace(pg_sys::Oid::from(table_oid)));
        (!schema.is_null()).then(|| owned(schema))
    }
}

/// The schema-qualified name and the owner of table `table_oid`, if it
/// still exists.
pub fn table_name_and_owner(table_oid: u32) -> Option<(String, pg_sys::Oid)> {
    // SAFETY: syscache and relcache look-ups inside a transaction; a NULL
    // answer means the table is gone.
    unsafe {
        let relid = pg_sys::Oid::from(table_oid);
        let relation = pg_sys::RelationIdGetRelation(relid);
        if relation.is_null() {
            return None;
        }
        let owner = (*(*relation).rd_rel).relowner;
        pg_sys::RelationClose(relation);
        let schema = pg_sys::get_namespace_name(pg_sys::get_rel_namespace(relid));
        let relname = pg_sys::get_rel_name(relid);
        if schema.is_null() || relname.is_null() {
            return None;
        }
        let qualified = format!(
            "{}.{}",
            quote_identifier(&owned(schema)),
            quote_identifier(&owned(relname))
        );
        Some((qualified, owner))
    }
}

/// The name of database `oid` (its number if it is gone, or outside a
/// transaction).
pub fn database_name(oid: u32) -> String {
    // Outside a transaction (a worker between its transactions) the
    // catalog cannot be read: the OID stands in.
    // SAFETY: plain read of the transaction state.
    if !unsafe { pg_sys::IsTransactionState() } {
        return oid.to_string();
    }
    // SAFETY: a syscache look-up inside a transaction; NULL: no such
    // database.
    let name = unsafe { pg_sys::get_database_name(pg_sys::Oid::from(oid)) };
    if name.is_null() {
        return oid.to_string();
    }
    // SAFETY: a NUL-terminated palloc'd string.
    unsafe { owned(name) }
}

/// Whether database `oid` still exists; needs a transaction.
pub fn database_exists(oid: u32) -> bool {
    // SAFETY: a syscache look-up inside a transaction; NULL: no such
    // database.
    !unsafe { pg_sys::get_database_name(pg_sys::Oid::from(oid)) }.is_null()
}

/// The OID of the database this backend is connected to.
pub fn my_database() -> u32 {
    // SAFETY: MyDatabaseId is set once the backend connects.
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

/// Runs `body` as `owner` in a security-restricted context, as autovacuum
/// and `REFRESH MATERIALIZED VIEW` run a table owner's code: triggers,
/// policies or index expressions on `id_segment` run with the owner's
/// rights, never the caller's or the bootstrap superuser's, and cannot
/// change the session's role. An ERROR in `body` unwinds to a
/// (sub)transaction abort, which restores the user id itself.
pub fn as_owner<R>(owner: pg_sys::Oid, body: impl FnOnce() -> R) -> R {
    let mut saved_user = pg_sys::InvalidOid;
    let mut saved_context = 0;
    // SAFETY: plain reads and writes of the backend's current user id.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut saved_user, &mut saved_context);
        pg_sys::SetUserIdAndSecContext(
            owner,
            saved_context
                | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
        );
    }
    let result = body();
    // SAFETY: restores what was read above.
    unsafe { pg_sys::SetUserIdAndSecContext(saved_user, saved_context) };
    result
}
