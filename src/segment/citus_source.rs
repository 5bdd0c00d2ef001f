//! Segment ranges on Citus: one allocator, the coordinator's `id_segment`,
//! for every node of the cluster.
//!
//! Citus evaluates a column default on the workers too (`INSERT ...
//! SELECT` from a distributed table, and every statement sent to a
//! worker), so each node needs the tag. On a worker, a tag without a row
//! of its own (and not attached to a central server) takes its ranges from
//! the coordinator, ahead of need, as an attached tag does from its
//! central server; a call never leaves the node. The refill runs in its own
//! lane (`registry::WorkerKey::CITUS`), so a slow coordinator holds up no
//! local tag.
//!
//! # Protocol
//!
//! 1. The worker's refill worker calls Citus's `run_command_on_coordinator`
//!    — Citus's own connection to the coordinator, with the settings and
//!    credentials Citus uses between nodes (`citus.node_conninfo`,
//!    `pg_dist_authinfo`), as the owner of the local `id_segment` (whose
//!    role Citus created on every node) — with one statement:
//!    `SELECT row_to_json(r) FROM segment_citus_range(tag, steps, floor) r`.
//! 2. On the coordinator, `segment_citus_range` (in `sql.rs`, with the
//!    other SQL functions that hand out IDs) runs the refill's own
//!    version-CAS on its `id_segment` (`distributor::take_range`, the same
//!    code as a local refill) with `synchronous_commit = on` and the row
//!    lock wait of a local refill, and answers the range — or the problem,
//!    by SQLSTATE (PostgreSQL's packed code), message and hint; a row
//!    locked past that wait (the coordinator's own refill in flight) is
//!    such a problem, 55P03, which the worker's waiting callers wait
//!    through while the worker retries, as they do for a local refill.
//!    The command's transaction commits on the coordinator (flushed)
//!    before the answer reaches the worker.
//! 3. The worker raises the coordinator's `max_id` it took IDs below into
//!    `id_segment_citus.max_id_seen` in the transaction that publishes the
//!    range; the next refill sends it as the floor: a coordinator row below
//!    it went back (a restore, a failover that lost commits) and the
//!    coordinator refuses the refill before it writes anything.
//!
//! A failure between the coordinator's commit and the worker's leaves a
//! gap, never a repeat. A tag missing on the coordinator is 42704 with a
//! hint that names the coordinator.

use crate::catalog::quote_literal;
use crate::citus::{self, Node};
use crate::errors::IdgenError;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// Whether this node takes the ranges of a tag without a local row from
/// the Citus coordinator: it is a Citus worker.
pub fn serves_missing_tags() -> bool {
    matches!(citus::node(), Ok(Node::Worker { .. }))
}

/// A range the coordinator granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoordinatorRange {
    pub first: i64,
    pub len: u64,
    /// The IDs the CAS asked for (more than `len` when a trigger there
    /// held `max_id` back).
    pub asked: u64,
    pub step: i64,
    pub cas_conflicts: u64,
}

/// A range of `tag` from the coordinator, `steps` steps, refused below
/// `floor` (see the module header). `schema`: the quoted schema of the
/// extension, the same on every node (`id_segment_citus` is in it).
pub fn take(
    client: &mut SpiClient<'_>,
    schema: &str,
    tag: &str,
    steps: u64,
    floor: Option<i64>,
) -> Result<CoordinatorRange, pgrx::spi::Error> {
    let seen = client
        .select(
            &format!(
                "SELECT max_id_seen FROM {schema}.id_segment_citus \
                  WHERE biz_tag OPERATOR(pg_catalog.=) $1"
            ),
            Some(1),
            &[tag.into()],
        )?
        .first()
        .get::<i64>(1)
        .ok()
        .flatten();
    let floor = floor.max(seen);
    let command = format!(
        "SELECT pg_catalog.row_to_json(r)::pg_catalog.text FROM {schema}.segment_citus_range({}, {steps}, {}) r",
        quote_literal(tag),
        floor.map_or("NULL".to_string(), |f| f.to_string())
    );
    let answer = client.select(
        "SELECT success, result FROM pg_catalog.run_command_on_coordinator($1)",
        Some(1),
        &[command.into()],
    )?;
    let row = answer.first();
    let (success, result) = (row.get::<bool>(1)?, row.get::<String>(2)?);
    let result = result.unwrap_or_default();
    if success != Some(true) {
        IdgenError::CitusCoordinatorFailed {
            tag: tag.to_string(),
            message: result,
        }
        .raise();
    }
    let fields = client.select(
        "SELECT first, len, asked, step, cas_conflicts, sqlstate, message, hint \
           FROM pg_catalog.json_to_record($1::pg_catalog.json) \
             AS r(first int8, len int8, asked int8, step int8, cas_conflicts int8, \
                  sqlstate int4, message text, hint text)",
        Some(1),
        &[result.into()],
    )?;
    let r = fields.first();
    if let Some(sqlstate) = r.get::<i32>(6)? {
        let message = r.get::<String>(7)?.unwrap_or_default();
        let hint = r.get::<String>(8)?.unwrap_or_default();
        match sqlstate == PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT as i32 {
            true => IdgenError::CitusTagMissing {
                tag: tag.to_string(),
            }
            .raise(),
            false => IdgenError::CitusCoordinatorRefused {
                tag: tag.to_string(),
                sqlstate,
                message,
                hint,
            }
            .raise(),
        }
    }
    let number = |i: usize| r.get::<i64>(i).map(Option::unwrap_or_default);
    let granted = CoordinatorRange {
        first: number(1)?,
        len: number(2)? as u64,
        asked: number(3)? as u64,
        step: number(4)?,
        cas_conflicts: number(5)? as u64,
    };
    client.update(
        &format!(
            "INSERT INTO {schema}.id_segment_citus AS c (biz_tag, max_id_seen) VALUES ($1, $2) \
             ON CONFLICT (biz_tag) DO UPDATE \
                SET max_id_seen = GREATEST(c.max_id_seen, EXCLUDED.max_id_seen), \
                    updated_at = pg_catalog.now()"
        ),
        None,
        &[tag.into(), (granted.first + granted.len as i64 - 1).into()],
    )?;
    Ok(granted)
}
