//! The only code that reads or writes `id_segment` on behalf of a refill:
//! the seeds' version-CAS protocol, run by the refill worker inside a
//! transaction of its own.
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
//! Backends read the row themselves only on their slow path (`row_state`:
//! does the tag exist, and did the calling transaction write or lock it?)
//! and, for a tag created by their own transaction, raise its `max_id` past
//! the IDs they handed out just before that transaction commits
//! (`raise_max_id`).
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

/// Whether the calling transaction can see `tag`'s row, and whether it has
/// written or locked that row itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowState {
    /// The table itself is gone (the extension was dropped).
    NoTable,
    /// No row visible to the caller (never created, dropped, or created by
    /// a transaction that has not committed).
    Missing,
    /// The row is there and the caller's transaction has not touched it.
    Free,
    /// The caller's transaction inserted, updated, deleted or locked the
    /// row: the refill worker would wait for it to end.
    HeldByCaller,
}

/// Looks `tag`'s row up in table `table_oid` with the caller's snapshot,
/// reading the tuple header for who wrote or locked it. A direct index
/// scan: it needs no privilege on the table (like `nextval()`, which needs
/// none on the sequence's heap), and its lock on the table is released at
/// once, so the caller's transaction keeps no lock on `id_segment`.
///
/// A tag with no row in `id_segment` may be a remote one: its registration
/// in `id_segment_remote` (same schema) answers then.
pub fn row_state(table_oid: u32, tag: &[u8]) -> RowState {
    match row_state_in(table_oid, tag, false) {
        RowState::Missing => match remote_table_oid(table_oid) {
            0 => RowState::Missing,
            remote => match row_state_in(remote, tag, false) {
                RowState::NoTable => RowState::Missing,
                state => state,
            },
        },
        state => state,
    }
}

/// The schema-qualified name of `id_segment_remote` beside table
/// `table_oid`, if it is there.
pub fn remote_table_name(table_oid: u32) -> Option<String> {
    match remote_table_oid(table_oid) {
        0 => None,
        oid => table_name_and_owner(oid).map(|(name, _)| name),
    }
}

/// The OID of `id_segment_remote` beside table `table_oid` (0: none).
fn remote_table_oid(table_oid: u32) -> u32 {
    // SAFETY: syscache look-ups inside the caller's transaction.
    unsafe {
        let namespace = pg_sys::get_rel_namespace(pg_sys::Oid::from(table_oid));
        if namespace == pg_sys::InvalidOid {
            return 0;
        }
        pg_sys::get_relname_relid(c"id_segment_remote".as_ptr(), namespace).to_u32()
    }
}

/// Whether `tag` has a row in `id_segment_remote` (`remote = true`) or in
/// `id_segment` beside table `table_oid`, committed by anyone or written by
/// the calling transaction: read with the latest snapshot, not the
/// transaction's, so that after `lock_tag` the row of a transaction that
/// committed meanwhile counts too, at any isolation level.
pub fn tag_exists_latest(table_oid: u32, tag: &[u8], remote: bool) -> bool {
    let relid = match remote {
        true => remote_table_oid(table_oid),
        false => table_oid,
    };
    relid != 0
        && matches!(
            row_state_in(relid, tag, true),
            RowState::Free | RowState::HeldByCaller
        )
}

/// Serialises `segment_create` and `segment_attach` of one tag in one
/// database until the end of the calling transaction, so that a tag never
/// gets both a local row and a remote source.
pub fn lock_tag(table_oid: u32, tag: &str) {
    let locked = Spi::connect_mut(|client| {
        client.update(
            "SELECT pg_catalog.pg_advisory_xact_lock($1, pg_catalog.hashtext($2))",
            None,
            &[(table_oid as i32).into(), tag.into()],
        )?;
        Ok::<_, pgrx::spi::Error>(())
    });
    if let Err(e) = locked {
        crate::errors::IdgenError::Internal {
            context: "lock_tag",
            message: e.to_string(),
        }
        .raise();
    }
}

/// `row_state` in one table whose first column (and primary key) is the
/// tag, with the caller's snapshot (or the latest one).
fn row_state_in(table_oid: u32, tag: &[u8], latest: bool) -> RowState {
    let tag = std::ffi::CString::new(tag).unwrap_or_default();
    // SAFETY: inside a transaction with an active snapshot (a SQL function
    // call); every open/begin is matched by its close/end below, and an
    // ERROR in between is cleaned up by the transaction's abort.
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let relation = pg_sys::try_table_open(pg_sys::Oid::from(table_oid), lock);
        if relation.is_null() {
            return RowState::NoTable;
        }
        #[cfg(not(feature = "pg18"))]
        let index = pg_sys::RelationGetPrimaryKeyIndex(relation);
        #[cfg(feature = "pg18")]
        let index = pg_sys::RelationGetPrimaryKeyIndex(relation, false);
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(
            &mut key,
            1, // biz_tag
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::Oid::from(pg_sys::F_TEXTEQ),
            pg_sys::Datum::from(pg_sys::cstring_to_text(tag.as_ptr())),
        );
        let snapshot = if latest {
            pg_sys::GetLatestSnapshot()
        } else if pg_sys::ActiveSnapshotSet() {
            pg_sys::GetActiveSnapshot()
        } else {
            pg_sys::GetTransactionSnapshot()
        };
        let scan = pg_sys::systable_beginscan(
            relation,
            index,
            index != pg_sys::InvalidOid,
            snapshot,
            1,
            &mut key,
        );
        let tuple = pg_sys::systable_getnext(scan);
        let state = match tuple.as_ref() {
            None => RowState::Missing,
            Some(tuple) => {
                let header = &*tuple.t_data;
                let xmin = header.t_choice.t_heap.t_xmin;
                let xmax = header.t_choice.t_heap.t_xmax;
                let infomask = u32::from(header.t_infomask);
                let xmax_is_ours = infomask & pg_sys::HEAP_XMAX_INVALID == 0
                    && infomask & pg_sys::HEAP_XMAX_IS_MULTI == 0
                    && pg_sys::TransactionIdIsCurrentTransactionId(xmax);
                if pg_sys::TransactionIdIsCurrentTransactionId(xmin) || xmax_is_ours {
                    RowState::HeldByCaller
                } else {
                    RowState::Free
                }
            }
        };
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(relation, lock);
        state
    }
}

/// Raises `tag`'s `max_id` to at least `high_water` (bumping `version`,
/// so that an allocator's CAS in flight cannot write over it), in the
/// calling transaction as it is about to commit, for a tag under whose name
/// that transaction handed out IDs itself (see `created_here.rs`). A tag
/// whose row is gone needs nothing; a row that is there but was not raised
/// (a trigger, rule or policy in the way, a read-only transaction) fails
/// the commit, so that no ID can come out twice.
pub fn raise_max_id(table_oid: u32, tag: &str, high_water: i64) {
    let Some((name, owner)) = table_name_and_owner(table_oid) else {
        return;
    };
    let failed = |why: String| -> ! {
        crate::errors::IdgenError::MaxIdNotRaised {
            tag: tag.to_string(),
            high_water,
            why,
        }
        .raise()
    };
    // SAFETY: plain read of a backend-local global.
    if unsafe { pg_sys::XactReadOnly } {
        failed("the transaction is read-only".into());
    }
    let update = format!(
        "UPDATE {name} SET max_id = GREATEST(max_id, $2), version = version OPERATOR(pg_catalog.+) 1, \
                updated_at = pg_catalog.now() \
          WHERE biz_tag OPERATOR(pg_catalog.=) $1 RETURNING max_id"
    );
    let exists = format!("SELECT 1 FROM {name} WHERE biz_tag OPERATOR(pg_catalog.=) $1");
    // SAFETY: called before the commit, inside the transaction; the
    // snapshot pushed here is popped below (or by the abort on ERROR).
    unsafe {
        pg_sys::CommandCounterIncrement();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let result = as_owner(owner, || {
        Spi::connect_mut(|client| {
            let raised = client.update(update.as_str(), None, &[tag.into(), high_water.into()])?;
            let raised_to = raised.first().get::<i64>(1).ok().flatten();
            let there = !client
                .select(exists.as_str(), Some(1), &[tag.into()])?
                .is_empty();
            Ok::<_, pgrx::spi::Error>((raised_to, there))
        })
    });
    // SAFETY: matches the push above.
    unsafe { pg_sys::PopActiveSnapshot() };
    match result {
        Err(e) => failed(e.to_string()),
        Ok((Some(max_id), _)) if max_id >= high_water => {}
        Ok((Some(max_id), _)) => failed(format!("max_id ended at {max_id}")),
        Ok((None, true)) => failed("the UPDATE of its row changed nothing".into()),
        Ok((None, false)) => {} // dropped: nothing left to protect
    }
}

/// `name` as a SQL identifier, quoted where PostgreSQL needs it (its own
/// `quote_identifier`: keywords included).
pub fn quote_identifier(name: &str) -> String {
    let name = std::ffi::CString::new(name).unwrap_or_default();
    // SAFETY: quote_identifier reads a NUL-terminated string and returns
    // it or a palloc'd quoted copy.
    unsafe { std::ffi::CStr::from_ptr(pg_sys::quote_identifier(name.as_ptr())) }
        .to_string_lossy()
        .into_owned()
}

/// `text` as a SQL string literal (standard_conforming_strings).
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The name (unquoted) of the schema of table `table_oid`, if the table
/// still exists.
pub fn table_schema(table_oid: u32) -> Option<String> {
    // SAFETY: syscache look-ups inside a transaction; NULL: gone.
    unsafe {
        let schema =
            pg_sys::get_namespace_name(pg_sys::get_rel_namespace(pg_sys::Oid::from(table_oid)));
        (!schema.is_null()).then(|| {
            std::ffi::CStr::from_ptr(schema)
                .to_string_lossy()
                .into_owned()
        })
    }
}

/// The schema-qualified name and the owner of table `table_oid`, if it
/// still exists.
pub fn table_name_and_owner(table_oid: u32) -> Option<(String, pg_sys::Oid)> {
    // SAFETY: syscache and relcache look-ups inside a transaction; a NULL
    // answer means the table is gone.
    unsafe {
        let relid = pg_sys::Oid::from(table_oid);
        let relation = pg_sys::RelationIdGetRelation(relid);
        if relation.is_null() {
            return None;
        }
        let owner = (*(*relation).rd_rel).relowner;
        pg_sys::RelationClose(relation);
        let schema = pg_sys::get_namespace_name(pg_sys::get_rel_namespace(relid));
        let relname = pg_sys::get_rel_name(relid);
        if schema.is_null() || relname.is_null() {
            return None;
        }
        let quote = |name| quote_identifier(&std::ffi::CStr::from_ptr(name).to_string_lossy());
        Some((format!("{}.{}", quote(schema), quote(relname)), owner))
    }
}

/// Runs `body` as `owner` in a security-restricted context, as autovacuum
/// and `REFRESH MATERIALIZED VIEW` run a table owner's code: triggers,
/// policies or index expressions on `id_segment` run with the owner's
/// rights, never the caller's or the bootstrap superuser's, and cannot
/// change the session's role. An ERROR in `body` unwinds to a
/// (sub)transaction abort, which restores the user id itself.
pub fn as_owner<R>(owner: pg_sys::Oid, body: impl FnOnce() -> R) -> R {
    let mut saved_user = pg_sys::InvalidOid;
    let mut saved_context = 0;
    // SAFETY: plain reads and writes of the backend's current user id.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut saved_user, &mut saved_context);
        pg_sys::SetUserIdAndSecContext(
            owner,
            saved_context
                | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
        );
    }
    let result = body();
    // SAFETY: restores what was read above.
    unsafe { pg_sys::SetUserIdAndSecContext(saved_user, saved_context) };
    result
}
