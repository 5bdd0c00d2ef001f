//! The Citus coordinator's catch-up: its `id_segment` rows raised above
//! every range a worker took, before it hands out a range on a WAL
//! timeline (or as a cluster) it has not caught up on; and the floor a
//! new tag must start above.
//!
//! A coordinator that failed over to an asynchronous standby, or was
//! restored to a point in time, lost the refills it committed last,
//! among them ranges it had handed to the workers. Each worker keeps the
//! top of what it took in `id_segment_citus.max_id_seen` and its fence
//! (`citus_source.rs`) refuses a row below that mark; but a worker that
//! took less, and the coordinator's own sessions, would hand those IDs
//! out again.
//!
//! # Invariants
//!
//! 1. **No version-CAS on the coordinator's `id_segment` runs on a system
//!    identifier and timeline (`id_segment_origin`) without a row for them
//!    in `id_segment_citus_caught_up`**, and that row commits only with
//!    every tag's row raised to at least the largest
//!    `id_segment_citus.max_id_seen` of every primary worker in
//!    `pg_dist_node`. All must answer — a disabled worker cannot, and
//!    counts as not answering — else nothing is raised or recorded and the
//!    refill is refused with 08006 until they do.
//! 2. **`segment_create` on the coordinator starts a tag above every
//!    worker's mark of it** (a tag dropped and made again, or lost with a
//!    failover), or refuses, naming the start to use; it refuses as well
//!    while a worker does not answer.
//!
//! A crash restart stays on its timeline and lost no commit, so it pays
//! nothing; a promotion or a point-in-time recovery starts a timeline, and
//! the first refill there catches up. The check takes
//! `id_segment_citus_caught_up` in SHARE ROW EXCLUSIVE mode, so concurrent
//! refills wait for one catch-up (or retry after the refill's short lock
//! wait), and no CAS on the new timeline reads a row before it is raised.
//!
//! # What it does not see
//!
//! IDs from ranges the old coordinator took for its own sessions and lost:
//! they are recorded nowhere but in the rows that hold them, which the
//! catch-up does not read (a table's rows are its owner's to read, and
//! whatever code a table runs with them). A native sequence repeats them
//! too; docs/citus.md gives the step after an asynchronous failover. Nor a
//! cold copy of the coordinator started on its old timeline: there the
//! workers' own fences refuse below their marks, and the DBA runs
//! `segment_citus_catch_up()`.

use crate::catalog::{as_owner, quote_identifier, table_schema};
use crate::citus::{self, Node};
use crate::errors::IdgenError;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use std::collections::BTreeMap;

/// A tag's row the catch-up raised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raised {
    pub tag: String,
    pub from: i64,
    pub to: i64,
}

/// What stopped a catch-up: the workers that did not answer, with what
/// Citus said (`host:port: message`, separated by `; `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unanswered(pub String);

/// `id_segment` in `schema` (quoted), and its owner, as the refill found
/// it.
pub struct Target<'a> {
    pub schema: &'a str,
    pub qualified_name: &'a str,
    pub owner: pg_sys::Oid,
}

/// Before a version-CAS: on the Citus coordinator, catches up once per
/// timeline (see the module header). Elsewhere, or under SQL older than
/// 0.4.0's, nothing.
pub fn before_cas(
    client: &mut SpiClient<'_>,
    target: &Target<'_>,
) -> Result<Result<(), Unanswered>, pgrx::spi::Error> {
    if !matches!(citus::node(), Ok(Node::Coordinator)) {
        return Ok(Ok(()));
    }
    if !has_record(client, target.schema)? || caught_up(client, target.schema)? {
        return Ok(Ok(()));
    }
    Ok(run(client, target, Rerun::No)?.map(|raised| {
        for r in &raised {
            pgrx::log!(
                "pg_idgen: Citus catch-up on a new timeline raised segment tag \"{}\" from {} to {}",
                r.tag,
                r.from,
                r.to
            );
        }
    }))
}

/// Whether `id_segment_citus_caught_up` is there (0.4.0's SQL or later).
fn has_record(client: &SpiClient<'_>, schema: &str) -> Result<bool, pgrx::spi::Error> {
    Ok(client
        .select(
            "SELECT pg_catalog.to_regclass($1) IS NOT NULL",
            Some(1),
            &[format!("{schema}.id_segment_citus_caught_up").into()],
        )?
        .first()
        .get::<bool>(1)?
        .unwrap_or(false))
}

/// Whether this coordinator caught up on its system identifier and
/// timeline.
fn caught_up(client: &SpiClient<'_>, schema: &str) -> Result<bool, pgrx::spi::Error> {
    Ok(client
        .select(
            &format!(
                "SELECT EXISTS (SELECT FROM {schema}.id_segment_citus_caught_up c \
                                  JOIN {schema}.id_segment_origin o \
                                    ON c.system_identifier OPERATOR(pg_catalog.=) o.system_identifier \
                                   AND c.timeline OPERATOR(pg_catalog.=) o.timeline)"
            ),
            Some(1),
            &[],
        )?
        .first()
        .get::<bool>(1)?
        .unwrap_or(false))
}

/// Whether a catch-up runs again on a timeline already caught up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rerun {
    /// By hand (`segment_citus_catch_up`): it always asks the workers.
    Yes,
    /// Before a CAS: not when another refill caught up while this one
    /// waited for the record's lock.
    No,
}

/// The catch-up itself, in the caller's transaction, under the record's
/// lock: raises the rows and records the timeline, or changes nothing.
pub fn run(
    client: &mut SpiClient<'_>,
    target: &Target<'_>,
    rerun: Rerun,
) -> Result<Result<Vec<Raised>, Unanswered>, pgrx::spi::Error> {
    let schema = target.schema;
    client.update(
        &format!("LOCK TABLE {schema}.id_segment_citus_caught_up IN SHARE ROW EXCLUSIVE MODE"),
        None,
        &[],
    )?;
    if rerun == Rerun::No && caught_up(client, schema)? {
        return Ok(Ok(Vec::new()));
    }
    let floors = match workers_floors(client, schema)? {
        Ok(floors) => floors,
        Err(unanswered) => return Ok(Err(unanswered)),
    };
    let mut raised = Vec::new();
    as_owner(target.owner, || -> Result<(), pgrx::spi::Error> {
        for (tag, floor) in &floors {
            let rows = client.update(
                &format!(
                    "WITH old AS (SELECT biz_tag, max_id FROM {table} \
                                   WHERE biz_tag OPERATOR(pg_catalog.=) $1 \
                                     AND max_id OPERATOR(pg_catalog.<) $2 FOR UPDATE) \
                     UPDATE {table} t SET max_id = $2, version = t.version OPERATOR(pg_catalog.+) 1, \
                            updated_at = pg_catalog.now() \
                       FROM old WHERE t.biz_tag OPERATOR(pg_catalog.=) old.biz_tag \
                     RETURNING old.max_id",
                    table = target.qualified_name
                ),
                None,
                &[tag.as_str().into(), (*floor).into()],
            )?;
            for row in rows {
                if let Some(from) = row.get::<i64>(1)? {
                    raised.push(Raised {
                        tag: tag.clone(),
                        from,
                        to: *floor,
                    });
                }
            }
        }
        client.update(
            &format!(
                "INSERT INTO {schema}.id_segment_citus_caught_up AS c (system_identifier, timeline, raised) \
                 SELECT system_identifier, timeline, $1 FROM {schema}.id_segment_origin \
                 ON CONFLICT (system_identifier, timeline) DO UPDATE \
                    SET caught_up_at = pg_catalog.clock_timestamp(), \
                        raised = c.raised OPERATOR(pg_catalog.+) EXCLUDED.raised"
            ),
            None,
            &[(raised.len() as i32).into()],
        )?;
        Ok(())
    })?;
    Ok(Ok(raised))
}

/// Per tag, the largest `id_segment_citus.max_id_seen` of the primary
/// workers, asked through Citus's own connections; every one must answer.
fn workers_floors(
    client: &SpiClient<'_>,
    schema: &str,
) -> Result<Result<BTreeMap<String, i64>, Unanswered>, pgrx::spi::Error> {
    let command = format!(
        "SELECT COALESCE(pg_catalog.json_object_agg(biz_tag, max_id_seen), '{{}}')::pg_catalog.text \
           FROM {schema}.id_segment_citus"
    );
    let mut answers = Vec::new();
    let mut unanswered = Vec::new();
    let rows = client.select(
        "SELECT nodename OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) nodeport, success, result \
           FROM pg_catalog.run_command_on_workers($1)",
        None,
        &[command.into()],
    )?;
    for row in rows {
        let node = row.get::<String>(1)?.unwrap_or_default();
        let result = row.get::<String>(3)?.unwrap_or_default();
        match row.get::<bool>(2)? {
            Some(true) => answers.push(result),
            _ => unanswered.push(format!("{node}: {result}")),
        }
    }
    // run_command_on_workers asks the active ones only.
    for row in client.select(
        "SELECT nodename OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) nodeport \
           FROM pg_catalog.pg_dist_node \
          WHERE NOT isactive AND noderole OPERATOR(pg_catalog.=) 'primary' \
            AND groupid OPERATOR(pg_catalog.<>) 0",
        None,
        &[],
    )? {
        let node = row.get::<String>(1)?.unwrap_or_default();
        unanswered.push(format!(
            "{node}: disabled (citus_disable_node), so it cannot be asked"
        ));
    }
    if !unanswered.is_empty() {
        return Ok(Err(Unanswered(unanswered.join("; "))));
    }
    let mut floors = BTreeMap::new();
    let rows = client.select(
        "SELECT e.key, pg_catalog.max(e.value::pg_catalog.int8) \
           FROM pg_catalog.unnest($1::pg_catalog.text[]) a(answer), \
                pg_catalog.json_each_text(a.answer::pg_catalog.json) e \
          GROUP BY e.key",
        None,
        &[answers.into()],
    )?;
    for row in rows {
        if let (Some(tag), Some(floor)) = (row.get::<String>(1)?, row.get::<i64>(2)?) {
            floors.insert(tag, floor);
        }
    }
    Ok(Ok(floors))
}

/// On the Citus coordinator (under 0.4.0's SQL), the largest mark any
/// worker keeps of `tag` — `None` where none has one, or elsewhere — for a
/// row of `tag` about to be made (`segment_create`, `segment_rename`) in
/// the `id_segment` with OID `table_oid`. Asked as that table's owner (the
/// role Citus connects as between nodes, whatever the caller's grants);
/// raises 08006 (`CitusNewRowUnanswered`) when a worker does not answer.
pub fn workers_floor_of(table_oid: u32, tag: &str) -> Option<i64> {
    if !matches!(citus::node(), Ok(Node::Coordinator)) {
        return None;
    }
    let (qualified_name, owner) = crate::catalog::table_name_and_owner(table_oid)?;
    let schema = quote_identifier(&table_schema(table_oid).unwrap_or_default());
    let asked = as_owner(
        owner,
        || -> Result<Result<Option<i64>, Unanswered>, pgrx::spi::Error> {
            Spi::connect(|client| {
                if !has_record(client, &schema)? {
                    return Ok(Ok(None));
                }
                Ok(workers_floors(client, &schema)?.map(|floors| floors.get(tag).copied()))
            })
        },
    );
    match asked {
        Ok(Ok(floor)) => floor,
        Ok(Err(unanswered)) => IdgenError::CitusNewRowUnanswered {
            tag: tag.to_string(),
            nodes: unanswered.0,
        }
        .raise(),
        Err(e) => IdgenError::Internal {
            context: "a Citus worker's mark",
            message: format!("{qualified_name}: {e}"),
        }
        .raise(),
    }
}

/// Raises `IdgenError::CitusCatchUpUnanswered` for `unanswered`.
pub fn refuse(unanswered: Unanswered) -> ! {
    IdgenError::CitusCatchUpUnanswered {
        nodes: unanswered.0,
    }
    .raise()
}
