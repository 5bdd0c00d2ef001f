//! The only code that reads or writes `id_segment` on behalf of a refill:
//! the seeds' version-CAS protocol, run by the refill worker inside a
//! transaction of its own.
//!
//! ```sql
//! SELECT max_id, step, version FROM <ext schema>.id_segment WHERE biz_tag = $1;
//! UPDATE <ext schema>.id_segment
//!    SET max_id = $2, version = version + 1, updated_at = now()
//!  WHERE biz_tag = $1 AND version = $3;     -- 0 rows: someone else won, read again
//! ```
//!
//! It is a plain single-row CAS: no advisory locks, no `ctid`, no
//! `FOR UPDATE`, so an application, another server or `postgres_fdw` can run
//! the same protocol on the same row. Every name is schema-qualified and the
//! transaction's `search_path` is `pg_catalog, pg_temp`, so no object a user
//! creates can change what these statements do.

use super::policy::{plan_range, RefillProblem};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// A range the worker took from the table: `[first, first + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    pub first: i64,
    pub len: u64,
    pub step: i64,
    pub table_oid: u32,
    pub cas_conflicts: u64,
}

/// How often the CAS may lose to other allocators in one refill before the
/// worker gives up for this round (it tries again at its next pass).
const MAX_CAS_ATTEMPTS: u64 = 100;

/// Where `id_segment` lives in this database, if the extension is there.
struct Table {
    qualified_name: String,
    oid: u32,
}

fn find_table(client: &SpiClient<'_>) -> Result<Option<Table>, pgrx::spi::Error> {
    let rows = client.select(
        "SELECT pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.id_segment', c.oid \
           FROM pg_catalog.pg_extension e \
           JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace \
           JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid \
                                     AND c.relname OPERATOR(pg_catalog.=) 'id_segment' \
          WHERE e.extname OPERATOR(pg_catalog.=) 'pg_idgen'",
        Some(1),
        &[],
    )?;
    if rows.is_empty() {
        return Ok(None);
    }
    let row = rows.first();
    let qualified_name: Option<String> = row.get(1)?;
    let oid: Option<pg_sys::Oid> = row.get(2)?;
    Ok(qualified_name.zip(oid).map(|(qualified_name, oid)| Table {
        qualified_name,
        oid: oid.to_u32(),
    }))
}

/// Takes `steps` steps of `tag`'s row, i.e. `steps * step` IDs (fewer at the
/// very end of the bigint range). `handed_out` is the largest ID this server
/// already holds for the tag from table `bound_table`: a row of that same
/// table whose `max_id` is below it is refused (a re-created table starts
/// afresh).
///
/// Must run inside a transaction; the caller commits it (synchronously)
/// before it publishes the range. PostgreSQL errors (lock timeout, missing
/// table) propagate as panics for the caller's `PgTryBuilder`.
pub fn take_range(
    tag: &str,
    steps: u64,
    bound_table: u32,
    handed_out: Option<i64>,
    lock_timeout_ms: i32,
) -> Result<Result<Granted, RefillProblem>, pgrx::spi::Error> {
    Spi::connect_mut(|client| {
        client.update(
            "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true), \
                    pg_catalog.set_config('synchronous_commit', 'on', true), \
                    pg_catalog.set_config('lock_timeout', $1, true)",
            None,
            &[format!("{lock_timeout_ms}ms").into()],
        )?;
        let Some(table) = find_table(client)? else {
            return Ok(Err(RefillProblem::NoExtension));
        };
        let handed_out = handed_out.filter(|_| bound_table == 0 || bound_table == table.oid);
        let read = format!(
            "SELECT max_id, step::pg_catalog.int8, version FROM {} WHERE biz_tag OPERATOR(pg_catalog.=) $1",
            table.qualified_name
        );
        let write = format!(
            "UPDATE {} SET max_id = $2, version = version OPERATOR(pg_catalog.+) 1, updated_at = pg_catalog.now() \
              WHERE biz_tag OPERATOR(pg_catalog.=) $1 AND version OPERATOR(pg_catalog.=) $3",
            table.qualified_name
        );
        let mut cas_conflicts = 0;
        while cas_conflicts < MAX_CAS_ATTEMPTS {
            let rows = client.update(read.as_str(), Some(1), &[tag.into()])?;
            if rows.is_empty() {
                return Ok(Err(RefillProblem::NoRow));
            }
            let row = rows.first();
            let (Some(max_id), Some(step), Some(version)) =
                (row.get::<i64>(1)?, row.get::<i64>(2)?, row.get::<i64>(3)?)
            else {
                return Ok(Err(RefillProblem::NoRow));
            };
            let plan = match plan_range(max_id, step, steps, handed_out) {
                Ok(plan) => plan,
                Err(problem) => return Ok(Err(problem)),
            };
            let updated = client.update(
                write.as_str(),
                None,
                &[tag.into(), plan.new_max_id.into(), version.into()],
            )?;
            if updated.len() == 1 {
                return Ok(Ok(Granted {
                    first: plan.first,
                    len: plan.len,
                    step,
                    table_oid: table.oid,
                    cas_conflicts,
                }));
            }
            cas_conflicts += 1;
        }
        Ok(Err(RefillProblem::CasContention {
            attempts: cas_conflicts,
        }))
    })
}
