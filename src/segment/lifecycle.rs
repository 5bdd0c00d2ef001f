//! What DDL does to cached ranges: on a drop (`drop_hook.rs`) it frees the
//! slots of a database when pg_idgen is dropped from it (`DROP EXTENSION
//! pg_idgen`, directly or by cascade: `id_segment`, whatever its name by
//! then, goes with it) or when the database itself is dropped.
//!
//! Freeing a slot bumps its generation before its chain is discarded
//! (`registry.rs`), so a statement that began before the drop — an open
//! cursor, a PL/pgSQL loop — finds its cached slot gone and resolves the
//! tag again, which fails once the extension is gone; and a refill that
//! committed on the old table just before the drop is never published (the
//! worker publishes only into the generation it read). The hook runs in the
//! dropping transaction; if that rolls back, the freed ranges are only a
//! gap. Slots of a dropped database are freed at once, so a database
//! created later with the same OID never inherits them. A dropped
//! `id_segment` is also told to `created_here`: a tag created afterwards
//! in the dropping transaction hands out nothing (a rollback would bring
//! the old table back, below its IDs).

use super::registry::registry;
use pgrx::pg_sys;

/// A database was dropped (`drop_hook.rs`): its slots go at once.
pub fn database_dropped(database: u32) {
    if let Some(registry) = registry() {
        registry.free_database(database);
    }
}

/// pg_idgen was dropped from the current database (`drop_hook.rs`), and
/// with it `id_segment`: the database's slots go.
pub fn extension_dropped() {
    super::created_here::table_dropped();
    if let Some(registry) = registry() {
        // SAFETY: MyDatabaseId is set in every connected backend.
        registry.free_database(unsafe { pg_sys::MyDatabaseId }.to_u32());
    }
}
