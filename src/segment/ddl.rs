//! A tag's DDL: `segment_create`, `segment_drop`, `segment_setval` and
//! `segment_attach`.
//!
//! A tag has one source of ranges: a row in the local `id_segment`
//! (`segment_create`), or a central server's `id_segment` reached through
//! postgres_fdw (`segment_attach`, registered in `id_segment_remote`).
//! `segment_create` and `segment_attach` of one tag serialise on the tag's
//! lock (`tag::lock_tag`) and check the other table with the latest
//! snapshot, so a tag never gets both. `segment_drop` removes either, and
//! the tag's cached ranges with it. On the Citus coordinator,
//! `segment_create` starts a tag above every worker's mark of a tag of
//! that name, or refuses (`citus_catch_up.rs`).
//!
//! `segment_setval` moves a local tag's next ID above a value, for every
//! session at once: it locks the row (waiting for a refill in flight),
//! writes the new `max_id`, then frees the tag's slot, so that no range
//! cached or still being published before survives (a freed slot's
//! generation refuses a late publish). Transactional like the UPDATE it
//! is: rolled back, it leaves `max_id` as it was (the cached IDs it gave
//! up are a gap); committed, it is as durable as that commit.
//!
//! `segment_attach` checks the server (postgres_fdw, with a
//! `connect_timeout`, and `options` that pin the central session:
//! `remote_session.rs`), creates the foreign table
//! `"<schema>.<table>@<server>"` in the extension's schema if it is not
//! there (owned by the caller, whose user mapping the refill worker then
//! uses), reads the tag's central row through it, and registers the tag
//! with that row's `max_id` as the first `max_id_seen` (the floor below
//! which the central row means the central server went back).
//! The refill itself is the distributor's (`distributor.rs`, "Sources").

use super::citus_catch_up;
use super::citus_source;
use super::created_here;
use super::default_check::tag_uses;
use super::distributor::{
    read_origin, record_position, recorded_of_server, OriginReport, RecordTables,
};
use super::fence::refusal;
use super::registry::registry_or_raise;
use super::sql::{check_writable, give_up_slot};
use super::tag::{self, check_tag, current_table_oid, table_name};
use crate::catalog::{as_owner, quote_identifier, quote_literal, table_schema};
use crate::errors::{required, IdgenError};
use crate::remote_session;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// `segment_create(tag, start => 1, step => 1000, force => false)`: adds
/// the tag's row to `id_segment`, so that its first ID is `start`. On a
/// Citus worker it is refused unless forced: there every node draws a tag
/// from the coordinator's row (`citus_source.rs`), and a row of the
/// worker's own would start a second ID space.
///
/// Its C symbol is `create_tag_wrapper`: `segment_create_wrapper` is the
/// three-argument form of 0.1.0 – 0.3.0, which a database not yet updated
/// still calls (`segment_create_before_0_4`).
#[pg_extern(volatile, parallel_unsafe, name = "segment_create")]
fn create_tag(
    tag: Option<&str>,
    start: default!(Option<i64>, 1),
    step: default!(Option<i32>, 1000),
    force: default!(Option<bool>, false),
    fcinfo: pg_sys::FunctionCallInfo,
) {
    create(tag, start, step, force, fcinfo);
}

/// The V1 information function of `segment_create_wrapper`.
#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_segment_create_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &super::sql::V1_API
}

/// `segment_create(tag, start, step)` as 0.1.0 – 0.3.0 declared it (C
/// symbol `segment_create_wrapper`): between installing this library and
/// `ALTER EXTENSION pg_idgen UPDATE`, a database still has that
/// declaration, and its three arguments would fail `create_tag`'s
/// unboxing of a fourth (XX000). It creates the tag, unforced.
#[pg_guard]
#[unsafe(export_name = "segment_create_wrapper")]
pub unsafe extern "C-unwind" fn segment_create_before_0_4(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the function manager passes a valid fcinfo of the old
    // declaration, (text, bigint, int), each argument possibly NULL.
    let (tag, start, step) = unsafe {
        (
            pgrx::fcinfo::pg_getarg::<&str>(fcinfo, 0),
            pgrx::fcinfo::pg_getarg::<i64>(fcinfo, 1),
            pgrx::fcinfo::pg_getarg::<i32>(fcinfo, 2),
        )
    };
    create(tag, start, step, Some(false), fcinfo);
    pg_sys::Datum::from(0)
}

fn create(
    tag: Option<&str>,
    start: Option<i64>,
    step: Option<i32>,
    force: Option<bool>,
    fcinfo: pg_sys::FunctionCallInfo,
) {
    registry_or_raise();
    check_writable("segment_create()");
    let tag = required(tag, "segment tag");
    let start = required(start, "start");
    let step = required(step, "step");
    let force = required(force, "force");
    check_tag(tag.as_bytes());
    if !force && citus_source::serves_missing_tags() {
        IdgenError::CitusCreateOnWorker {
            tag: tag.to_string(),
        }
        .raise();
    }
    if start < 1 {
        IdgenError::BadStart { start }.raise();
    }
    if step <= 0 {
        IdgenError::BadStep {
            step: i64::from(step),
        }
        .raise();
    }
    let table_oid = current_table_oid(fcinfo);
    let insert = format!(
        "INSERT INTO {} (biz_tag, max_id, step, version, updated_at) \
         VALUES ($1, $2, $3, 0, pg_catalog.now()) ON CONFLICT (biz_tag) DO NOTHING",
        table_name(table_oid)
    );
    // A tag attached to a central server has its one source there
    // (checked under the tag's lock: see `tag::lock_tag`).
    tag::lock_tag(table_oid, tag);
    if tag::tag_exists_latest(table_oid, tag.as_bytes(), true) {
        IdgenError::TagExists {
            tag: tag.to_string(),
        }
        .raise();
    }
    // On the Citus coordinator: above what any worker took of a tag of
    // this name (`citus_catch_up.rs`).
    if let Some(floor) = citus_catch_up::workers_floor_of(table_oid, tag) {
        if floor >= start {
            IdgenError::CitusCreateBelowWorkers {
                tag: tag.to_string(),
                start,
                floor,
                step,
            }
            .raise();
        }
    }
    let inserted = Spi::connect_mut(|client| {
        client
            .update(
                insert.as_str(),
                None,
                &[tag.into(), (start - 1).into(), step.into()],
            )
            .map(|t| t.len())
    })
    .unwrap_or_else(|e| {
        IdgenError::Internal {
            context: "segment_create",
            message: e.to_string(),
        }
        .raise()
    });
    if inserted == 0 {
        IdgenError::TagExists {
            tag: tag.to_string(),
        }
        .raise();
    }
    // This transaction hands out the tag's IDs until it commits.
    created_here::created(tag.as_bytes(), table_oid, start);
}

/// `segment_drop(tag)`: removes the tag's row and drops its cached ranges.
/// Its IDs handed out so far stay handed out; a tag created again later
/// starts wherever `segment_create` says.
///
/// Refused while a column default or generated column calls
/// `segment_nextval` with the tag (as `DROP SEQUENCE` refuses while a
/// default uses the sequence), unless `force`.
///
/// Hand-written C-level glue, declared in `sql/bootstrap.sql` as
/// `segment_drop(tag text, force boolean DEFAULT false)`: the same symbol
/// serves 0.1.0's and 0.2.0's declaration, `segment_drop(tag text)`,
/// which a database not yet updated still calls with one argument (pgrx's
/// unboxing of a second failed it with XX000).
#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_segment_drop_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &super::sql::V1_API
}

/// `segment_drop(tag, force => false)`: see `drop_tag`.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn segment_drop_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the function manager passes a valid fcinfo of one of the
    // two declarations, (text) or (text, boolean), each argument possibly
    // NULL.
    let (tag, force) = unsafe {
        (
            pgrx::fcinfo::pg_getarg::<&str>(fcinfo, 0),
            if (*fcinfo).nargs >= 2 {
                pgrx::fcinfo::pg_getarg::<bool>(fcinfo, 1)
            } else {
                Some(false)
            },
        )
    };
    drop_tag(tag, force, fcinfo);
    pg_sys::Datum::from(0)
}

fn drop_tag(tag: Option<&str>, force: Option<bool>, fcinfo: pg_sys::FunctionCallInfo) {
    let registry = registry_or_raise();
    check_writable("segment_drop()");
    let tag = required(tag, "segment tag");
    let force = required(force, "force");
    check_tag(tag.as_bytes());
    let table_oid = current_table_oid(fcinfo);
    if !force {
        let mut uses = tag_uses(table_oid, None)
            .into_iter()
            .filter(|u| u.tag == tag);
        if let Some(first) = uses.next() {
            IdgenError::TagInUse {
                tag: tag.to_string(),
                user: first.user.describe(),
                undo: first.user.undo(),
                others: uses.count(),
            }
            .raise();
        }
    }
    let delete = format!(
        "DELETE FROM {} WHERE biz_tag OPERATOR(pg_catalog.=) $1",
        table_name(table_oid)
    );
    // An attached tag: its registration goes, the central row stays. Its
    // record stays in id_segment_detached (a row per tag and server): its
    // mark, for a later attach, and the central identity it last refilled
    // from, which fences a later attach of it and the refills through a
    // server of that name (`fence.rs`) — the attached row as it was, in
    // whatever columns this SQL has. (Under 0.2.0's SQL there is neither
    // the mark nor the table.)
    let detach = tag::remote_table_name(table_oid).map(|remote| {
        format!(
            "DELETE FROM {remote} AS r WHERE r.biz_tag OPERATOR(pg_catalog.=) $1 \
             RETURNING r.server::pg_catalog.text, \
                       (pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.->>) 'max_id_seen')::pg_catalog.int8, \
                       pg_catalog.to_jsonb(r)::pg_catalog.text"
        )
    });
    let keep_mark = tag::detached_table_name(table_oid).map(|detached| {
        (
            format!(
                "DELETE FROM {detached} WHERE biz_tag OPERATOR(pg_catalog.=) $1 \
                   AND server OPERATOR(pg_catalog.=) $2 RETURNING max_id_seen"
            ),
            format!(
                "INSERT INTO {detached} SELECT * FROM pg_catalog.jsonb_populate_record(NULL::{detached}, \
                     $1::pg_catalog.jsonb OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('max_id_seen', $2, \
                                                                            'detached_at', pg_catalog.now()))"
            ),
        )
    });
    let deleted = Spi::connect_mut(|client| {
        let mut deleted = client
            .update(delete.as_str(), None, &[tag.into()])
            .map(|t| t.len())?;
        // As the extension's owner: the grants that let a role drop a tag
        // are on id_segment, not on the attachment tables.
        if let Some(detach) = &detach {
            deleted += as_owner(
                tag::table_owner(table_oid),
                || -> Result<usize, pgrx::spi::Error> {
                    let detached = client.update(detach, None, &[tag.into()])?;
                    let count = detached.len();
                    if let (Some((forget, keep)), false) = (&keep_mark, detached.is_empty()) {
                        let row = detached.first();
                        if let (Some(server), Some(mark), Some(record)) = (
                            row.get::<String>(1)?,
                            row.get::<i64>(2)?,
                            row.get::<String>(3)?,
                        ) {
                            // Dropped from that server before: the larger mark.
                            let before =
                                client.update(forget, None, &[tag.into(), server.into()])?;
                            let mark = mark
                                .max(before.first().get::<i64>(1).ok().flatten().unwrap_or(mark));
                            client.update(keep, None, &[record.into(), mark.into()])?;
                        }
                    }
                    Ok(count)
                },
            )?;
        }
        Ok::<_, pgrx::spi::Error>(deleted)
    })
    .unwrap_or_else(|e| {
        IdgenError::Internal {
            context: "segment_drop",
            message: e.to_string(),
        }
        .raise()
    });
    // A tag whose row is already gone may still hold a slot: free it too.
    let had_slot = give_up_slot(registry, tag.as_bytes(), None);
    created_here::dropped(tag.as_bytes(), table_oid);
    if deleted == 0 && !had_slot {
        IdgenError::UnknownTag {
            tag: tag.to_string(),
        }
        .raise();
    }
}

/// `segment_setval(tag, value)`: the next ID of `tag` is above `value`, in
/// every session at once (the cached ranges are given up, as `setval`
/// gives up a sequence's cache); returns `value`, which becomes this
/// session's `segment_currval`. Below IDs the table says were handed out
/// (`max_id`) it is refused unless a superuser turned
/// `pg_idgen.allow_max_id_decrease` on. Local tags only.
#[pg_extern(volatile, parallel_unsafe)]
fn segment_setval(tag: Option<&str>, value: Option<i64>, fcinfo: pg_sys::FunctionCallInfo) -> i64 {
    let registry = registry_or_raise();
    check_writable("segment_setval()");
    let (tag, value) = (required(tag, "segment tag"), required(value, "value"));
    check_tag(tag.as_bytes());
    if value < 0 {
        IdgenError::BadSetvalValue { value }.raise();
    }
    let table_oid = current_table_oid(fcinfo);
    if created_here::is_created_here(tag.as_bytes(), table_oid) {
        IdgenError::SetvalOfNewTag {
            tag: tag.to_string(),
        }
        .raise();
    }
    let table = table_name(table_oid);
    tag::lock_tag(table_oid, tag);
    let result = Spi::connect_mut(|client| -> Result<(), IdgenError> {
        if let Some(remote) = tag::remote_table_name(table_oid) {
            // Read as the extension's owner: the grants that let a role
            // set a tag are on id_segment, not on id_segment_remote.
            let attached = as_owner(tag::table_owner(table_oid), || {
                client.select(
                    &format!(
                        "SELECT server::pg_catalog.text FROM {remote} WHERE biz_tag OPERATOR(pg_catalog.=) $1"
                    ),
                    Some(1),
                    &[tag.into()],
                )
            })
            .map_err(spi_failed("segment_setval: attached"))?;
            if let Some(server) = attached.first().get::<String>(1).ok().flatten() {
                return Err(IdgenError::SetvalOfAttachedTag {
                    tag: tag.into(),
                    server,
                });
            }
        }
        // The row lock waits for a refill in flight to commit or roll back.
        let rows = client
            .update(
                &format!(
                    "SELECT max_id FROM {table} WHERE biz_tag OPERATOR(pg_catalog.=) $1 FOR UPDATE"
                ),
                Some(1),
                &[tag.into()],
            )
            .map_err(spi_failed("segment_setval: read"))?;
        let Some(max_id) = rows.first().get::<i64>(1).ok().flatten() else {
            return Err(IdgenError::UnknownTag { tag: tag.into() });
        };
        if value < max_id && !crate::gucs::ALLOW_MAX_ID_DECREASE.get() {
            return Err(IdgenError::MaxIdDecrease {
                tag: tag.into(),
                from: max_id,
                to: value,
            });
        }
        client
            .update(
                &format!(
                    "UPDATE {table} SET max_id = $2, version = version OPERATOR(pg_catalog.+) 1, \
                            updated_at = pg_catalog.now() \
                      WHERE biz_tag OPERATOR(pg_catalog.=) $1"
                ),
                None,
                &[tag.into(), value.into()],
            )
            .map_err(spi_failed("segment_setval: write"))?;
        Ok(())
    });
    if let Err(e) = result {
        e.raise();
    }
    // After the write, with the row locked: a refill that read the row
    // before has committed, and its range, published or not, goes with the
    // slot; the next refill waits for this transaction.
    give_up_slot(registry, tag.as_bytes(), Some(value));
    value
}

fn spi_failed(context: &'static str) -> impl Fn(pgrx::spi::Error) -> IdgenError {
    move |e| IdgenError::Internal {
        context,
        message: e.to_string(),
    }
}

/// Refuses a server that is missing, not postgres_fdw, without a connect
/// timeout, or whose `options` do not pin the central session's settings
/// (`remote_session.rs`).
fn check_server(client: &SpiClient<'_>, server: &str) -> Result<(), IdgenError> {
    let rows = client
        .select(
            &format!(
                "SELECT w.fdwname::pg_catalog.text, \
                        coalesce(pg_catalog.array_to_string(s.srvoptions, ','), ''), {} \
                   FROM pg_catalog.pg_foreign_server s \
                   JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid OPERATOR(pg_catalog.=) s.srvfdw \
                  WHERE s.srvname OPERATOR(pg_catalog.=) $1",
                remote_session::SERVER_OPTIONS_SQL
            ),
            Some(1),
            &[server.into()],
        )
        .map_err(spi_failed("segment_attach: server"))?;
    if rows.is_empty() {
        return Err(IdgenError::NoSuchServer {
            server: server.into(),
        });
    }
    let row = rows.first();
    let wrapper: String = row.get(1).ok().flatten().unwrap_or_default();
    let options: String = row.get(2).ok().flatten().unwrap_or_default();
    if wrapper != "postgres_fdw" {
        return Err(IdgenError::NotPostgresFdw {
            server: server.into(),
            wrapper,
        });
    }
    if !options
        .split(',')
        .any(|o| o.starts_with("connect_timeout="))
    {
        return Err(IdgenError::NoConnectTimeout {
            server: server.into(),
        });
    }
    let session_options: Option<String> = row.get(3).ok().flatten();
    if let Some(problem) = remote_session::problem(session_options.as_deref()) {
        return Err(IdgenError::RemoteSessionUnsafe {
            server: server.into(),
            problem,
            options: session_options,
        });
    }
    Ok(())
}

/// `segment_attach(tag, server, remote_schema => 'public', remote_table =>
/// 'id_segment')`: from now on the tag's ranges come from that table on
/// `server`, a postgres_fdw server.
#[pg_extern(volatile, parallel_unsafe)]
fn segment_attach(
    tag: Option<&str>,
    server: Option<&str>,
    remote_schema: default!(Option<&str>, "'public'"),
    remote_table: default!(Option<&str>, "'id_segment'"),
    fcinfo: pg_sys::FunctionCallInfo,
) {
    registry_or_raise();
    check_writable("segment_attach()");
    let tag = required(tag, "segment tag");
    let server = required(server, "server");
    let remote_schema = required(remote_schema, "remote_schema");
    let remote_table = required(remote_table, "remote_table");
    check_tag(tag.as_bytes());
    let table_oid = current_table_oid(fcinfo);
    let (Some(schema), Some(registry_table)) =
        (table_schema(table_oid), tag::remote_table_name(table_oid))
    else {
        IdgenError::ExtensionDropped.raise()
    };
    // One source per tag: checked under the tag's lock, which
    // `segment_create` takes too, against committed rows.
    tag::lock_tag(table_oid, tag);
    if tag::tag_exists_latest(table_oid, tag.as_bytes(), false) {
        IdgenError::TagExists { tag: tag.into() }.raise();
    }
    let result = Spi::connect_mut(|client| -> Result<(), IdgenError> {
        check_server(client, server)?;
        let qualified = foreign_table(
            client,
            &schema,
            server,
            (remote_schema, remote_table),
            ROW_COLUMNS,
        )?;
        // Where the central server is: recorded at every refill, and a
        // refill is refused once it moved back (`fence.rs`). The central
        // server must have it (pg_idgen 0.3.0, or the view made by hand);
        // reading it proves the connection and the user mapping work.
        let origin = foreign_table(
            client,
            &schema,
            server,
            (remote_schema, ORIGIN_VIEW),
            ORIGIN_COLUMNS,
        )?;
        let view = format!("{remote_schema}.{ORIGIN_VIEW}");
        let position = read_origin(client, &origin, server, &view)
            .map_err(spi_failed("segment_attach: central position"))?;
        let records = RecordTables::beside(table_oid, &registry_table);
        check_fence_at_attach(client, &records, (tag, server), &position)?;
        let central_max_id = lock_central_row(client, &qualified, tag, server)?;
        let records_seen = registers_records(client, &registry_table)?;
        let detached_mark = take_detached_mark(client, table_oid, tag, server, central_max_id)?;
        let central_max_id = central_max_id.max(detached_mark);
        let (columns, values) = if records_seen {
            (
                ", max_id_seen, origin_table",
                ", $4, $5::pg_catalog.regclass",
            )
        } else {
            ("", "")
        };
        let inserted = client
            .update(
                &format!(
                    "INSERT INTO {registry_table} (biz_tag, server, foreign_table{columns}) \
                     SELECT $1, $2, $3::pg_catalog.regclass{values} \
                     ON CONFLICT (biz_tag) DO NOTHING"
                ),
                None,
                &[
                    tag.into(),
                    server.into(),
                    qualified.as_str().into(),
                    central_max_id.into(),
                    origin.as_str().into(),
                ],
            )
            .map_err(spi_failed("segment_attach: register"))?;
        if inserted.is_empty() {
            return Err(IdgenError::TagExists { tag: tag.into() });
        }
        if records_seen {
            record_position(client, &records, tag, &position)
                .map_err(spi_failed("segment_attach: central position"))?;
        }
        Ok(())
    });
    if let Err(e) = result {
        e.raise();
    }
}

/// `segment_attach`: the attach is not past a fence (`fence.rs`): the
/// records of this database, with the route of this server and of this
/// tag wherever it was dropped (a drop and an attach would otherwise start
/// the tag afresh from a central server that lost ranges).
fn check_fence_at_attach(
    client: &SpiClient<'_>,
    records: &RecordTables,
    (tag, server): (&str, &str),
    position: &OriginReport,
) -> Result<(), IdgenError> {
    // Not past a fence (`fence.rs`): the records of this database, with
    // the route of this server and of this tag wherever it was dropped
    // (a drop and an attach would otherwise start the tag afresh from a
    // central server that lost ranges).
    let server_oid = client
        .select(
            "SELECT oid FROM pg_catalog.pg_foreign_server WHERE srvname OPERATOR(pg_catalog.=) $1",
            Some(1),
            &[server.into()],
        )
        .and_then(|rows| rows.first().get::<pg_sys::Oid>(1))
        .map_err(spi_failed("segment_attach: server"))?
        .unwrap_or(pg_sys::InvalidOid);
    let recorded = recorded_of_server(client, records, server_oid, Some(tag))
        .map_err(spi_failed("segment_attach: central position"))?;
    if let Some(moved) = refusal(&recorded, &position.now, position.accepted) {
        return Err(IdgenError::AttachCentralMoved {
            tag: tag.into(),
            server: server.into(),
            moved,
        });
    }
    Ok(())
}

/// `segment_attach`: the central row's `max_id`, with its row lock taken
/// there (see inside); `RemoteTagMissing` without a row.
fn lock_central_row(
    client: &mut SpiClient<'_>,
    qualified: &str,
    tag: &str,
    server: &str,
) -> Result<Option<i64>, IdgenError> {
    // The central row must be there, and the mapped user must be able
    // to update it: FOR UPDATE takes the row lock on the central server,
    // which needs its UPDATE privilege (a user that can only read fails
    // here with 42501 from the central server, not at the first refill).
    // This also proves the connection and the user mapping work.
    let central = client
        .update(
            &format!(
                "SELECT max_id FROM {qualified} WHERE biz_tag OPERATOR(pg_catalog.=) $1 FOR UPDATE"
            ),
            Some(1),
            &[tag.into()],
        )
        .map_err(spi_failed("segment_attach: central row"))?;
    if central.is_empty() {
        return Err(IdgenError::RemoteTagMissing {
            tag: tag.into(),
            server: server.into(),
        });
    }
    // The central row's max_id now is the first floor: the row never
    // goes below it unless the central server went back. (Under
    // 0.2.0's SQL, before ALTER EXTENSION UPDATE, there is no column.)
    let central_max_id: Option<i64> = central.first().get(1).ok().flatten();
    Ok(central_max_id)
}

/// `segment_attach`: whether this database's `id_segment_remote` keeps
/// the records (under 0.2.0's SQL neither `max_id_seen` nor
/// `origin_table`; under 0.3.0's and later both).
fn registers_records(client: &SpiClient<'_>, registry_table: &str) -> Result<bool, IdgenError> {
    let records_seen = client
        .select(
            &format!(
                "SELECT FROM pg_catalog.pg_attribute \
                  WHERE attrelid OPERATOR(pg_catalog.=) '{registry_table}'::pg_catalog.regclass \
                    AND attname OPERATOR(pg_catalog.=) ANY ('{{max_id_seen,origin_table}}') \
                    AND NOT attisdropped"
            ),
            None,
            &[],
        )
        .map_err(spi_failed("segment_attach: register"))?
        .len();
    // Under 0.2.0's SQL: neither; under 0.3.0's: both.
    let records_seen = records_seen == 2;
    Ok(records_seen)
}

/// `segment_attach`: the mark a drop of the tag kept here, if any (see
/// inside); refused when the central row is below it.
fn take_detached_mark(
    client: &mut SpiClient<'_>,
    table_oid: u32,
    tag: &str,
    server: &str,
    central_max_id: Option<i64>,
) -> Result<Option<i64>, IdgenError> {
    // Attached here before and dropped: this database has handed out
    // the tag's IDs up to that mark (the largest, through whichever
    // server), whatever the central row says now. The record of this
    // server gives way to the one the new attachment makes; those of
    // other servers stay, to fence those servers' other tags.
    let detached_mark = match tag::detached_table_name(table_oid) {
        None => None,
        Some(detached) => {
            let mark = client
                .select(
                    &format!(
                        "SELECT max(max_id_seen) FROM {detached} \
                          WHERE biz_tag OPERATOR(pg_catalog.=) $1"
                    ),
                    None,
                    &[tag.into()],
                )
                .map_err(spi_failed("segment_attach: earlier mark"))?
                .first()
                .get::<i64>(1)
                .ok()
                .flatten();
            client
                .update(
                    &format!(
                        "DELETE FROM {detached} WHERE biz_tag OPERATOR(pg_catalog.=) $1 \
                           AND server OPERATOR(pg_catalog.=) $2"
                    ),
                    None,
                    &[tag.into(), server.into()],
                )
                .map_err(spi_failed("segment_attach: earlier mark"))?;
            mark
        }
    };
    if let (Some(mark), Some(central)) = (detached_mark, central_max_id) {
        if central < mark {
            return Err(IdgenError::AttachBelowDetachedMark {
                tag: tag.into(),
                server: server.into(),
                max_id: central,
                mark,
            });
        }
    }
    Ok(detached_mark)
}

/// The columns of the foreign table for a central `id_segment`.
const ROW_COLUMNS: &str =
    "biz_tag varchar(64) NOT NULL, max_id bigint NOT NULL, step int NOT NULL, \
                           version bigint NOT NULL, updated_at timestamptz";
/// The central server's view of where it is, and its columns.
const ORIGIN_VIEW: &str = "id_segment_origin";
const ORIGIN_COLUMNS: &str = "system_identifier bigint, timeline bigint, wal_lsn pg_lsn, clock timestamptz, \
                              accepted_at timestamptz, accepted_system_identifier bigint, accepted_timeline bigint, \
                              database_oid bigint, table_oid bigint";

/// The foreign table `"<remote schema>.<remote table>@<server>"` in the
/// extension's `schema`: made here, or one made before for the same server
/// and remote table. Returns its qualified name.
fn foreign_table(
    client: &mut SpiClient<'_>,
    schema: &str,
    server: &str,
    (remote_schema, remote_table): (&str, &str),
    columns: &str,
) -> Result<String, IdgenError> {
    let foreign_name = foreign_table_name(remote_schema, remote_table, server);
    let existing = client
        .select(
            "SELECT ft.ftserver OPERATOR(pg_catalog.=) s.oid \
                    AND ft.ftoptions OPERATOR(pg_catalog.@>) ARRAY[$3, $4] \
               FROM pg_catalog.pg_class c \
               JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
               LEFT JOIN pg_catalog.pg_foreign_table ft ON ft.ftrelid OPERATOR(pg_catalog.=) c.oid \
               LEFT JOIN pg_catalog.pg_foreign_server s ON s.srvname OPERATOR(pg_catalog.=) $5 \
              WHERE c.relname OPERATOR(pg_catalog.=) $1 AND n.nspname OPERATOR(pg_catalog.=) $2",
            Some(1),
            &[
                foreign_name.as_str().into(),
                schema.into(),
                format!("schema_name={remote_schema}").into(),
                format!("table_name={remote_table}").into(),
                server.into(),
            ],
        )
        .map_err(spi_failed("segment_attach: foreign table"))?;
    let qualified = format!(
        "{}.{}",
        quote_identifier(schema),
        quote_identifier(&foreign_name)
    );
    if existing.is_empty() {
        client
            .update(
                &format!(
                    "CREATE FOREIGN TABLE {qualified} ({columns}) \
                     SERVER {} OPTIONS (schema_name {}, table_name {})",
                    quote_identifier(server),
                    quote_literal(remote_schema),
                    quote_literal(remote_table)
                ),
                None,
                &[],
            )
            .map_err(spi_failed("segment_attach: CREATE FOREIGN TABLE"))?;
    } else if existing.first().get::<bool>(1).ok().flatten() != Some(true) {
        return Err(IdgenError::ForeignTableTaken {
            name: foreign_name,
            server: server.into(),
        });
    }
    Ok(qualified)
}

/// The foreign table's name, `"<schema>.<table>@<server>"`, cut to fit
/// PostgreSQL's 63 bytes with a hash of the whole that keeps different
/// long names apart.
fn foreign_table_name(remote_schema: &str, remote_table: &str, server: &str) -> String {
    let full = format!("{remote_schema}.{remote_table}@{server}");
    if full.len() <= 63 {
        return full;
    }
    // FNV-1a, 32 bits: stable across builds and versions.
    let hash = full.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("{}~{hash:08x}", crate::errors::truncate_utf8(&full, 54))
}
