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
//! until then (`relation_dropped`, called by `drop_hook.rs`).

use crate::errors::IdgenError;
use crate::gucs;
use pgrx::prelude::*;
use pgrx::AllocatedByPostgres;
use std::ffi::CStr;

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

/// `DROP EXTENSION pg_idgen` in `pg_idgen.snowflake_database` drops the
/// mark's table, and with it every snowflake ID of the cluster until the
/// extension is created there again (the keeper commits the mark before
/// issuing). Not refused — the DBA may mean it —, but told, with the way
/// back, when this server has issued snowflake IDs. Called by
/// `drop_hook.rs` for every dropped relation of the current database.
pub fn relation_dropped(name: &CStr) {
    if name != c"snowflake_high_water" {
        return;
    }
    let issued = super::shared::snowflake().is_some_and(|s| {
        s.main
            .stats
            .issued
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
            || s.main.persisted_limit() >= 0
    });
    if !issued {
        return;
    }
    // SAFETY: MyDatabaseId is set in a connected backend; the name is
    // palloc'd and NUL-terminated (NULL: the database is gone).
    let database = unsafe { pg_sys::get_database_name(pg_sys::MyDatabaseId) };
    if database.is_null() {
        return;
    }
    // SAFETY: as above.
    let database = unsafe { CStr::from_ptr(database) }
        .to_string_lossy()
        .into_owned();
    if database == super::config::setting_text(&gucs::SNOWFLAKE_DATABASE) {
        IdgenError::SnowflakeMarkDropped { database }.warn();
    }
}
