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
//! the mark missing until the extension is created again).

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
