//! The only code that reads or writes `id_segment` on behalf of a refill:
//! the classic version-CAS protocol of the segment (号段) allocator, as
//! Meituan Leaf runs it, run by the refill worker inside a transaction of
//! its own.
//!
//! ```sql
//! SELECT max_id, step, version FROM <ext schema>.id_segment WHERE biz_tag = $1;
//! UPDATE <ext schema>.id_segment
//!    SET max_id = max_id + $2, version = version + 1, updated_at = now()
//!  WHERE biz_tag = $1 AND version = $3      -- 0 rows: someone else won, read again
//! RETURNING max_id;                         -- the range is (max_id - $2, max_id]
//! ```
//!
//! The new `max_id` is computed from the row as the UPDATE finds it, not
//! written as an absolute value, so an outside program that adds `step`
//! without bumping `version` is never overwritten: the range granted is the
//! one below the `max_id` the UPDATE returns.
//!
//! The worker waits at most `ROW_LOCK_WAIT` for the row lock (a session
//! holding the row is retried on a later pass), so one tag's trouble never
//! stalls the other tags of the database. It runs the statements as the
//! table's owner in a security-restricted context (`as_owner`).
//!
//! Backends read the row themselves only on their slow path
//! (`tag::row_state`: does the tag exist, and did the calling transaction
//! write or lock it?) and, for a tag created by their own transaction,
//! raise its `max_id` past the IDs they handed out just before that
//! transaction commits (`created_here::raise_max_id`).
//!
//! It is a plain single-row CAS: no advisory locks, no `ctid`, no
//! `FOR UPDATE`, so an application, another server or `postgres_fdw` can run
//! the same protocol on the same row.
//!
//! # Sources
//!
//! A tag's ranges come from one source: the local `id_segment`, or — for a
//! tag in `id_segment_remote` (`segment_attach`) — the `id_segment` of a
//! central server, through the postgres_fdw foreign table named there. The
//! CAS is the same statements on the foreign table, run as that table's
//! owner (whose user mapping postgres_fdw uses). postgres_fdw commits the
//! remote transaction just before the local one, so the range is committed
//! on the central server before the worker publishes it; a failure between
//! the two commits leaves a gap. The remote transaction is REPEATABLE READ,
//! so a CAS that loses to another allocator there fails with a
//! serialization error (40001) rather than matching no row: the worker
//! retries the whole refill in a new transaction (`worker.rs`). Each
//! remote refill runs under `statement_timeout = pg_idgen.remote_timeout`,
//! which postgres_fdw turns into a cancel of the remote statement. Every name is schema-qualified and the
//! transaction's `search_path` is `pg_catalog, pg_temp`, so no object a user
//! creates can change what these statements do.

use super::policy::{plan_range, RefillProblem};
use crate::catalog::as_owner;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// How long the worker waits for a row lock before it moves on to the
/// next tag: long enough for an outside allocator's own short CAS
/// transaction, short enough that a locked row does not delay other tags.
pub const ROW_LOCK_WAIT_MS: i32 = 10;

/// A range the worker took from the table: `[first, first + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    pub first: i64,
    pub len: u64,
    pub step: i64,
    pub table_oid: u32,
    pub cas_conflicts: u64,
    /// The range came from a central server (`id_segment_remote`).
    pub remote: bool,
}

/// How often the CAS may lose to other allocators in one refill before the
/// worker gives up for this round (it tries again at its next pass).
const MAX_CAS_ATTEMPTS: u64 = 100;

/// Where `id_segment` lives in this database, if the extension is there.
struct Table {
    qualified_name: String,
    /// `id_segment_remote` beside it (absent under 0.1.0's SQL).
    remote_registry: Option<String>,
    oid: u32,
    owner: pg_sys::Oid,
}

/// The foreign table a remote tag's ranges come from, and its owner.
struct RemoteSource {
    qualified_name: String,
    owner: pg_sys::Oid,
}

/// The remote source of `tag`, if it has one (`id_segment_remote` sits in
/// the schema of `id_segment`): `Some(Err(server))` when the tag is
/// attached but its foreign table was dropped.
fn find_remote(
    client: &SpiClient<'_>,
    table: &Table,
    tag: &str,
) -> Result<Option<Result<RemoteSource, String>>, pgrx::spi::Error> {
    let Some(remote_table) = &table.remote_registry else {
        return Ok(None);
    };
    let rows = client.select(
        &format!(
            "SELECT pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.' \
                    OPERATOR(pg_catalog.||) pg_catalog.quote_ident(c.relname), c.relowner, \
                    r.server::pg_catalog.text \
               FROM {remote_table} r \
               LEFT JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) r.foreign_table \
               LEFT JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
              WHERE r.biz_tag OPERATOR(pg_catalog.=) $1"
        ),
        Some(1),
        &[tag.into()],
    )?;
    if rows.is_empty() {
        return Ok(None);
    }
    let row = rows.first();
    Ok(Some(
        match (row.get::<String>(1)?, row.get::<pg_sys::Oid>(2)?) {
            (Some(qualified_name), Some(owner)) => Ok(RemoteSource {
                qualified_name,
                owner,
            }),
            _ => Err(row.get::<String>(3)?.unwrap_or_default()),
        },
    ))
}

fn find_table(client: &SpiClient<'_>) -> Result<Option<Table>, pgrx::spi::Error> {
    let rows = client.select(
        "SELECT pg_catalog.quote_ident(n.nspname), c.oid, c.relowner, \
                EXISTS (SELECT FROM pg_catalog.pg_class r \
                         WHERE r.relnamespace OPERATOR(pg_catalog.=) n.oid \
                           AND r.relname OPERATOR(pg_catalog.=) 'id_segment_remote') \
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
    let schema: Option<String> = row.get(1)?;
    let oid: Option<pg_sys::Oid> = row.get(2)?;
    let owner: Option<pg_sys::Oid> = row.get(3)?;
    let has_remote: Option<bool> = row.get(4)?;
    Ok(match (schema, oid, owner) {
        (Some(schema), Some(oid), Some(owner)) => Some(Table {
            qualified_name: format!("{schema}.id_segment"),
            remote_registry: has_remote
                .unwrap_or(false)
                .then(|| format!("{schema}.id_segment_remote")),
            oid: oid.to_u32(),
            owner,
        }),
        _ => None,
    })
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
) -> Result<Result<Granted, RefillProblem>, pgrx::spi::Error> {
    Spi::connect_mut(|client| {
        client.update(
            "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true), \
                    pg_catalog.set_config('synchronous_commit', 'on', true), \
                    pg_catalog.set_config('lock_timeout', $1, true)",
            None,
            &[format!("{ROW_LOCK_WAIT_MS}ms").into()],
        )?;
        let Some(table) = find_table(client)? else {
            return Ok(Err(RefillProblem::NoExtension));
        };
        if let Some(remote) = find_remote(client, &table, tag)? {
            let remote = match remote {
                Ok(remote) => remote,
                Err(server) => return Ok(Err(RefillProblem::ForeignTableGone { server })),
            };
            client.update(
                "SELECT pg_catalog.set_config('statement_timeout', $1, true)",
                None,
                &[format!("{}ms", crate::gucs::REMOTE_TIMEOUT_MS.get()).into()],
            )?;
            let source = Table {
                qualified_name: remote.qualified_name,
                remote_registry: None,
                oid: table.oid,
                owner: remote.owner,
            };
            return as_owner(remote.owner, || {
                let granted = cas(client, &source, tag, steps, bound_table, handed_out)?;
                Ok(granted.map(|g| Granted { remote: true, ..g }).map_err(
                    |problem| match problem {
                        RefillProblem::NoRow => RefillProblem::NoRemoteRow {
                            foreign_table: source.qualified_name.clone(),
                        },
                        other => other,
                    },
                ))
            });
        }
        as_owner(table.owner, || {
            cas(client, &table, tag, steps, bound_table, handed_out)
        })
    })
}

/// The CAS loop of `take_range`, run as the table's owner.
fn cas(
    client: &mut SpiClient<'_>,
    table: &Table,
    tag: &str,
    steps: u64,
    bound_table: u32,
    handed_out: Option<i64>,
) -> Result<Result<Granted, RefillProblem>, pgrx::spi::Error> {
    {
        let handed_out = handed_out.filter(|_| bound_table == 0 || bound_table == table.oid);
        let read = format!(
            "SELECT max_id, step::pg_catalog.int8, version FROM {} WHERE biz_tag OPERATOR(pg_catalog.=) $1",
            table.qualified_name
        );
        let write = format!(
            "UPDATE {} SET max_id = max_id OPERATOR(pg_catalog.+) $2, version = version OPERATOR(pg_catalog.+) 1, \
                    updated_at = pg_catalog.now() \
              WHERE biz_tag OPERATOR(pg_catalog.=) $1 AND version OPERATOR(pg_catalog.=) $3 \
          RETURNING max_id",
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
                &[tag.into(), (plan.len as i64).into(), version.into()],
            )?;
            if let Some(new_max_id) = updated.first().get::<i64>(1).ok().flatten() {
                return Ok(Ok(Granted {
                    first: new_max_id - (plan.len as i64 - 1),
                    len: plan.len,
                    step,
                    table_oid: table.oid,
                    cas_conflicts,
                    remote: false,
                }));
            }
            cas_conflicts += 1;
        }
        Ok(Err(RefillProblem::CasContention {
            attempts: cas_conflicts,
        }))
    }
}
