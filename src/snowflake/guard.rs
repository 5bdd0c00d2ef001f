//! The guard on `snowflake_high_water`: a trigger that refuses a DELETE or
//! TRUNCATE of the WAL-logged snowflake mark and any UPDATE lowering it, as
//! `segment/guard.rs` does for `id_segment.max_id`. Without the row a
//! promoted standby, a restore or a restart can only guess how far ahead
//! of the clock IDs were issued (`state_file::floor_without_a_mark`, which
//! trusts the current `snowflake_max_lead`); with a lowered row it would
//! start below IDs already issued.
//!
//! It is an `AFTER` trigger (row level for DELETE and UPDATE, statement
//! level for TRUNCATE; see `sql/finalize.sql`); the UPDATE trigger fires
//! only `WHEN` a mark goes down, so the keeper's commits (`GREATEST`)
//! never queue it. A superuser who means it sets
//! `pg_idgen.allow_max_id_decrease` for that transaction. `DROP EXTENSION`
//! drops the table with it: that is not refused (the keeper then reports
//! the mark missing until the extension is created again), but in
//! `pg_idgen.snowflake_database` of a server that issued snowflake IDs a
//! WARNING says that no snowflake ID is issued anywhere on the server
//! until then (`warn_when_dropped`, an object-access hook).

use crate::errors::IdgenError;
use crate::gucs;
use pgrx::prelude::*;
use pgrx::AllocatedByPostgres;

#[pg_trigger]
fn snowflake_high_water_guard<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, pgrx::datum::TryFromDatumError> {
    let new = trigger.new();
    if gucs::ALLOW_MAX_ID_DECREASE.get() {
        return Ok(new);
    }
    let operation = match trigger.op() {
        Ok(PgTriggerOperation::Delete) => "DELETE",
        Ok(PgTriggerOperation::Truncate) => "TRUNCATE",
        _ => "UPDATE",
    };
    IdgenError::SnowflakeMarkLowered { operation }.raise()
}

static mut PREV_OBJECT_ACCESS_HOOK: pg_sys::object_access_hook_type = None;

/// Installs the drop warning (`warn_when_dropped`); called from `_PG_init`
/// while preloading.
pub fn install_drop_warning() {
    // SAFETY: `_PG_init` runs once in the postmaster, single-threaded,
    // before any hook is called; the previous hook is chained.
    unsafe {
        PREV_OBJECT_ACCESS_HOOK = pg_sys::object_access_hook;
        pg_sys::object_access_hook = Some(warn_when_dropped);
    }
}

/// `DROP EXTENSION pg_idgen` in `pg_idgen.snowflake_database` drops the
/// mark's table, and with it every snowflake ID of the cluster until the
/// extension is created there again (the keeper commits the mark before
/// issuing). Not refused — the DBA may mean it —, but told, with the way
/// back, when this server has issued snowflake IDs.
#[pg_guard]
unsafe extern "C-unwind" fn warn_when_dropped(
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
    if access != pg_sys::ObjectAccessType::OAT_DROP
        || class_id != pg_sys::RelationRelationId
        || sub_id != 0
    {
        return;
    }
    // SAFETY: the relation still exists while its drop hook runs (NULL:
    // it does not); MyDatabaseId is set in a connected backend.
    let (name, database) = unsafe {
        (
            pg_sys::get_rel_name(object_id),
            pg_sys::get_database_name(pg_sys::MyDatabaseId),
        )
    };
    if name.is_null() || database.is_null() {
        return;
    }
    // SAFETY: palloc'd NUL-terminated names.
    let (name, database) = unsafe {
        (
            std::ffi::CStr::from_ptr(name),
            std::ffi::CStr::from_ptr(database)
                .to_string_lossy()
                .into_owned(),
        )
    };
    let issued = super::shared::snowflake().is_some_and(|s| {
        s.main
            .stats
            .issued
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
            || s.main.persisted_limit() >= 0
    });
    if name == c"snowflake_high_water"
        && issued
        && database == super::config::setting_text(&gucs::SNOWFLAKE_DATABASE)
    {
        IdgenError::SnowflakeMarkDropped { database }.warn();
    }
}
