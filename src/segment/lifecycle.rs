//! What DDL does to cached ranges: an object-access hook that frees the
//! slots of a database when its `id_segment` table is dropped (`DROP
//! EXTENSION pg_idgen`, directly or by cascade) or when the database itself
//! is dropped.
//!
//! Freeing a slot bumps its generation before its chain is discarded
//! (`registry.rs`), so a statement that began before the drop — an open
//! cursor, a PL/pgSQL loop — finds its cached slot gone and resolves the
//! tag again, which fails once the extension is gone; and a refill that
//! committed on the old table just before the drop is never published (the
//! worker publishes only into the generation it read). The hook runs in the
//! dropping transaction; if that rolls back, the freed ranges are only a
//! gap. Slots of a dropped database are freed at once, so a database
//! created later with the same OID never inherits them.

use super::registry::registry;
use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREV_OBJECT_ACCESS_HOOK: pg_sys::object_access_hook_type = None;

/// Installs the hook; called from `_PG_init` while preloading.
pub fn install_hook() {
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
    let Some(registry) = registry() else { return };
    if class_id == pg_sys::DatabaseRelationId {
        registry.free_database(object_id.to_u32());
        return;
    }
    // SAFETY: MyDatabaseId is set in every connected backend.
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    if class_id != pg_sys::RelationRelationId || sub_id != 0 || !registry.has_slots_in(database) {
        return;
    }
    // SAFETY: the relation still exists while its drop hook runs; a NULL
    // name means it does not, and then there is nothing to do.
    let name = unsafe { pg_sys::get_rel_name(object_id) };
    // SAFETY: a palloc'd NUL-terminated name.
    if !name.is_null() && unsafe { std::ffi::CStr::from_ptr(name) } == c"id_segment" {
        registry.free_database(database);
    }
}
