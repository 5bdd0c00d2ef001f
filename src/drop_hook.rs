//! The one object-access hook: what a `DROP` means to pg_idgen. It owns the
//! hook's installation and chaining, and reads what was dropped once; the
//! rooms that care act on it:
//!
//! * `segment::lifecycle` frees a database's cached ranges when pg_idgen
//!   (`DROP EXTENSION`, with `id_segment` under whatever name it has by
//!   then) or the database itself goes;
//! * `snowflake::guard` warns when `snowflake_high_water` goes in
//!   `pg_idgen.snowflake_database`.
//!
//! The hook runs in the dropping transaction, before the object is gone
//! from the catalogs, so its name can still be read.

use crate::{segment, snowflake};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;

static mut PREV_OBJECT_ACCESS_HOOK: pg_sys::object_access_hook_type = None;

/// Installs the hook; called from `_PG_init` while preloading.
pub fn install() {
    // SAFETY: `_PG_init` runs once in the postmaster, single-threaded,
    // before any hook is called; the previous hook is chained.
    unsafe {
        PREV_OBJECT_ACCESS_HOOK = pg_sys::object_access_hook;
        pg_sys::object_access_hook = Some(object_access);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn object_access(
    access: pg_sys::ObjectAccessType::Type,
    class_id: pg_sys::Oid,
    object_id: pg_sys::Oid,
    sub_id: i32,
    arg: *mut std::ffi::c_void,
) {
    // SAFETY: chaining to the hook installed before ours, with our
    // arguments unchanged.
    unsafe {
        if let Some(prev) = PREV_OBJECT_ACCESS_HOOK {
            prev(access, class_id, object_id, sub_id, arg);
        }
    }
    if access != pg_sys::ObjectAccessType::OAT_DROP {
        return;
    }
    if class_id == pg_sys::DatabaseRelationId {
        segment::lifecycle::database_dropped(object_id.to_u32());
        return;
    }
    let relation = class_id == pg_sys::RelationRelationId && sub_id == 0;
    if !relation && class_id != pg_sys::ExtensionRelationId {
        return;
    }
    // SAFETY: a catalog lookup by name, in a transaction.
    let extension = unsafe { pg_sys::get_extension_oid(c"pg_idgen".as_ptr(), true) };
    if extension == pg_sys::InvalidOid {
        return;
    }
    // pg_idgen itself, known by its OID: a member table renamed or moved
    // before the drop goes with it all the same (found by an attack
    // review, when the hook still knew id_segment by its name).
    if class_id == pg_sys::ExtensionRelationId && object_id == extension {
        segment::lifecycle::extension_dropped();
        return;
    }
    if !relation {
        return;
    }
    // Only the extension's own tables: a table of another schema, or a
    // temporary one, that has the name is none of pg_idgen's business. The
    // membership is still in pg_depend while the drop hook runs.
    // SAFETY: a catalog lookup by OID, in a transaction.
    let ours =
        unsafe { pg_sys::getExtensionOfObject(pg_sys::RelationRelationId, object_id) == extension };
    if !ours {
        return;
    }
    // SAFETY: the relation still exists while its drop hook runs; a NULL
    // name means it does not, and then there is nothing to do.
    let name = unsafe { pg_sys::get_rel_name(object_id) };
    if name.is_null() {
        return;
    }
    // SAFETY: a palloc'd NUL-terminated name, alive for this call.
    let name = unsafe { CStr::from_ptr(name) };
    snowflake::guard::relation_dropped(name);
}
