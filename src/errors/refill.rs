//! Errors of refills: the refill workers, the callers that wait on them,
//! the snowflake IDs that stand in (`pg_idgen.snowflake_fallback`), and
//! every `RefillProblem` a refill finds with a tag's row (its report is the
//! error the worker stores for the tag's waiting callers). Each arm
//! declares one error: SQLSTATE, message, hint.

use pgrx::pg_sys::errcodes::PgSqlErrorCode::{self, *};

use super::remote::{central_moved_hint, remote_session_unsafe};
use super::segment::{unknown_tag, NO_MORE_IDS};
use super::settings::FALLBACK_MACHINE_ID_HINT;
use super::{
    misrouted, quote_identifier, quote_literal, IdgenError, Report, StoredError, SEE_SERVER_LOG,
};
use crate::segment::policy::RefillProblem;

/// The report of an error of a refill or a caller waiting for one.
pub(super) fn report(error: &IdgenError) -> Report {
    use IdgenError::*;
    match error {
        WorkerNotStarted { database } => Report::new(
            ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!("could not start the pg_idgen refill worker for database \"{database}\""),
            "Raise max_worker_processes in postgresql.conf and restart the server: pg_idgen takes one worker (its snowflake keeper; two with leases) and, while busy, one refill worker per database that draws segment IDs and one per central server those databases attach tags to, beside parallel query and other extensions.",
        ),
        WorkerExitedWhileStarting { database } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "the pg_idgen refill worker for the database with OID {database} exited while starting"
            ),
            "The server log has the worker's error (look for \"pg_idgen refill worker\"); the next call that needs IDs starts it again.",
        ),
        RefillTimeout { tag, waited_ms } => Report::new(
            ERRCODE_LOCK_NOT_AVAILABLE,
            format!(
                "segment tag \"{tag}\" got no new range within pg_idgen.refill_timeout ({waited_ms} ms)"
            ),
            "Check the server log and segment_status for the refill worker's errors, and whether a session holds a lock on the id_segment row; raise pg_idgen.refill_timeout if refills are just slow.",
        ),
        RefillFailed { sqlstate, message, hint, .. } => Report::new(
            PgSqlErrorCode::from(*sqlstate),
            message.clone(),
            hint.clone(),
        ),
        RefillTimedOutBecause { tag, waited_ms, sqlstate, message, hint } => Report::new(
            PgSqlErrorCode::from(*sqlstate),
            format!(
                "segment tag \"{tag}\" got no new range within pg_idgen.refill_timeout ({waited_ms} ms): {message}"
            ),
            hint.clone(),
        ),
        RowHeldByCaller { tag } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "segment tag \"{tag}\" needs a new range, but this transaction has changed or locked its id_segment row"
            ),
            "Commit or roll back the change to the id_segment row first (the refill worker waits for it), or draw the IDs before changing the row.",
        ),
        AttachedByCaller { tag } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "segment tag \"{tag}\" was attached to its central server by this transaction, which has not committed"
            ),
            "Ranges of an attached tag come from the central server once segment_attach() has committed (or a change to its id_segment_remote row): commit first, then draw its IDs.",
        ),
        RefillRowLocked { central: None } => Report::new(
            ERRCODE_LOCK_NOT_AVAILABLE,
            "its id_segment row (or the table) is locked by another transaction",
            "A transaction holds the row (SELECT ... FOR UPDATE, or an UPDATE or DELETE not yet committed) or a lock on id_segment (ALTER EXTENSION pg_idgen UPDATE, DDL): end it. pg_locks and pg_stat_activity show which session it is.",
        ),
        RefillRowLocked { central: Some(server) } => Report::new(
            ERRCODE_LOCK_NOT_AVAILABLE,
            format!("its row on central server \"{server}\" is locked by another transaction there"),
            "A transaction on the central server holds the row (another server's refill in flight, SELECT ... FOR UPDATE, an UPDATE not yet committed); the central session waits at most its lock_timeout for it, and the refill is retried. pg_locks and pg_stat_activity on the central server show which session it is.",
        ),
        RangeShortened { tag, asked, granted, central } => Report::new(
            ERRCODE_WARNING,
            format!(
                "a refill of segment tag \"{tag}\" asked {} id_segment for {asked} IDs and its update raised max_id by {granted} only",
                if *central { "the central server's" } else { "its" }
            ),
            "A trigger, rule or row security policy on id_segment (on the central server, for an attached tag) limits how far one update may raise max_id, so every refill brings only that much and the tag's callers may wait for refills. Let the update raise max_id as asked, or raise the row's step. No ID repeats either way.",
        ),
        RefillSpiFailed { tag, message } => Report::new(
            ERRCODE_INTERNAL_ERROR,
            format!("refill of segment tag \"{tag}\" failed: {message}"),
            SEE_SERVER_LOG,
        ),
        RangeNotCached { tag, first, last, problem } => Report::new(
            ERRCODE_INTERNAL_ERROR,
            format!("range {first}..{last} of segment tag \"{tag}\" could not be cached: {problem}"),
            "This is a bug in pg_idgen; the range is skipped and no ID repeats.",
        ),
        GiveBackRewritten { tag, wanted, written } => Report::new(
            ERRCODE_TRIGGERED_DATA_CHANGE_VIOLATION,
            format!(
                "a trigger on id_segment changed the give-back of segment tag \"{tag}\" at a clean stop: max_id {written} instead of {wanted}"
            ),
            "Nothing was given back and no ID repeats: the unused IDs are a gap, as after a crash. Let triggers on id_segment leave an update that lowers max_id alone (it happens only at a clean stop, under pg_idgen.allow_max_id_decrease).",
        ),
        FallbackIds { tag, waited_ms, cause, count } => Report::new(
            ERRCODE_WARNING,
            format!(
                "segment tag \"{tag}\" got no range within {waited_ms} ms ({cause}): handing out snowflake IDs instead ({count} so far)"
            ),
            "pg_idgen.snowflake_fallback is on. These IDs are far larger than the tag's own; segment_status.fallback_ids counts them.",
        ),
        FallbackWithoutMachineId { tag, waited_ms, cause } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "segment tag \"{tag}\" got no range within {waited_ms} ms ({cause}), and pg_idgen.snowflake_fallback cannot stand in: pg_idgen.machine_id is not set on this server"
            ),
            FALLBACK_MACHINE_ID_HINT,
        ),
        other => misrouted(other),
    }
}

impl RefillProblem {
    /// The error this problem gives the callers waiting on `tag`: each
    /// problem's SQLSTATE, message and hint.
    pub fn report(&self, tag: &str) -> Report {
        use RefillProblem::*;
        match self {
            ServedByAnotherLane { lane } => Report::new(
                ERRCODE_INTERNAL_ERROR,
                format!("segment tag \"{tag}\" is refilled by another worker (lane {lane})"),
                SEE_SERVER_LOG,
            ),
            NoExtension => Report::new(
                ERRCODE_UNDEFINED_OBJECT,
                "extension \"pg_idgen\" is not installed in this database",
                "Run CREATE EXTENSION pg_idgen.",
            ),
            NoRow => unknown_tag(tag),
            NoRemoteRow { foreign_table, max_id_seen, step } => Report::new(
                ERRCODE_UNDEFINED_OBJECT,
                format!("segment tag \"{tag}\" has no row on the central server (foreign table {foreign_table})"),
                {
                    // Unknown after a restart (no refill since): a placeholder.
                    let step = match step {
                        Some(s) => format!(", step => {s}"),
                        None => ", step => <the step it had>".to_string(),
                    };
                    match max_id_seen {
                        Some(seen) => format!(
                            "This server has taken IDs up to {seen} from it. Create it there above what every server attached to it has taken (the largest id_segment_remote.max_id_seen of them): SELECT segment_create({}, start => {}{step}) on the central server; or segment_drop() it here.",
                            quote_literal(tag), seen.saturating_add(1)
                        ),
                        None => format!("Create it there (SELECT segment_create({}{step}) on the central server), or segment_drop() it here.", quote_literal(tag)),
                    }
                },
            ),
            ForeignTableGone { server } => Report::new(
                ERRCODE_UNDEFINED_TABLE,
                format!("segment tag \"{tag}\" is attached to server \"{server}\", but its foreign table was dropped"),
                format!("Attach it again: SELECT segment_drop({0}); SELECT segment_attach({0}, {1});", quote_literal(tag), quote_literal(server)),
            ),
            StepNotPositive { step } => Report::new(
                ERRCODE_INVALID_PARAMETER_VALUE,
                format!("id_segment.step of segment tag \"{tag}\" is {step}, but it must be positive"),
                format!("UPDATE id_segment SET step = 1000 WHERE biz_tag = {};", quote_literal(tag)),
            ),
            MaxIdBehind { max_id, handed_out } => Report::new(
                ERRCODE_DATA_EXCEPTION,
                format!(
                    "id_segment.max_id of segment tag \"{tag}\" went backwards: it is {max_id}, but this server already handed out IDs up to {handed_out}"
                ),
                format!(
                    "Someone moved max_id back; refilling would repeat IDs. Set it to at least {handed_out}: UPDATE id_segment SET max_id = {handed_out} WHERE biz_tag = {};",
                    quote_literal(tag)
                ),
            ),
            CitusWentBack { max_id, seen } => Report::new(
                ERRCODE_DATA_EXCEPTION,
                format!(
                    "the Citus coordinator went back for segment tag \"{tag}\": its row has max_id {max_id}, but a worker has already taken IDs up to {seen} from it"
                ),
                format!(
                    "It lost ranges it handed out (restored, failed over, or the row lowered); no ID was handed out. Other workers may have taken more than this one: raise every tag above what every node took and holds with {} — it asks every worker and refuses if one does not answer.",
                    super::citus::CATCH_UP
                ),
            ),
            CitusCatchUpUnanswered { nodes } => IdgenError::CitusCatchUpUnanswered {
                nodes: nodes.clone(),
            }
            .report(),
            RowReplicated { subscription } => Report::new(
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "segment tag \"{tag}\" takes no range here: its row in id_segment is written by subscription \"{subscription}\", so a range taken here could overlap the ones its publisher takes next"
                ),
                format!(
                    "Draw the tag on the publisher. At a switchover, stop the writes there and wait until the subscription has caught up, then ALTER SUBSCRIPTION {} DISABLE; here: this node then goes on above every ID the publisher took. For two nodes that both draw the tag, attach it to one central server on each (segment_attach) instead of replicating its row both ways.",
                    quote_identifier(subscription)
                ),
            ),
            Exhausted { max_id } => Report::new(
                ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                format!("segment tag \"{tag}\" is exhausted: max_id {max_id} is the largest bigint"),
                NO_MORE_IDS,
            ),
            WriteNotApplied { read_max_id, written_max_id } => Report::new(
                ERRCODE_TRIGGERED_ACTION_EXCEPTION,
                format!(
                    "the update of id_segment.max_id of segment tag \"{tag}\" from {read_max_id} left it at {written_max_id}"
                ),
                "A trigger, rule or row security policy on id_segment (on the central server, for an attached tag) changed or skipped what the version-CAS wrote. Drop it, or let the update raise max_id.",
            ),
            CentralWentBack { server, foreign_table, max_id, seen } => Report::new(
                ERRCODE_DATA_EXCEPTION,
                format!(
                    "central server \"{server}\" went back for segment tag \"{tag}\": its row (foreign table {foreign_table}) has max_id {max_id}, but this server has already taken IDs up to {seen} from it"
                ),
                format!(
                    "It lost ranges it handed out (restored, failed over, or the row lowered); no ID was handed out. On the central server, raise the row to the largest id_segment_remote.max_id_seen (or id_segment_detached.max_id_seen) of any server attached to it (this server's is {seen}): UPDATE id_segment SET max_id = <that value>, version = version + 1 WHERE biz_tag = {}; then run SELECT segment_central_accept() there.",
                    quote_literal(tag)
                ),
            ),
            CentralMoved { server, moved } => Report::new(
                ERRCODE_DATA_EXCEPTION,
                format!(
                    "central server \"{server}\" is not where this server left it for segment tag \"{tag}\": {moved}"
                ),
                central_moved_hint(tag),
            ),
            RemoteSessionUnsafe { server, problem, options } => {
                remote_session_unsafe(server, problem, options.as_deref())
            }
            CasContention { attempts } => Report::new(
                ERRCODE_LOCK_NOT_AVAILABLE,
                format!("segment tag \"{tag}\" lost the version check of id_segment {attempts} times in a row to other allocators"),
                "Another allocator updates this row without pause; raise its step or give it its own tag.",
            ),
        }
    }

    /// The report, as the worker stores it for the callers waiting on
    /// `tag` (and logs it).
    pub fn stored(&self, tag: &str) -> StoredError {
        self.report(tag).stored()
    }
}
