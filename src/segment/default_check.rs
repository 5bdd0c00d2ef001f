//! Columns whose default (or generation) expression draws from a segment
//! tag, as PostgreSQL records a default's dependency on a sequence:
//!
//! * `tag_uses`: the columns of this database whose expression calls the
//!   extension's `segment_nextval(text)` with a constant tag (found through
//!   `pg_depend`, the tag read from the stored expression tree by
//!   `default_expr`). `segment_drop` refuses
//!   to drop a tag one of them uses, unless forced.
//! * `segment_defaults_check(relid)`: called by the event trigger
//!   `pg_idgen_segment_defaults` at `ddl_command_end` for each table a
//!   `CREATE TABLE` or `ALTER TABLE` touched; as the transaction commits
//!   (`XACT_EVENT_PRE_COMMIT`), a default of those tables naming a tag
//!   that does not exist then gets a WARNING — a tag created later in the
//!   same transaction counts. Skipped under `check_function_bodies = off`,
//!   which `pg_dump`'s scripts set: a restore creates tables before it
//!   loads `id_segment`; and on a Citus worker, whose tags are the
//!   coordinator's (the shard tables Citus creates carry the defaults). The look runs in an internal subtransaction and
//!   takes no lock it would wait for, so it never fails or stalls the
//!   commit; the event trigger's function is `SECURITY DEFINER`, so no
//!   role's DDL fails for want of a grant on the extension.
//!
//! Backend-local state (the tables to look at in this transaction):
//! PostgreSQL backends are single-threaded processes.

use super::default_expr::constant_tags;
use super::tag::{current_table_oid, remote_table_oid, row_state, RowState};
use crate::catalog::quote_identifier;
use crate::errors::IdgenError;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};

/// What uses a tag: a column's default or generation expression, or a
/// domain's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum User {
    Column {
        /// As `regclass` prints it (qualified when not on the search path).
        table: String,
        column: String,
        /// A generated column (`GENERATED ALWAYS AS (...) STORED`).
        generated: bool,
    },
    Domain {
        /// As `regtype` prints it.
        name: String,
    },
}

impl User {
    /// "the default of column "id" of table orders", for messages.
    pub fn describe(&self) -> String {
        match self {
            User::Column {
                table,
                column,
                generated,
            } => format!(
                "the {} of column \"{column}\" of table {table}",
                if *generated {
                    "generation expression"
                } else {
                    "default"
                }
            ),
            User::Domain { name } => format!("the default of domain {name}"),
        }
    }

    /// The statement that takes the use away, for hints.
    pub fn undo(&self) -> String {
        match self {
            User::Column {
                table,
                column,
                generated,
            } => format!(
                "ALTER TABLE {table} ALTER COLUMN {} {}",
                quote_identifier(column),
                if *generated {
                    "DROP EXPRESSION"
                } else {
                    "DROP DEFAULT"
                }
            ),
            User::Domain { name } => format!("ALTER DOMAIN {name} DROP DEFAULT"),
        }
    }
}

/// A tag and what uses it.
#[derive(Debug, Clone)]
pub struct TagUse {
    pub user: User,
    pub tag: String,
}

/// The expressions of this database — column defaults, generation
/// expressions and domain defaults — that call the `segment_nextval(text)`
/// beside `id_segment` (`table_oid`) with a constant tag; with `relids`,
/// only the columns of those tables.
pub fn tag_uses(table_oid: u32, relids: Option<&[u32]>) -> Vec<TagUse> {
    let relids: Option<Vec<pg_sys::Oid>> =
        relids.map(|r| r.iter().map(|&o| pg_sys::Oid::from(o)).collect());
    let query = "WITH f AS ( \
                   SELECT p.oid FROM pg_catalog.pg_proc p \
                     JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) p.pronamespace \
                    WHERE c.oid OPERATOR(pg_catalog.=) $1 \
                      AND p.proname OPERATOR(pg_catalog.=) 'segment_nextval' \
                      AND p.proargtypes OPERATOR(pg_catalog.=) '25'::pg_catalog.oidvector) \
                 SELECT ad.adrelid::pg_catalog.regclass::pg_catalog.text, a.attname::pg_catalog.text, \
                        a.attgenerated OPERATOR(pg_catalog.<>) '', \
                        ad.adbin::pg_catalog.text, (SELECT oid FROM f) \
                   FROM pg_catalog.pg_depend d \
                   JOIN pg_catalog.pg_attrdef ad ON ad.oid OPERATOR(pg_catalog.=) d.objid \
                   JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) ad.adrelid \
                                                 AND a.attnum OPERATOR(pg_catalog.=) ad.adnum \
                  WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_attrdef'::pg_catalog.regclass \
                    AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass \
                    AND d.refobjid OPERATOR(pg_catalog.=) (SELECT oid FROM f) \
                    AND NOT a.attisdropped \
                    AND ($2::pg_catalog.oid[] IS NULL OR ad.adrelid OPERATOR(pg_catalog.=) ANY ($2)) \
                 UNION ALL \
                 SELECT t.oid::pg_catalog.regtype::pg_catalog.text, NULL, false, \
                        t.typdefaultbin::pg_catalog.text, (SELECT oid FROM f) \
                   FROM pg_catalog.pg_depend d \
                   JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) d.objid \
                  WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass \
                    AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass \
                    AND d.refobjid OPERATOR(pg_catalog.=) (SELECT oid FROM f) \
                    AND t.typdefaultbin IS NOT NULL AND $2::pg_catalog.oid[] IS NULL \
                  ORDER BY 1, 2";
    let rows = Spi::connect(|client| {
        let table = client.select(
            query,
            None,
            &[pg_sys::Oid::from(table_oid).into(), relids.into()],
        )?;
        let mut rows = Vec::new();
        for row in table {
            let (Some(owner), column, Some(generated), Some(tree), Some(function)) = (
                row.get::<String>(1)?,
                row.get::<String>(2)?,
                row.get::<bool>(3)?,
                row.get::<String>(4)?,
                row.get::<pg_sys::Oid>(5)?,
            ) else {
                continue;
            };
            let user = match column {
                Some(column) => User::Column {
                    table: owner,
                    column,
                    generated,
                },
                None => User::Domain { name: owner },
            };
            rows.push((user, tree, function));
        }
        Ok::<_, pgrx::spi::Error>(rows)
    })
    .unwrap_or_else(|e| {
        IdgenError::Internal {
            context: "reading the column defaults that use segment tags",
            message: e.to_string(),
        }
        .raise()
    });
    rows.into_iter()
        .flat_map(|(user, tree, function)| {
            constant_tags(&tree, function)
                .into_iter()
                .map(move |tag| TagUse {
                    user: user.clone(),
                    tag,
                })
        })
        .collect()
}

/// The error for a tag with no row: when a column default draws from it
/// (a `segment_drop(..., force => true)`), its hint creates the tag above
/// that column's IDs — `segment_create(tag)` alone would start at 1. The
/// report's LOCATION is the caller's line.
#[track_caller]
pub fn raise_unknown_tag(table_oid: u32, tag: &[u8]) -> ! {
    let tag = String::from_utf8_lossy(tag).into_owned();
    let column = tag_uses(table_oid, None)
        .into_iter()
        .filter(|u| u.tag == tag)
        .find_map(|u| match u.user {
            User::Column {
                table,
                column,
                generated: false,
            } => Some((table, column)),
            _ => None,
        });
    match column {
        Some((table, column)) => IdgenError::UnknownTagOfColumn { tag, table, column }.raise(),
        None => IdgenError::UnknownTag { tag }.raise(),
    }
}

thread_local! {
    /// The tables to look at as the transaction commits, and the
    /// `id_segment` their tags are looked up in.
    static PENDING: RefCell<Vec<(u32, u32)>> = const { RefCell::new(Vec::new()) };
    static CALLBACK_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// `segment_defaults_check(relid)`: called by the extension's event
/// trigger for each table a DDL command created or altered; a default of
/// it naming a tag that does not exist when the transaction commits gets
/// a WARNING then.
#[pg_extern(volatile, parallel_unsafe)]
fn segment_defaults_check(relid: Option<pg_sys::Oid>, fcinfo: pg_sys::FunctionCallInfo) {
    // SAFETY: a plain read of a setting of this backend.
    let checking = unsafe { pg_sys::check_function_bodies };
    let Some(relid) = relid.filter(|_| checking) else {
        return;
    };
    let table_oid = current_table_oid(fcinfo);
    if table_oid == 0 {
        return;
    }
    if !CALLBACK_REGISTERED.with(|r| r.replace(true)) {
        // SAFETY: registers a process-lifetime callback once per backend.
        unsafe { pg_sys::RegisterXactCallback(Some(on_transaction_event), std::ptr::null_mut()) };
    }
    PENDING.with(|pending| {
        let entry = (relid.to_u32(), table_oid);
        let mut pending = pending.borrow_mut();
        if !pending.contains(&entry) {
            pending.push(entry);
        }
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_transaction_event(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PRE_PREPARE => {
            let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
            if !pending.is_empty() {
                warn_about_missing_tags(&pending);
            }
        }
        XACT_EVENT_ABORT | XACT_EVENT_COMMIT | XACT_EVENT_PREPARE => {
            PENDING.with(|p| p.borrow_mut().clear())
        }
        _ => {}
    }
}

/// Runs `body` in an internal subtransaction (`bgworker::in_subtransaction`):
/// an ERROR in it rolls back only what it did and is dropped, so the
/// commit it runs in never fails because of a check that only warns.
fn without_failing(body: impl FnOnce()) {
    let _ = crate::bgworker::in_subtransaction(body);
}

/// Whether `relation` (0: none) can be read without waiting: a table
/// locked by a `VACUUM FULL`, `TRUNCATE` or `ALTER EXTENSION UPDATE` in
/// flight is not waited for at commit; its defaults go unchecked.
fn readable_now(relation: u32) -> bool {
    relation == 0
        // SAFETY: a lock request that never waits; a lock taken is released
        // with the transaction.
        || unsafe {
            pg_sys::ConditionalLockRelationOid(
                pg_sys::Oid::from(relation),
                pg_sys::AccessShareLock as pg_sys::LOCKMODE,
            )
        }
}

/// One WARNING per column default of `pending`'s tables that names a tag
/// the committing transaction cannot see. Never fails the commit, and
/// never waits for a lock.
fn warn_about_missing_tags(pending: &[(u32, u32)]) {
    without_failing(|| {
        // SAFETY: inside the subtransaction; the snapshot pushed here
        // (which sees the transaction's own rows) is popped below, or by
        // the subtransaction's abort on ERROR.
        unsafe {
            pg_sys::CommandCounterIncrement();
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        }
        warn_in_snapshot(pending);
        // SAFETY: matches the push above.
        unsafe { pg_sys::PopActiveSnapshot() };
    });
}

fn warn_in_snapshot(pending: &[(u32, u32)]) {
    // On a Citus worker a tag without a row here is the coordinator's
    // (`citus_source.rs`): the shard tables Citus creates with the
    // distributed table's defaults are not a user's typo.
    if super::citus_source::serves_missing_tags() {
        return;
    }
    let mut tables: Vec<u32> = pending.iter().map(|&(_, table)| table).collect();
    tables.sort_unstable();
    tables.dedup();
    for table_oid in tables {
        if !readable_now(table_oid) || !readable_now(remote_table_oid(table_oid)) {
            continue;
        }
        let relids: Vec<u32> = pending
            .iter()
            .filter(|&&(_, t)| t == table_oid)
            .map(|&(relid, _)| relid)
            .collect();
        for used in tag_uses(table_oid, Some(&relids)) {
            if row_state(table_oid, used.tag.as_bytes()) == RowState::Missing {
                IdgenError::DefaultOfUnknownTag {
                    user: used.user.describe(),
                    tag: used.tag,
                }
                .warn();
            }
        }
    }
}
