//! The only code that reads or writes `id_segment` on behalf of a refill:
//! the classic version-CAS protocol of the segment (号段) allocator, as
//! Meituan Leaf runs it, run by the refill worker inside a transaction of
//! its own.
//!
//! ```sql
//! SELECT max_id, step, version FROM <ext schema>.id_segment WHERE biz_tag = $1;
//! UPDATE <ext schema>.id_segment
//!    SET max_id = max_id + $2, version = version + 1, updated_at = now()
//!  WHERE biz_tag = $1 AND version = $3 AND max_id = $4
//! RETURNING max_id;       -- 0 rows: someone else won, read again
//! ```
//!
//! The UPDATE matches only the row exactly as it was read, so an outside
//! program that adds `step` without bumping `version` makes the CAS fail
//! and be read again, never overwritten. The range granted is the part of
//! `(read max_id, read max_id + $2]` below the `max_id` the UPDATE left
//! (`policy::granted_range`): a trigger that caps or rewrites the update
//! shortens the range, and one that keeps `max_id` where it was makes the
//! refill fail; the range never reaches below the `max_id` it was read
//! from.
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
//! owner (whose user mapping postgres_fdw uses).
//!
//! A remote refill, in order:
//! 1. The server's `options` must pin the central session
//!    (`remote_session.rs`): `synchronous_commit` not off, `lock_timeout`
//!    at most 10 ms, an `idle_in_transaction_session_timeout`. The
//!    worker's own `SET LOCAL`s never reach the central server.
//! 2. `statement_timeout = pg_idgen.remote_timeout`, which postgres_fdw
//!    turns into a cancel of the remote statement.
//! 3. Where the central server is (its `id_segment_origin`: system
//!    identifier, database and table OIDs, timeline, WAL position),
//!    against this database's records (`recorded_of_server`: every row of
//!    `id_segment_central`, and the central identities the tags of the
//!    same route last refilled from): a move `fence.rs`'s invariants show
//!    — another cluster or table than the route's, another timeline of
//!    the table, the cluster's WAL gone back on its timeline — is refused
//!    (`CentralMoved`) before anything is written, unless accepted there
//!    since. This catches what step 4's floor cannot: a central server
//!    that went back to before ranges *other* shards took.
//! 4. The CAS, with the tag's `id_segment_remote.max_id_seen` (and the IDs
//!    this server handed out) as the floor: a central row below it means
//!    the central server went back, and the refill is refused
//!    (`CentralWentBack`) before anything is written.
//! 5. `max_id_seen` is raised to the range's end in the local transaction.
//!    postgres_fdw commits the remote transaction just before the local
//!    one, so the range is committed (and flushed) on the central server
//!    before the mark and the range are; a failure between the two commits
//!    leaves a gap. The position read in step 3 is recorded with it
//!    (`record_position`). So the largest `max_id_seen` over every shard
//!    covers every ID any of them handed out: the value to restore a
//!    central row to.
//!
//! The remote transaction is REPEATABLE READ, so a CAS that loses to
//! another allocator there fails with a serialization error (40001) rather
//! than matching no row: the worker retries the whole refill in a new
//! transaction (`worker.rs`). Every name is schema-qualified and the
//! transaction's `search_path` is `pg_catalog, pg_temp`, so no object a user
//! creates can change what these statements do.

use super::citus_catch_up;
use super::citus_source;
use super::fence::{refusal, Acceptance, Central, CentralTable, Records, Seen};
use super::policy::{granted_range, plan_range, RefillProblem};
use super::registry::{GiveBack, WorkerKey};
use super::replication;
use super::tag;
use crate::catalog::{as_owner, quote_identifier, table_schema};
use crate::errors::IdgenError;
use crate::failpoints::failpoint;
use crate::remote_session;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::pg_sys::PgTryBuilder;
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
    /// The IDs the UPDATE asked for: more than `len` when a trigger, rule
    /// or policy held `max_id` back.
    pub asked: u64,
    pub step: i64,
    pub table_oid: u32,
    pub cas_conflicts: u64,
    /// The range came from a central server (`id_segment_remote`).
    pub remote: bool,
    /// The local row as the CAS left it — its `version` and the `xmin` of
    /// the row version the CAS wrote (`None` for a central server's row):
    /// a clean stop gives the range's untaken top back to the row only
    /// while it is still exactly that row version (`give_back`).
    pub row_version: Option<(i64, u32)>,
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
    /// The OID of its postgres_fdw server: the lane of the worker that
    /// refills the tag (`registry::WorkerKey`).
    server_oid: u32,
    owner: pg_sys::Oid,
    /// The postgres_fdw server of the foreign table, and its `options`.
    server: String,
    server_options: Option<String>,
    /// The largest central `max_id` this server took a range below
    /// (`id_segment_remote.max_id_seen`; `None` before the first refill
    /// under 0.3.0, or under older SQL without the column).
    max_id_seen: Option<i64>,
    /// `id_segment_remote` has the `max_id_seen` column (0.3.0's SQL).
    records_seen: bool,
    /// The foreign table over the central server's `id_segment_origin`
    /// (`None` for a tag attached before 0.3.0).
    origin_table: Option<String>,
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
                    r.server::pg_catalog.text, s.srvname::pg_catalog.text, {server_options}, \
                    (pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->>) 'max_id_seen')::pg_catalog.int8, \
                    pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.?) 'max_id_seen', \
                    (SELECT pg_catalog.quote_ident(oc_n.nspname) OPERATOR(pg_catalog.||) '.' \
                                OPERATOR(pg_catalog.||) pg_catalog.quote_ident(oc.relname) \
                       FROM pg_catalog.pg_class oc \
                       JOIN pg_catalog.pg_namespace oc_n ON oc_n.oid OPERATOR(pg_catalog.=) oc.relnamespace \
                      WHERE oc.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass( \
                                pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->>) 'origin_table')::pg_catalog.oid), \
                    (pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->>) 'origin_table') IS NOT NULL, \
                    s.oid \
               FROM {remote_table} r \
               LEFT JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) r.foreign_table \
               LEFT JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
               LEFT JOIN pg_catalog.pg_foreign_table ft ON ft.ftrelid OPERATOR(pg_catalog.=) c.oid \
               LEFT JOIN pg_catalog.pg_foreign_server s ON s.oid OPERATOR(pg_catalog.=) ft.ftserver \
              WHERE r.biz_tag OPERATOR(pg_catalog.=) $1",
            server_options = remote_session::SERVER_OPTIONS_SQL
        ),
        Some(1),
        &[tag.into()],
    )?;
    if rows.is_empty() {
        return Ok(None);
    }
    let row = rows.first();
    let registered_server = row.get::<String>(3)?.unwrap_or_default();
    let server_oid = row.get::<pg_sys::Oid>(10)?;
    Ok(Some(
        match (
            row.get::<String>(1)?,
            row.get::<pg_sys::Oid>(2)?,
            row.get::<String>(4)?,
            server_oid,
        ) {
            // Its origin's foreign table was dropped: as good as its own.
            _ if row.get::<bool>(9)? == Some(true) && row.get::<String>(8)?.is_none() => {
                Err(registered_server)
            }
            (Some(qualified_name), Some(owner), Some(server), Some(server_oid)) => {
                Ok(RemoteSource {
                    qualified_name,
                    server_oid: server_oid.to_u32(),
                    owner,
                    server,
                    server_options: row.get::<String>(5)?,
                    max_id_seen: row.get::<i64>(6)?,
                    records_seen: row.get::<bool>(7)?.unwrap_or(false),
                    origin_table: row.get::<String>(8)?,
                })
            }
            _ => Err(registered_server),
        },
    ))
}

/// The tables a database keeps its records of central servers in (`None`:
/// not under its SQL; `fence.rs` says what each holds).
pub struct RecordTables {
    /// `id_segment_remote`: each attached tag's central identity.
    pub registry: String,
    /// `id_segment_detached` (0.3.0's SQL): each dropped tag's.
    pub detached: Option<String>,
    /// `id_segment_central` (0.4.0's SQL): where each central identity was
    /// at the latest refill from it.
    pub central: Option<String>,
}

impl RecordTables {
    /// The record tables beside `id_segment` (OID `table_oid`), whose
    /// `id_segment_remote` is `registry`.
    pub fn beside(table_oid: u32, registry: &str) -> Self {
        RecordTables {
            registry: registry.to_string(),
            detached: tag::detached_table_name(table_oid),
            central: tag::central_table_name(table_oid),
        }
    }
}

/// What a refill of a tag through the postgres_fdw server `server_oid`,
/// or its `segment_attach` (`attaching`: the tag), is checked against
/// (`fence::Records`): every row of `id_segment_central`, and the central
/// identities its route keeps — those of the tags attached through that
/// server (by their foreign table's server; by the name they were
/// attached under once their foreign table is gone), of the tags dropped
/// from a server of that name, and, for an attach, of the tag itself
/// wherever it was dropped.
///
/// Read before the remote transaction starts, so that the CAS follows the
/// read of the central position at once (a longer REPEATABLE READ
/// transaction there loses more CAS races). Columns an older SQL lacks
/// read as no record; under the SQL before 0.4.0, which has no
/// `id_segment_central`, the positions its tags kept
/// (`central_wal_lsn`, `central_clock`) stand for its rows.
pub fn recorded_of_server(
    client: &SpiClient<'_>,
    tables: &RecordTables,
    server_oid: pg_sys::Oid,
    attaching: Option<&str>,
) -> Result<Records, pgrx::spi::Error> {
    let registry = &tables.registry;
    // A tag's central identity (a view that answered no OID: 0).
    let identity = |alias: &str| {
        let column = |name: &str| {
            format!("(pg_catalog.to_jsonb({alias}) OPERATOR(pg_catalog.->>) 'central_{name}')::pg_catalog.int8")
        };
        format!(
            "{}, COALESCE({}, 0), COALESCE({}, 0), {}",
            column("system_identifier"),
            column("database_oid"),
            column("table_oid"),
            column("timeline")
        )
    };
    let server_name =
        "(SELECT s.srvname FROM pg_catalog.pg_foreign_server s WHERE s.oid OPERATOR(pg_catalog.=) $1)";
    let mut route_query = format!(
        "SELECT {} FROM {registry} r \
           LEFT JOIN pg_catalog.pg_foreign_table ft ON ft.ftrelid OPERATOR(pg_catalog.=) r.foreign_table \
          WHERE ft.ftserver OPERATOR(pg_catalog.=) $1 \
             OR (ft.ftserver IS NULL AND r.server OPERATOR(pg_catalog.=) {server_name})",
        identity("r")
    );
    let mut jsonb_records = format!("SELECT pg_catalog.to_jsonb(r) AS j FROM {registry} r");
    if let Some(detached) = &tables.detached {
        route_query += &format!(
            " UNION ALL SELECT {} FROM {detached} d \
               WHERE d.server OPERATOR(pg_catalog.=) {server_name} \
                  OR d.biz_tag OPERATOR(pg_catalog.=) $2",
            identity("d")
        );
        jsonb_records += &format!(" UNION ALL SELECT pg_catalog.to_jsonb(d) FROM {detached} d");
    }
    let micros = |clock: &str| {
        format!("(EXTRACT(epoch FROM {clock}) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8")
    };
    let seen_query = match &tables.central {
        Some(central) => format!(
            "SELECT system_identifier, database_oid, table_oid, timeline, \
                    (wal_lsn OPERATOR(pg_catalog.-) '0/0'::pg_catalog.pg_lsn)::pg_catalog.text, {} \
               FROM {central}",
            micros("clock")
        ),
        None => {
            let column = |name: &str| format!("(x.j OPERATOR(pg_catalog.->>) 'central_{name}')");
            format!(
                "SELECT {}::pg_catalog.int8, COALESCE({}::pg_catalog.int8, 0), \
                        COALESCE({}::pg_catalog.int8, 0), {}::pg_catalog.int8, \
                        ({}::pg_catalog.pg_lsn OPERATOR(pg_catalog.-) '0/0'::pg_catalog.pg_lsn)::pg_catalog.text, {} \
                   FROM ({jsonb_records}) x",
                column("system_identifier"),
                column("database_oid"),
                column("table_oid"),
                column("timeline"),
                column("wal_lsn"),
                micros(&format!("{}::pg_catalog.timestamptz", column("clock"))),
            )
        }
    };
    let central = |row: &pgrx::spi::SpiHeapTupleData| -> Result<Option<Central>, pgrx::spi::Error> {
        Ok(match (row.get::<i64>(1)?, row.get::<i64>(4)?) {
            (Some(system_identifier), Some(timeline)) => Some(Central {
                table: CentralTable {
                    system_identifier,
                    database_oid: row.get::<i64>(2)?.unwrap_or(0),
                    table_oid: row.get::<i64>(3)?.unwrap_or(0),
                },
                timeline,
            }),
            _ => None,
        })
    };
    let mut records = Records::default();
    for row in client.select(&seen_query, None, &[])? {
        if let (Some(central), Some(wal_lsn), Some(clock_us)) = (
            central(&row)?,
            row.get::<String>(5)?
                .and_then(|digits| digits.parse::<u64>().ok()),
            row.get::<i64>(6)?,
        ) {
            records.seen.push(Seen {
                central,
                wal_lsn,
                clock_us,
            });
        }
    }
    for row in client.select(&route_query, None, &[server_oid.into(), attaching.into()])? {
        records.route.extend(central(&row)?);
    }
    Ok(records)
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
/// `lane` is the calling worker's (`registry::WorkerKey`): a tag whose
/// source is another lane's comes back as `ServedByAnotherLane` before any
/// remote statement, so a worker never waits on another lane's central
/// server.
///
/// Must run inside a transaction; the caller commits it (synchronously)
/// before it publishes the range. PostgreSQL errors (lock timeout, missing
/// table) propagate as panics for the caller's `PgTryBuilder`.
pub fn take_range(
    tag: &str,
    steps: u64,
    lane: u32,
    bound_table: u32,
    handed_out: Option<i64>,
    central_server: &mut Option<String>,
) -> Result<Result<Granted, RefillProblem>, pgrx::spi::Error> {
    Spi::connect_mut(|client| {
        client.update(
            "SELECT pg_catalog.set_config('synchronous_commit', 'on', true), \
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
            if remote.server_oid != lane {
                return Ok(Err(RefillProblem::ServedByAnotherLane {
                    lane: remote.server_oid,
                }));
            }
            // For the caller's report if anything from here on fails.
            *central_server = Some(remote.server.clone());
            return take_remote_range(client, &table, remote, tag, steps, bound_table, handed_out);
        }
        if lane == WorkerKey::CITUS {
            return take_from_citus_coordinator(client, &table, tag, steps, handed_out);
        }
        if lane != WorkerKey::LOCAL {
            return Ok(Err(RefillProblem::ServedByAnotherLane {
                lane: WorkerKey::LOCAL,
            }));
        }
        if let Some(subscription) = replication::subscription_writing(client, table.oid)? {
            return Ok(Err(RefillProblem::RowReplicated { subscription }));
        }
        let schema = quote_identifier(&table_schema(table.oid).unwrap_or_default());
        let target = citus_catch_up::Target {
            schema: &schema,
            qualified_name: &table.qualified_name,
            owner: table.owner,
        };
        if let Err(unanswered) = citus_catch_up::before_cas(client, &target)? {
            return Ok(Err(RefillProblem::CitusCatchUpUnanswered {
                nodes: unanswered.0,
            }));
        }
        let handed_out = handed_out.filter(|_| bound_table == 0 || bound_table == table.oid);
        let taken = as_owner(table.owner, || cas(client, &table, tag, steps, handed_out))?;
        if matches!(taken, Err(RefillProblem::NoRow)) && citus_source::serves_missing_tags() {
            // A Citus worker: the tag is the coordinator's.
            return Ok(Err(RefillProblem::ServedByAnotherLane {
                lane: WorkerKey::CITUS,
            }));
        }
        Ok(taken)
    })
}

/// `segment_citus_catch_up()`'s work, in the caller's transaction, as
/// the caller (who reads every worker and distributed table): the rows
/// raised, or the workers that did not answer (nothing changed).
pub fn citus_catch_up_now(
) -> Result<Result<Vec<citus_catch_up::Raised>, citus_catch_up::Unanswered>, pgrx::spi::Error> {
    Spi::connect_mut(|client| {
        let Some(table) = find_table(client)? else {
            return Ok(Ok(Vec::new()));
        };
        let schema = quote_identifier(&table_schema(table.oid).unwrap_or_default());
        let target = citus_catch_up::Target {
            schema: &schema,
            qualified_name: &table.qualified_name,
            owner: table.owner,
        };
        citus_catch_up::run(client, &target, citus_catch_up::Rerun::Yes)
    })
}

/// A Citus worker's refill of a tag with no row here, from the coordinator
/// (`citus_source.rs`), as the local table's owner; a tag that got a row
/// here meanwhile goes back to the local lane.
fn take_from_citus_coordinator(
    client: &mut SpiClient<'_>,
    table: &Table,
    tag: &str,
    steps: u64,
    handed_out: Option<i64>,
) -> Result<Result<Granted, RefillProblem>, pgrx::spi::Error> {
    let has_row = !client
        .select(
            &format!(
                "SELECT FROM {} WHERE biz_tag OPERATOR(pg_catalog.=) $1",
                table.qualified_name
            ),
            Some(1),
            &[tag.into()],
        )?
        .is_empty();
    if has_row {
        return Ok(Err(RefillProblem::ServedByAnotherLane {
            lane: WorkerKey::LOCAL,
        }));
    }
    let schema = quote_identifier(&table_schema(table.oid).unwrap_or_default());
    let range = as_owner(table.owner, || {
        citus_source::take(client, &schema, tag, steps, handed_out)
    })?;
    Ok(Ok(Granted {
        first: range.first,
        len: range.len,
        asked: range.asked,
        step: range.step,
        table_oid: 0,
        cas_conflicts: range.cas_conflicts,
        remote: true,
        row_version: None,
    }))
}

/// A remote tag's refill: the CAS on the central row through its foreign
/// table, under the central session's settings the server pins
/// (`remote_session.rs`), refused when the row is below what this server
/// already took from it; then the new mark in `id_segment_remote`, in the
/// local transaction that commits right after the remote one.
fn take_remote_range(
    client: &mut SpiClient<'_>,
    table: &Table,
    remote: RemoteSource,
    tag: &str,
    steps: u64,
    bound_table: u32,
    handed_out: Option<i64>,
) -> Result<Result<Granted, RefillProblem>, pgrx::spi::Error> {
    if let Some(problem) = remote_session::problem(remote.server_options.as_deref()) {
        return Ok(Err(RefillProblem::RemoteSessionUnsafe {
            server: remote.server,
            problem,
            options: remote.server_options,
        }));
    }
    client.update(
        "SELECT pg_catalog.set_config('statement_timeout', $1, true)",
        None,
        &[format!("{}ms", crate::gucs::REMOTE_TIMEOUT_MS.get()).into()],
    )?;
    let source = Table {
        qualified_name: remote.qualified_name.clone(),
        remote_registry: None,
        oid: table.oid,
        owner: remote.owner,
    };
    let records = RecordTables::beside(
        table.oid,
        table.remote_registry.as_deref().unwrap_or_default(),
    );
    let position = match &remote.origin_table {
        None => None,
        Some(origin) => {
            let recorded = recorded_of_server(client, &records, remote.server_oid.into(), None)?;
            let report = as_owner(remote.owner, || {
                let view = format!("id_segment_origin (read by foreign table {origin})");
                read_origin(client, origin, &remote.server, &view)
            })?;
            if let Some(moved) = refusal(&recorded, &report.now, report.accepted) {
                return Ok(Err(RefillProblem::CentralMoved {
                    server: remote.server,
                    moved,
                }));
            }
            Some(report)
        }
    };
    let handed_out = handed_out.filter(|_| bound_table == 0 || bound_table == table.oid);
    let floor = handed_out.max(remote.max_id_seen);
    let granted = as_owner(remote.owner, || cas(client, &source, tag, steps, floor))?;
    let granted = match granted {
        Ok(granted) => granted,
        Err(RefillProblem::NoRow) => {
            return Ok(Err(RefillProblem::NoRemoteRow {
                foreign_table: remote.qualified_name,
                max_id_seen: floor,
                step: None,
            }))
        }
        Err(RefillProblem::MaxIdBehind { max_id, handed_out }) => {
            return Ok(Err(RefillProblem::CentralWentBack {
                server: remote.server,
                foreign_table: remote.qualified_name,
                max_id,
                seen: handed_out,
            }))
        }
        Err(other) => return Ok(Err(other)),
    };
    if remote.records_seen {
        // Extension objects are owned by the worker's own user; the row
        // commits with the local transaction, after the remote commit.
        let registry = table.remote_registry.as_deref().unwrap_or_default();
        client.update(
            &format!(
                "UPDATE {registry} SET max_id_seen = GREATEST(max_id_seen, $2) \
                  WHERE biz_tag OPERATOR(pg_catalog.=) $1"
            ),
            None,
            &[tag.into(), (granted.first - 1 + granted.len as i64).into()],
        )?;
        if let Some(report) = position {
            record_position(client, &records, tag, &report)?;
        }
    }
    // The central row is locked by this refill until the local commit.
    failpoint("worker-remote-before-commit");
    Ok(Ok(Granted {
        remote: true,
        row_version: None,
        ..granted
    }))
}

/// What a central server's `id_segment_origin` reports.
pub struct OriginReport {
    /// Where it is now, and its clock.
    pub now: Seen,
    /// Its last `segment_central_accept()`, if any.
    pub accepted: Option<Acceptance>,
}

/// `read_position`, with a central server that has no `id_segment_origin`
/// (pg_idgen older than 0.3.0 there, or an `id_segment` made by hand)
/// reported as such: `NoCentralOrigin` naming `view`, instead of the
/// remote's "relation does not exist".
pub fn read_origin(
    client: &SpiClient<'_>,
    origin: &str,
    server: &str,
    view: &str,
) -> Result<OriginReport, pgrx::spi::Error> {
    PgTryBuilder::new(|| read_position(client, origin))
        .catch_others(|caught| match &caught {
            // No view, or one made before it showed the database and table.
            CaughtError::PostgresError(report)
                if matches!(
                    report.sql_error_code(),
                    PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE
                        | PgSqlErrorCode::ERRCODE_UNDEFINED_COLUMN
                ) =>
            {
                IdgenError::NoCentralOrigin {
                    server: server.into(),
                    view: view.into(),
                }
                .raise()
            }
            _ => caught.rethrow(),
        })
        .execute()
}

/// Where the central server is now, read through `origin` (its
/// `id_segment_origin`), in the refill's remote transaction.
fn read_position(client: &SpiClient<'_>, origin: &str) -> Result<OriginReport, pgrx::spi::Error> {
    let rows = client.select(
        &format!(
            "SELECT system_identifier, database_oid, table_oid, timeline, \
                    (wal_lsn OPERATOR(pg_catalog.-) '0/0'::pg_catalog.pg_lsn)::pg_catalog.text, \
                    (EXTRACT(epoch FROM clock) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8, \
                    (EXTRACT(epoch FROM accepted_at) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8, \
                    accepted_system_identifier, accepted_timeline \
               FROM {origin}"
        ),
        Some(1),
        &[],
    )?;
    let row = rows.first();
    // A view that answers nothing or NULLs is no position: 0/0 on timeline
    // 0 of system 0 differs from any a server recorded.
    let number = |n: usize| row.get::<i64>(n).ok().flatten();
    Ok(OriginReport {
        now: Seen {
            central: Central {
                table: CentralTable {
                    system_identifier: number(1).unwrap_or(0),
                    database_oid: number(2).unwrap_or(0),
                    table_oid: number(3).unwrap_or(0),
                },
                timeline: number(4).unwrap_or(0),
            },
            wal_lsn: row
                .get::<String>(5)
                .ok()
                .flatten()
                .and_then(|digits| digits.parse::<u64>().ok())
                .unwrap_or(0),
            clock_us: number(6).unwrap_or(0),
        },
        accepted: match (number(7), number(8), number(9)) {
            (Some(at_us), Some(system_identifier), Some(timeline)) => Some(Acceptance {
                at_us,
                system_identifier,
                timeline,
            }),
            _ => None,
        },
    })
}

/// Records `report` as where the central server was at `tag`'s refill (or
/// attach): as its identity's row of `id_segment_central`, and as the
/// identity `tag` last refilled from, in its row of `id_segment_remote`.
/// The row is written unless another transaction holds it (a refill
/// through another server, or a `segment_attach` not committed yet, that
/// writes it too): a refill never waits for it, as it holds the central
/// row meanwhile, and the other one's record is as recent as this one's,
/// or nearly. Nothing is recorded under the SQL before 0.4.0 (its records
/// count as they are until the update carries them over).
pub fn record_position(
    client: &mut SpiClient<'_>,
    tables: &RecordTables,
    tag: &str,
    report: &OriginReport,
) -> Result<(), pgrx::spi::Error> {
    let Some(central) = &tables.central else {
        return Ok(());
    };
    let now = &report.now;
    // $1 to $4: the identity; then what a statement adds to it.
    let identity = |more: Vec<DatumWithOid<'static>>| {
        let table = now.central.table;
        let mut arguments: Vec<DatumWithOid<'static>> = vec![
            table.system_identifier.into(),
            table.database_oid.into(),
            table.table_oid.into(),
            now.central.timeline.into(),
        ];
        arguments.extend(more);
        arguments
    };
    let this_row = "system_identifier OPERATOR(pg_catalog.=) $1 \
                    AND database_oid OPERATOR(pg_catalog.=) $2 \
                    AND table_oid OPERATOR(pg_catalog.=) $3 AND timeline OPERATOR(pg_catalog.=) $4";
    let wal_lsn = "'0/0'::pg_catalog.pg_lsn OPERATOR(pg_catalog.+) $5::pg_catalog.numeric";
    let clock = "pg_catalog.to_timestamp($6::pg_catalog.float8 OPERATOR(pg_catalog./) 1000000)";
    let position = || vec![now.wal_lsn.to_string().into(), now.clock_us.into()];
    let mine = client.update(
        &format!("SELECT FROM {central} WHERE {this_row} FOR UPDATE SKIP LOCKED"),
        None,
        &identity(vec![]),
    )?;
    if mine.is_empty() {
        // None yet, or held by another transaction (then nothing).
        client.update(
            &format!(
                "INSERT INTO {central} (system_identifier, database_oid, table_oid, timeline, wal_lsn, clock) \
                 SELECT $1, $2, $3, $4, {wal_lsn}, {clock} \
                  WHERE NOT EXISTS (SELECT FROM {central} WHERE {this_row}) \
                 ON CONFLICT DO NOTHING"
            ),
            None,
            &identity(position()),
        )?;
    } else {
        client.update(
            &format!("UPDATE {central} SET wal_lsn = {wal_lsn}, clock = {clock} WHERE {this_row}"),
            None,
            &identity(position()),
        )?;
    }
    client.update(
        &format!(
            "UPDATE {} SET central_system_identifier = $1, central_database_oid = $2, \
                    central_table_oid = $3, central_timeline = $4 \
              WHERE biz_tag OPERATOR(pg_catalog.=) $5",
            tables.registry
        ),
        None,
        &identity(vec![tag.into()]),
    )?;
    Ok(())
}

/// At a clean stop: gives the untaken top of a local tag's cached ranges
/// back to its row — `max_id` down to `back.lowest - 1` — if the row is
/// still exactly the row version the slot's last refill wrote (same
/// table, `xmin`, `version` and `max_id`): then no other allocator took a
/// range since, and the IDs above `back.lowest - 1` were never handed out
/// by anyone. `xmin` tells a row dropped and created again (by
/// `segment_drop` and `segment_create`, whose transaction may have handed
/// out IDs and left the same `version` and `max_id`) from the one the
/// refill wrote. Returns whether it did. An attached tag's row is on its
/// central server, and a published `id_segment`'s rows reach its
/// subscribers (`replication.rs`): both are left alone.
///
/// Must run inside a transaction; the caller commits it (synchronously).
/// The guard trigger is told by `pg_idgen.allow_max_id_decrease` for this
/// transaction only; a trigger of the user's that changes the update is
/// refused (the whole give-back rolls back).
pub fn give_back(tag: &str, back: &GiveBack) -> Result<bool, pgrx::spi::Error> {
    Spi::connect_mut(|client| {
        client.update(
            "SELECT pg_catalog.set_config('synchronous_commit', 'on', true), \
                    pg_catalog.set_config('lock_timeout', $1, true), \
                    pg_catalog.set_config('pg_idgen.allow_max_id_decrease', 'on', true)",
            None,
            &[format!("{ROW_LOCK_WAIT_MS}ms").into()],
        )?;
        let Some(table) = find_table(client)? else {
            return Ok(false);
        };
        if table.oid != back.table_oid
            || find_remote(client, &table, tag)?.is_some()
            || replication::is_published(client, table.oid)?
        {
            return Ok(false);
        }
        let wanted = back.lowest - 1;
        let write = format!(
            "UPDATE {} SET max_id = $2, version = version OPERATOR(pg_catalog.+) 1, \
                    updated_at = pg_catalog.now() \
              WHERE biz_tag OPERATOR(pg_catalog.=) $1 AND version OPERATOR(pg_catalog.=) $3 \
                AND max_id OPERATOR(pg_catalog.=) $4 \
                AND xmin::pg_catalog.text OPERATOR(pg_catalog.=) $5 \
          RETURNING max_id",
            table.qualified_name
        );
        let written = as_owner(table.owner, || {
            client
                .update(
                    write.as_str(),
                    None,
                    &[
                        tag.into(),
                        wanted.into(),
                        back.row_version.into(),
                        back.highest.into(),
                        back.row_xmin.to_string().into(),
                    ],
                )
                .map(|rows| rows.first().get::<i64>(1).ok().flatten())
        })?;
        match written {
            None => Ok(false),
            Some(max_id) if max_id == wanted => Ok(true),
            Some(max_id) => IdgenError::GiveBackRewritten {
                tag: tag.to_string(),
                wanted,
                written: max_id,
            }
            .raise(),
        }
    })
}

/// The CAS loop of `take_range`, run as the table's owner. `floor` is the
/// largest ID this server already took from the row: a row below it is
/// refused (`MaxIdBehind`).
fn cas(
    client: &mut SpiClient<'_>,
    table: &Table,
    tag: &str,
    steps: u64,
    floor: Option<i64>,
) -> Result<Result<Granted, RefillProblem>, pgrx::spi::Error> {
    {
        let read = format!(
            "SELECT max_id, step::pg_catalog.int8, version, xmin::pg_catalog.text::pg_catalog.int8 \
               FROM {} WHERE biz_tag OPERATOR(pg_catalog.=) $1",
            table.qualified_name
        );
        let write = format!(
            "UPDATE {} SET max_id = max_id OPERATOR(pg_catalog.+) $2, version = version OPERATOR(pg_catalog.+) 1, \
                    updated_at = pg_catalog.now() \
              WHERE biz_tag OPERATOR(pg_catalog.=) $1 AND version OPERATOR(pg_catalog.=) $3 \
                AND max_id OPERATOR(pg_catalog.=) $4 \
          RETURNING max_id, version, xmin::pg_catalog.text::pg_catalog.int8",
            table.qualified_name
        );
        let mut cas_conflicts = 0;
        // The row as the last attempt read it: read the same again after
        // an UPDATE that matched nothing, and nobody else moved it — a
        // trigger (RETURN NULL), rule or policy skipped the write. The
        // row's xmin tells it from a row deleted and inserted again with
        // the same version and max_id (a drop and create by a session
        // that read max_id), which the UPDATE found gone.
        let mut unmoved: Option<(i64, i64, Option<i64>)> = None;
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
            let xmin = row.get::<i64>(4)?;
            if unmoved == Some((version, max_id, xmin)) {
                return Ok(Err(RefillProblem::WriteNotApplied {
                    read_max_id: max_id,
                    written_max_id: max_id,
                }));
            }
            let plan = match plan_range(max_id, step, steps, floor) {
                Ok(plan) => plan,
                Err(problem) => return Ok(Err(problem)),
            };
            failpoint("refill-before-cas");
            let updated = client.update(
                write.as_str(),
                None,
                &[
                    tag.into(),
                    (plan.len as i64).into(),
                    version.into(),
                    max_id.into(),
                ],
            )?;
            let written = updated.first();
            if let Some(written_max_id) = written.get::<i64>(1).ok().flatten() {
                let row_version = match (
                    written.get::<i64>(2).ok().flatten(),
                    written.get::<i64>(3).ok().flatten(),
                ) {
                    (Some(version), Some(xmin)) => u32::try_from(xmin).ok().map(|x| (version, x)),
                    _ => None,
                };
                let (first, len) = match granted_range(&plan, written_max_id) {
                    Ok(range) => range,
                    Err(problem) => return Ok(Err(problem)),
                };
                return Ok(Ok(Granted {
                    first,
                    len,
                    asked: plan.len,
                    step,
                    table_oid: table.oid,
                    cas_conflicts,
                    remote: false,
                    row_version,
                }));
            }
            unmoved = Some((version, max_id, xmin));
            cas_conflicts += 1;
        }
        Ok(Err(RefillProblem::CasContention {
            attempts: cas_conflicts,
        }))
    }
}
