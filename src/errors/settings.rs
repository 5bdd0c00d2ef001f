//! Errors about pg_idgen's settings and what they depend on: the library
//! not preloaded, a bad value, a setting the next start would refuse, the
//! machine id snowflake IDs (and the fallback) need, no worker slot for
//! the snowflake keeper, a layout changed under the state file. Each arm
//! declares one error: SQLSTATE, message, hint.

use pgrx::pg_sys::errcodes::PgSqlErrorCode::{self, *};

use super::{misrouted, IdgenError, Report};

/// The hint of a snowflake fallback without a machine id (at a reload,
/// `FallbackNeedsMachineId`, or when it would stand in,
/// `FallbackWithoutMachineId`).
pub(super) const FALLBACK_MACHINE_ID_HINT: &str = "Servers that fall back together need machine ids of their own, or they hand out the same IDs. Set pg_idgen.machine_id to a number no other server uses (or 'hostname', or 'lease') in postgresql.conf and restart.";

/// The report of an error about a setting.
pub(super) fn report(error: &IdgenError) -> Report {
    use IdgenError::*;
    match error {
        NotPreloaded => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "pg_idgen must be loaded via shared_preload_libraries",
            "Add pg_idgen to shared_preload_libraries in postgresql.conf and restart the server.",
        ),
        BadSetting { name, value, problem, hint } => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"{name}\": \"{value}\": {problem}"),
            hint.clone(),
        ),
        NextStartWouldFail { sqlstate, message, hint } => Report::new(
            PgSqlErrorCode::from(*sqlstate),
            format!(
                "the configuration files hold a setting the next server start will refuse: {message}"
            ),
            format!("{hint} The running server keeps its settings until it restarts."),
        ),
        MachineIdNotSet { function } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("{function} needs pg_idgen.machine_id, which is not set on this server"),
            "Every server that issues snowflake IDs needs a machine id no other server uses: set pg_idgen.machine_id in postgresql.conf to a number (0 is fine for a single server), to 'hostname' (pods of a StatefulSet) or to 'lease' (from a central server), and restart.",
        ),
        HostnameMachineIdDoubt { machine, doubt } => Report::new(
            ERRCODE_WARNING,
            format!("pg_idgen.machine_id = 'hostname' gives machine id {machine}, but {doubt}"),
            "Two servers with the same machine id can issue the same snowflake IDs. 'hostname' suits the pods of one StatefulSet (pg-0, pg-1, ...); elsewhere set pg_idgen.machine_id to a number unique to each server.",
        ),
        FallbackNeedsMachineId => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            "pg_idgen.snowflake_fallback cannot be on: pg_idgen.machine_id is not set on this server",
            FALLBACK_MACHINE_ID_HINT,
        ),
        PersistAheadAboveMaxLead { persist_ahead_ms, max_lead_ms, window_ms } => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "pg_idgen.snowflake_persist_ahead ({persist_ahead_ms} ms) is above pg_idgen.snowflake_max_lead ({max_lead_ms} ms): the snowflake keeper writes the high-water mark at most {window_ms} ms ahead"
            ),
            "After a crash, IDs resume up to pg_idgen.snowflake_persist_ahead ahead of the clock, and every call would wait for the clock beyond pg_idgen.snowflake_max_lead: lower snowflake_persist_ahead, or raise snowflake_max_lead, and reload.",
        ),
        SnowflakeKeeperNotRegistered { max_worker_processes } => Report::new(
            ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!(
                "pg_idgen cannot register its snowflake keeper: max_worker_processes = {max_worker_processes} leaves no background worker slot for it"
            ),
            "Raise max_worker_processes in postgresql.conf (pg_idgen needs one slot for its keeper, plus one per database using segment IDs) and start the server again.",
        ),
        SnowflakeSettingsChanged { change, generator, high_id, ahead_ms } => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "pg_idgen snowflake settings changed since pg_idgen_snowflake.state was written ({change}): every new {generator} ID must stay above {high_id}, which is now {ahead_ms} ms ahead of the clock, more than pg_idgen.snowflake_max_lead"
            ),
            "Restore the previous pg_idgen.snowflake_epoch and bit widths: a later epoch, or more time bits, makes new IDs numerically overlap the old ones. Only if no snowflake ID issued before is kept anywhere, remove pg_idgen_snowflake.state to start over.",
        ),
        other => misrouted(other),
    }
}
