//! `segment_rename(old, new)`: a tag gets another name, keeping its
//! position, and every column and domain default that draws from it draws
//! from the new name — as `ALTER SEQUENCE ... RENAME` keeps a sequence's
//! defaults working.
//!
//! In the caller's transaction, both tags locked (`tag::lock_tag`): the row
//! of `new` is made with the `max_id` and `step` of `old` (a new row, so
//! the guard that keeps `biz_tag` from changing holds), `old`'s row is
//! deleted, and each default calling `segment_nextval(old)` is set to
//! `segment_nextval(new)`. The next ID of `new` is above every ID `old`
//! handed out; `old`'s cached ranges are given up (a gap), as
//! `segment_drop` gives them up. Refused, with nothing done: a tag attached
//! to a central server (rename it there), a `new` that exists, a
//! generated column drawing from `old` (its expression cannot be changed in
//! place), and on the Citus coordinator a `new` some worker took IDs of
//! above `old`'s position (a tag of that name dropped or lost).

use super::citus_catch_up;
use super::default_check::{tag_uses, User};
use super::registry::registry_or_raise;
use super::sql::give_up_slot;
use super::tag::{self, check_tag, current_table_oid, table_name};
use crate::catalog::{quote_literal, table_schema};
use crate::errors::{required, IdgenError};
use pgrx::prelude::*;

/// `segment_rename(old, new)`: see the module header.
#[pg_extern(volatile, parallel_unsafe)]
fn segment_rename(old: Option<&str>, new: Option<&str>, fcinfo: pg_sys::FunctionCallInfo) {
    let registry = registry_or_raise();
    super::sql::check_writable("segment_rename()");
    let (old, new) = (required(old, "segment tag"), required(new, "new name"));
    check_tag(old.as_bytes());
    check_tag(new.as_bytes());
    let table_oid = current_table_oid(fcinfo);
    let table = table_name(table_oid);
    let schema = crate::catalog::quote_identifier(&table_schema(table_oid).unwrap_or_default());
    for t in [old, new] {
        tag::lock_tag(table_oid, t);
    }
    if tag::tag_exists_latest(table_oid, old.as_bytes(), true) {
        IdgenError::RenameAttached { tag: old.into() }.raise();
    }
    if tag::tag_exists_latest(table_oid, new.as_bytes(), false)
        || tag::tag_exists_latest(table_oid, new.as_bytes(), true)
    {
        IdgenError::TagExists { tag: new.into() }.raise();
    }
    let uses: Vec<User> = tag_uses(table_oid, None)
        .into_iter()
        .filter(|u| u.tag == old)
        .map(|u| u.user)
        .collect();
    if let Some(generated) = uses.iter().find(|u| {
        matches!(
            u,
            User::Column {
                generated: true,
                ..
            }
        )
    }) {
        IdgenError::RenameUsedByGenerated {
            tag: old.into(),
            user: generated.describe(),
        }
        .raise();
    }
    // On the Citus coordinator, `new` goes on above what any worker took
    // of a tag of that name (`citus_catch_up.rs`); `old`'s row only rises
    // meanwhile (refills), so its position read now is safe to compare.
    if let Some(floor) = citus_catch_up::workers_floor_of(table_oid, new) {
        let position = Spi::get_one_with_args::<i64>(
            &format!("SELECT max_id FROM {table} WHERE biz_tag OPERATOR(pg_catalog.=) $1"),
            &[old.into()],
        )
        .ok()
        .flatten();
        if let Some(max_id) = position.filter(|&max_id| floor > max_id) {
            IdgenError::CitusRenameBelowWorkers {
                old: old.into(),
                new: new.into(),
                max_id,
                floor,
            }
            .raise();
        }
    }
    let renamed = Spi::connect_mut(|client| {
        let moved = client.update(
            &format!(
                "WITH old AS (DELETE FROM {table} WHERE biz_tag OPERATOR(pg_catalog.=) $1 \
                              RETURNING max_id, step, version) \
                 INSERT INTO {table} (biz_tag, max_id, step, version, updated_at) \
                 SELECT $2, max_id, step, version OPERATOR(pg_catalog.+) 1, pg_catalog.now() FROM old \
                 RETURNING max_id"
            ),
            None,
            &[old.into(), new.into()],
        )?;
        if moved.is_empty() {
            return Ok(false);
        }
        let call = format!("{schema}.segment_nextval({})", quote_literal(new));
        for user in &uses {
            let statement = match user {
                User::Column { table, column, .. } => format!(
                    "ALTER TABLE {table} ALTER COLUMN {} SET DEFAULT {call}",
                    crate::catalog::quote_identifier(column)
                ),
                User::Domain { name } => format!("ALTER DOMAIN {name} SET DEFAULT {call}"),
            };
            client.update(&statement, None, &[])?;
        }
        Ok::<_, pgrx::spi::Error>(true)
    });
    match renamed {
        Ok(true) => {}
        Ok(false) => IdgenError::UnknownTag { tag: old.into() }.raise(),
        Err(e) => IdgenError::Internal {
            context: "segment_rename",
            message: e.to_string(),
        }
        .raise(),
    }
    // Its cached ranges are given up: the next ID of `new` comes from the
    // row, above them.
    give_up_slot(registry, old.as_bytes(), None);
    super::created_here::renamed(old.as_bytes(), new.as_bytes(), table_oid);
}
