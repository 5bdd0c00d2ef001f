//! The guard on `id_segment`: a trigger that refuses any UPDATE lowering
//! `max_id`, the largest ID already handed to some allocator, or changing
//! `biz_tag` (moving a row onto another tag hands that tag's IDs out
//! again). Unlike a check kept in shared memory the refusal holds across
//! restarts and for every allocator.
//!
//! It is an `AFTER UPDATE` row trigger, so it judges the row as stored,
//! whatever `BEFORE` triggers did to it, and fires only `WHEN (NEW.max_id <
//! OLD.max_id OR NEW.biz_tag <> OLD.biz_tag)` (see `sql/finalize.sql`), so
//! refills, which only add, never queue it. A superuser who means it sets
//! `pg_idgen.allow_max_id_decrease` for that transaction. What it cannot
//! see: a row deleted and inserted again (that is `segment_drop` and
//! `segment_create`: a new tag), and changes made with triggers off.

use crate::errors::IdgenError;
use crate::gucs;
use pgrx::prelude::*;
use pgrx::AllocatedByPostgres;

#[pg_trigger]
fn id_segment_guard<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, pgrx::datum::TryFromDatumError> {
    let new = trigger.new();
    if gucs::ALLOW_MAX_ID_DECREASE.get() {
        return Ok(new);
    }
    let (Some(old), Some(new)) = (trigger.old(), new) else {
        return Ok(None);
    };
    let from: Option<i64> = old.get_by_name("max_id")?;
    let to: Option<i64> = new.get_by_name("max_id")?;
    let tag: Option<String> = old.get_by_name("biz_tag")?;
    let new_tag: Option<String> = new.get_by_name("biz_tag")?;
    if new_tag != tag {
        IdgenError::TagRenamed {
            from: tag.unwrap_or_default(),
            to: new_tag.unwrap_or_default(),
        }
        .raise();
    }
    match (from, to) {
        (Some(from), Some(to)) if to < from => IdgenError::MaxIdDecrease {
            tag: tag.unwrap_or_default(),
            from,
            to,
        }
        .raise(),
        _ => Ok(Some(new)),
    }
}
