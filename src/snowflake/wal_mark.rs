//! The WAL-logged high-water mark: this cluster's row of
//! `snowflake_high_water` in `pg_idgen.snowflake_database`, which the
//! snowflake keeper commits (synchronously, to the local WAL) before any
//! ID up to it is issued.
//!
//! One row per cluster, keyed by its system identifier, with the machine id
//! its IDs carry: a physical standby replays its primary's row (the same
//! system identifier), while a row that logical replication, a dump or
//! `pg_upgrade` brings from another cluster stays a row of its own — a
//! publisher's mark is never written over the subscriber's. Another
//! cluster's row counts for this cluster's floor when it has this server's
//! machine id (or an unknown one, from before 0.4.0): `pg_upgrade` and a
//! restored dump start above the old cluster's IDs; and one that keeps
//! moving while this server runs is a live server issuing IDs under this
//! server's machine id (`keeper.rs` warns).
//!
//! Why a table row: a row's commit is in the WAL, before every row that
//! holds an ID it covers (those IDs are issued only after the commit). So
//! any server that has replayed a row holding an ID has replayed the mark
//! too: a promoted standby (asynchronous or synchronous), a point-in-time
//! restore to any point, a crash recovery. `pg_upgrade` carries the table's
//! files and `pg_dump` its row (an extension configuration table), so an
//! upgraded or restored cluster starts above it as well. The state file
//! (`state_file.rs`) stays beside it as a second floor that needs no
//! database; a start takes the higher of the two.
//!
//! Its commit uses `synchronous_commit = local`: the WAL order is what makes
//! a standby safe, so the keeper never waits for a synchronous standby (a
//! user's commit that holds an ID waits for it anyway, after the mark).
//!
//! Runs inside the keeper's transactions (`bgworker::in_transaction`),
//! with the worker's pinned search path and every name schema-qualified;
//! the table is read and written as its owner, in a security-restricted
//! operation (`catalog::as_owner`), never as the bootstrap superuser.

use super::layout::Layout;
use super::state_file::HighWater;
use crate::catalog::as_owner;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// How long the keeper waits for a lock on the row (a session that holds
/// it with `SELECT ... FOR UPDATE`): it retries at its next pass.
const ROW_LOCK_WAIT_MS: i32 = 1_000;

/// Why the mark cannot be read or committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkProblem {
    /// pg_idgen is not installed in the database.
    NoExtension { database: String },
    /// Installed, but at a version without the table (0.2.0 or older).
    NotUpdated { database: String },
    /// The row holds a layout no setting can give.
    Damaged { problem: String },
}

impl std::fmt::Display for MarkProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MarkProblem::NoExtension { database } => write!(
                f,
                "pg_idgen is not installed in database \"{database}\" (pg_idgen.snowflake_database): run CREATE EXTENSION pg_idgen there"
            ),
            MarkProblem::NotUpdated { database } => write!(
                f,
                "pg_idgen in database \"{database}\" (pg_idgen.snowflake_database) has no table snowflake_high_water yet: run ALTER EXTENSION pg_idgen UPDATE there"
            ),
            MarkProblem::Damaged { problem } => {
                write!(f, "the row of snowflake_high_water is damaged: {problem}")
            }
        }
    }
}

/// The table: its quoted schema and its owner.
struct MarkTable {
    schema: String,
    owner: pg_sys::Oid,
}

/// The table, or why there is none.
fn table(
    client: &mut SpiClient<'_>,
    database: &str,
) -> Result<Result<MarkTable, MarkProblem>, pgrx::spi::Error> {
    // A SELECT, not pgrx's `update`: that assigns a transaction id, which a
    // standby (where the keeper only reads) cannot.
    client.select(
        "SELECT pg_catalog.set_config('synchronous_commit', 'local', true), \
                pg_catalog.set_config('lock_timeout', $1, true)",
        None,
        &[format!("{ROW_LOCK_WAIT_MS}ms").into()],
    )?;
    let rows = client.select(
        "SELECT pg_catalog.quote_ident(n.nspname), \
                (SELECT c.relowner FROM pg_catalog.pg_class c \
                  WHERE c.relnamespace OPERATOR(pg_catalog.=) n.oid \
                    AND c.relname OPERATOR(pg_catalog.=) 'snowflake_high_water') \
           FROM pg_catalog.pg_extension e \
           JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace \
          WHERE e.extname OPERATOR(pg_catalog.=) 'pg_idgen'",
        Some(1),
        &[],
    )?;
    let database = database.to_string();
    if rows.is_empty() {
        return Ok(Err(MarkProblem::NoExtension { database }));
    }
    let row = rows.first();
    match (row.get::<String>(1)?, row.get::<pg_sys::Oid>(2)?) {
        (Some(schema), Some(owner)) => Ok(Ok(MarkTable { schema, owner })),
        _ => Ok(Err(MarkProblem::NotUpdated { database })),
    }
}

/// The WAL timeline this server inserts on (a primary's).
pub fn insertion_timeline() -> i64 {
    // SAFETY: called by the keeper of a primary (recovery has ended), so
    // the insertion timeline is set and no longer changes.
    i64::from(unsafe { pgrx::pg_sys::GetWALInsertionTimeLine() })
}

/// Another cluster's row that counts for this one: it has this server's
/// machine id (or an unknown one), so its IDs could equal ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtherMark {
    pub system_identifier: i64,
    /// `None`: a row from before 0.4.0, whose machine id is not known.
    pub machine_id: Option<i64>,
    pub mark: HighWater,
    /// When that cluster's keeper last raised it (Unix ms): it moving while
    /// this server runs means that cluster is live.
    pub updated_unix_ms: i64,
}

/// What the table holds for this cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks {
    /// This cluster's own row (`None`: none committed yet).
    pub own: Option<HighWater>,
    /// The WAL timeline its row was last committed on (`None`: not known).
    pub own_timeline: Option<i64>,
    /// The rows of other clusters that count (see `OtherMark`).
    pub others: Vec<OtherMark>,
}

/// Reads this cluster's row and the other clusters' rows with machine id
/// `machine` (or an unknown one; every row when `machine` is `None`).
pub fn read(
    database: &str,
    machine: Option<i64>,
) -> Result<Result<Marks, MarkProblem>, pgrx::spi::Error> {
    Spi::connect_mut(|client| {
        let MarkTable { schema, owner } = match table(client, database)? {
            Ok(table) => table,
            Err(problem) => return Ok(Err(problem)),
        };
        let rows = as_owner(owner, || {
            client.select(
                &format!(
                    "SELECT h.system_identifier OPERATOR(pg_catalog.=) \
                            (pg_catalog.pg_control_system()).system_identifier, \
                            h.system_identifier, h.machine_id, h.epoch_ms, \
                            h.time_bits::pg_catalog.int8, h.machine_bits::pg_catalog.int8, \
                            h.sequence_bits::pg_catalog.int8, h.default_high_id, h.javascript_high_id, \
                            (EXTRACT(epoch FROM h.updated_at) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8, \
                            h.timeline \
                       FROM {schema}.snowflake_high_water h"
                ),
                None,
                &[],
            )
        })?;
        let mut marks = Marks::default();
        for row in rows {
            let own = row.get::<bool>(1)?.unwrap_or(false);
            let their_machine = row.get::<i64>(3)?;
            if !own && their_machine.is_some() && machine.is_some() && their_machine != machine {
                continue;
            }
            let field = |i: usize| row.get::<i64>(i).map(Option::unwrap_or_default);
            let (epoch_ms, time, bits, sequence) = (field(4)?, field(5)?, field(6)?, field(7)?);
            let width = |b: i64| u32::try_from(b).unwrap_or(u32::MAX);
            let Ok(layout) = Layout::new(epoch_ms, width(time), width(bits), width(sequence), 63)
            else {
                return Ok(Err(MarkProblem::Damaged {
                    problem: format!("layout {time}/{bits}/{sequence} does not add up to 63 bits"),
                }));
            };
            let mark = HighWater {
                layout,
                main: field(8)?,
                javascript: field(9)?,
            };
            match own {
                true => {
                    marks.own = Some(mark);
                    marks.own_timeline = row.get::<i64>(11)?;
                }
                false => marks.others.push(OtherMark {
                    system_identifier: field(2)?,
                    machine_id: their_machine,
                    mark,
                    updated_unix_ms: field(10)?,
                }),
            }
        }
        Ok(Ok(marks))
    })
}

/// Commits `mark` in this cluster's row, with the machine id its IDs carry
/// and the WAL timeline it is committed on (never below what the row
/// holds: each high-water ID is the greater of the two), and returns the
/// row as committed.
pub fn commit(
    database: &str,
    mark: &HighWater,
    machine: Option<i64>,
) -> Result<Result<HighWater, MarkProblem>, pgrx::spi::Error> {
    Spi::connect_mut(|client| {
        let MarkTable { schema, owner } = match table(client, database)? {
            Ok(table) => table,
            Err(problem) => return Ok(Err(problem)),
        };
        let l = &mark.layout;
        let rows = as_owner(owner, || {
            client.update(
                &format!(
                    "INSERT INTO {schema}.snowflake_high_water AS h \
                            (system_identifier, machine_id, timeline, epoch_ms, time_bits, machine_bits, \
                             sequence_bits, default_high_id, javascript_high_id, updated_at) \
                     VALUES ((pg_catalog.pg_control_system()).system_identifier, $7, $8, \
                             $1, $2, $3, $4, $5, $6, pg_catalog.now()) \
                     ON CONFLICT (system_identifier) DO UPDATE SET \
                            machine_id = EXCLUDED.machine_id, timeline = EXCLUDED.timeline, \
                            epoch_ms = EXCLUDED.epoch_ms, time_bits = EXCLUDED.time_bits, \
                            machine_bits = EXCLUDED.machine_bits, sequence_bits = EXCLUDED.sequence_bits, \
                            default_high_id = GREATEST(h.default_high_id, EXCLUDED.default_high_id), \
                            javascript_high_id = GREATEST(h.javascript_high_id, EXCLUDED.javascript_high_id), \
                            updated_at = EXCLUDED.updated_at \
                     RETURNING default_high_id, javascript_high_id"
                ),
                None,
                &[
                    l.epoch_ms.into(),
                    i64::from(l.time_bits).into(),
                    i64::from(l.machine_bits).into(),
                    i64::from(l.sequence_bits).into(),
                    mark.main.into(),
                    mark.javascript.into(),
                    machine.into(),
                    insertion_timeline().into(),
                ],
            )
        })?;
        let row = rows.first();
        Ok(Ok(HighWater {
            layout: *l,
            main: row.get::<i64>(1)?.unwrap_or(mark.main),
            javascript: row.get::<i64>(2)?.unwrap_or(mark.javascript),
        }))
    })
}
