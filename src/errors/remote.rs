//! Errors about central servers: `segment_attach` of a tag to a
//! postgres_fdw server, a remote refill that failed on the way there or on
//! the central server, and a central server that is not where a shard left
//! it (`segment::fence`). Each arm declares one error: SQLSTATE, message,
//! hint; the texts a refill's `RefillProblem` shares with them are the
//! functions below the table.

use pgrx::pg_sys::errcodes::PgSqlErrorCode::{self, *};

use super::{
    in_class, misrouted, quote_identifier, quote_literal, IdgenError, Report, SEE_SERVER_LOG,
};

/// The report of an error about a central server.
pub(super) fn report(error: &IdgenError) -> Report {
    use IdgenError::*;
    match error {
        NoSuchServer { server } => Report::new(
            ERRCODE_UNDEFINED_OBJECT,
            format!("server \"{server}\" does not exist"),
            format!(
                "Create it with postgres_fdw: CREATE EXTENSION postgres_fdw; CREATE SERVER {} FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '...', dbname '...', connect_timeout '5', options '{}'); CREATE USER MAPPING FOR CURRENT_USER SERVER {} OPTIONS (user '...', password '...');",
                quote_identifier(server), crate::remote_session::PINNED_OPTIONS, quote_identifier(server)
            ),
        ),
        NotPostgresFdw { server, wrapper } => Report::new(
            ERRCODE_WRONG_OBJECT_TYPE,
            format!(
                "server \"{server}\" uses the foreign-data wrapper \"{wrapper}\", not postgres_fdw"
            ),
            "segment_attach takes ranges through postgres_fdw: name a server created with FOREIGN DATA WRAPPER postgres_fdw.",
        ),
        NoConnectTimeout { server } => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!("server \"{server}\" has no connect_timeout option"),
            format!(
                "Without it a refill can hang on an unreachable server: ALTER SERVER {} OPTIONS (ADD connect_timeout '5');",
                quote_identifier(server)
            ),
        ),
        RemoteSessionUnsafe { server, problem, options } => {
            remote_session_unsafe(server, problem, options.as_deref())
        }
        AttachBelowDetachedMark { tag, server, max_id, mark } => Report::new(
            ERRCODE_DATA_EXCEPTION,
            format!(
                "segment tag \"{tag}\" cannot be attached to server \"{server}\": its central row has max_id {max_id}, but this database already handed out the tag's IDs up to {mark} (id_segment_detached, from when it was attached before)"
            ),
            format!(
                "The central server went back since (a restore, a failover, a row lowered or made anew), and its ranges would repeat IDs. On the central server, raise the row to the largest id_segment_remote.max_id_seen and id_segment_detached.max_id_seen of every server attached to it: UPDATE id_segment SET max_id = <that value>, version = version + 1 WHERE biz_tag = {}; then attach again.",
                quote_literal(tag)
            ),
        ),
        AttachCentralMoved { tag, server, moved } => Report::new(
            ERRCODE_DATA_EXCEPTION,
            format!(
                "segment tag \"{tag}\" cannot be attached to server \"{server}\": the central server is not where this database left it: {moved}"
            ),
            format!(
                "{} Moving the tag to another central server on purpose: create it there above this database's mark (the largest id_segment_detached.max_id_seen of the tag), then run SELECT segment_central_accept() there.",
                central_moved_hint(tag)
            ),
        ),
        RemoteTagMissing { tag, server } => Report::new(
            ERRCODE_UNDEFINED_OBJECT,
            format!("segment tag \"{tag}\" does not exist on server \"{server}\""),
            format!(
                "Create it on the central server first (SELECT segment_create({}) there, or INSERT the tag's row into its id_segment), then attach it here.",
                quote_literal(tag)
            ),
        ),
        NoCentralOrigin { server, view } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "server \"{server}\" has no view {view}, so this server could not tell when it fails over or is restored"
            ),
            "Install or update pg_idgen 0.3.0 on the central server, in the database and schema its id_segment is in (CREATE EXTENSION pg_idgen, or ALTER EXTENSION pg_idgen UPDATE); for an id_segment made there by hand, run there the SQL of examples/sharding/central_by_hand.sql (linked from the README's \"Many servers\"). Then try again.",
        ),
        ForeignTableTaken { name, server } => Report::new(
            ERRCODE_DUPLICATE_TABLE,
            format!(
                "relation \"{name}\" already exists and is not a foreign table of server \"{server}\" with the same remote table"
            ),
            "Drop or rename that relation, then run segment_attach again.",
        ),
        RemoteRefillFailed { server, sqlstate, message, hint } => Report::new(
            PgSqlErrorCode::from(*sqlstate),
            remote_cause(server, *sqlstate, message),
            remote_hint(server, *sqlstate, hint),
        ),
        other => misrouted(other),
    }
}

/// `RemoteSessionUnsafe` (at `segment_attach`, or a refill's
/// `RefillProblem::RemoteSessionUnsafe`): server `server`'s `options`
/// (`problem`: what they lack) do not pin the central session's settings.
pub(super) fn remote_session_unsafe(server: &str, problem: &str, options: Option<&str>) -> Report {
    Report::new(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("server \"{server}\" {problem}"),
        format!(
            "Ranges and machine-id leases are taken through it only when the central server's session flushes each commit, waits at most 10ms for a row lock and ends a transaction left idle: ALTER SERVER {} OPTIONS ({} options {});",
            quote_identifier(server),
            if options.is_some() { "SET" } else { "ADD" },
            quote_literal(&crate::remote_session::fixed_options(options))
        ),
    )
}

/// What went wrong on the way to (or on) central server `server`, for a
/// caught error with `sqlstate` and `message`.
fn remote_cause(server: &str, sqlstate: i32, message: &str) -> String {
    if in_class(sqlstate, ERRCODE_CONNECTION_EXCEPTION) {
        format!("central server \"{server}\" is unreachable: {message}")
    } else if sqlstate == ERRCODE_QUERY_CANCELED as i32 {
        format!(
            "central server \"{server}\" did not answer within pg_idgen.remote_timeout ({} ms): {message}",
            crate::gucs::REMOTE_TIMEOUT_MS.get()
        )
    } else {
        format!("central server \"{server}\" refused the refill: {message}")
    }
}

/// The hint for `remote_cause`: the fix for the causes a central server
/// gives most (permission, a read-only session, no table, unreachable,
/// too slow), else the cause's own hint, else where to look.
fn remote_hint(server: &str, sqlstate: i32, hint: &str) -> String {
    let class = |code: PgSqlErrorCode| in_class(sqlstate, code);
    let server = quote_identifier(server);
    let retried = "The refill is retried with back-off; the tag's callers go on with its cached IDs meanwhile.";
    if sqlstate == ERRCODE_QUERY_CANCELED as i32 {
        format!("A slow or cut-off link, or a central server under load; pg_idgen.remote_timeout bounds each refill. {retried}")
    } else if class(ERRCODE_CONNECTION_EXCEPTION) || class(ERRCODE_OPERATOR_INTERVENTION) {
        format!("Check that the central server runs and that the host and port in the options of server {server} reach it. {retried}")
    } else if sqlstate == ERRCODE_INSUFFICIENT_PRIVILEGE as i32 {
        format!("The central user of this server's user mapping for server {server} needs SELECT and UPDATE on id_segment there: GRANT SELECT, UPDATE ON id_segment TO <that user>; on the central server.")
    } else if sqlstate == ERRCODE_READ_ONLY_SQL_TRANSACTION as i32 {
        format!("The central session is read-only (a standby, or default_transaction_read_only): point server {server} at the primary, e.g. ALTER SERVER {server} OPTIONS (SET host '<primary>'); or list every host with target_session_attrs 'read-write'.")
    } else if sqlstate == ERRCODE_UNDEFINED_TABLE as i32 {
        format!("The central server has no such table: CREATE EXTENSION pg_idgen there, or correct the schema_name and table_name options of the foreign table over server {server}.")
    } else if !hint.is_empty() && hint != SEE_SERVER_LOG {
        hint.to_string()
    } else {
        format!("The central server's log has the rest (the error's CONTEXT names the remote SQL command). {retried}")
    }
}

/// The recovery from a central server that is not where a shard left it
/// (a refill's `CentralMoved`, an attach's `AttachCentralMoved`): one step
/// on the central server, safe for the shards that have not noticed yet.
pub(super) fn central_moved_hint(tag: &str) -> String {
    format!(
        "It may have lost ranges any attached server took; no ID is handed out until, on the central server, the row of every tag attached servers draw from — not only this one: the accept lifts the refusal for all of them — is raised to the largest id_segment_remote.max_id_seen (or id_segment_detached.max_id_seen) of those servers for that tag, for this one: UPDATE id_segment SET max_id = greatest(max_id, <that value>), version = version + 1 WHERE biz_tag = {}; then SELECT segment_central_accept() there. After a switchover to a synchronous standby, the accept alone will do.",
        quote_literal(tag)
    )
}
