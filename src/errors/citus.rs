//! Errors of Citus and of other servers sharing a machine id: a node's
//! machine id from its group (or shared with another node or a replicating
//! cluster), a worker's refills from the coordinator, and what a worker or
//! Citus may not do with the extension's tags and tables. Each
//! arm declares one error: SQLSTATE, message, hint.

use pgrx::pg_sys::errcodes::PgSqlErrorCode::{self, *};

use super::{misrouted, quote_literal, IdgenError, NotCoordinator, Report};

/// What to do when two nodes share a machine id.
const OWN_MACHINE_ID: &str = "Give every node of the Citus cluster its own machine id: pg_idgen.machine_id = 'citus' on every node uses each node's Citus group id; or set a number no other node uses. Restart the node you change.";

/// The coordinator's catch-up (`segment::citus_catch_up`), for hints: it
/// raises every tag above what every node took and holds.
pub(super) const CATCH_UP: &str = "SELECT * FROM segment_citus_catch_up();";

/// The report of an error about Citus.
pub(super) fn report(error: &IdgenError) -> Report {
    use IdgenError::*;
    match error {
        SnowflakeNoCitusGroup { group, machine_bits, .. } if *group >= 0 => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "this node's Citus group id {group} does not fit in pg_idgen.snowflake_machine_bits = {machine_bits}, so it cannot be its snowflake machine id (pg_idgen.machine_id = 'citus')"
            ),
            "Give every node of the Citus cluster enough machine bits (pg_idgen.snowflake_machine_bits, with as many fewer sequence bits, the same on every node; a restart), or set this node's pg_idgen.machine_id to a number no other node uses.",
        ),
        SnowflakeNoCitusGroup { waited_ms, why, .. } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "this node has no Citus group to use as its snowflake machine id yet (waited {waited_ms} ms): {why}"
            ),
            "pg_idgen.machine_id = 'citus' takes the node's group id from Citus's metadata in pg_idgen.snowflake_database, once the node is in a Citus cluster: on the coordinator, add this node (SELECT citus_add_node('<host>', <port>)), or on a coordinator, SELECT citus_set_coordinator_host('<host>', <port>). Citus must be installed in pg_idgen.snowflake_database (CREATE EXTENSION citus).",
        ),
        SnowflakeMachineIdShared { machine, nodes, proven: true } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "snowflake machine id {machine} is also the machine id of Citus node {} with the same layout: both would issue the same IDs, so neither issues any",
                nodes.join(", ")
            ),
            OWN_MACHINE_ID,
        ),
        SnowflakeMachineIdShared { machine, nodes, proven: false } => Report::new(
            ERRCODE_WARNING,
            format!(
                "snowflake machine id {machine} is also the machine id of Citus node {} (under another layout)",
                nodes.join(", ")
            ),
            OWN_MACHINE_ID,
        ),
        SnowflakeMachineIdReplicated { machine, system_identifier } => Report::new(
            ERRCODE_WARNING,
            format!(
                "another live cluster (system identifier {system_identifier}) issues snowflake IDs under this server's machine id {machine}: its mark reaches this database by logical replication"
            ),
            "Give each server of a logical replication its own pg_idgen.machine_id (a publisher and its subscriber both issue IDs, as a blue/green pair or two-way replication does), and restart the one you change; meanwhile this server stays above the other's IDs only as far as replication is current.",
        ),
        SnowflakeMachineRefused { problem } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            problem.clone(),
            OWN_MACHINE_ID,
        ),
        CitusCoordinatorFailed { tag, message } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("the Citus coordinator did not answer a refill of segment tag \"{tag}\": {message}"),
            "Check that the coordinator is up and reachable from this node with Citus's own settings (SELECT * FROM citus_check_cluster_node_health()); the tag's sessions go on with the IDs cached here meanwhile, and refills are retried.",
        ),
        CitusCoordinatorRefused { tag, sqlstate, message, hint } => Report::new(
            PgSqlErrorCode::from(*sqlstate),
            format!("the Citus coordinator refused a refill of segment tag \"{tag}\": {message}"),
            format!("On the coordinator: {hint}"),
        ),
        CitusTagMissing { tag } => Report::new(
            ERRCODE_UNDEFINED_OBJECT,
            format!(
                "segment tag \"{tag}\" does not exist on the Citus coordinator, where this worker takes its ranges"
            ),
            format!(
                "Create it on the coordinator, where every node takes its ranges from: SELECT segment_create({}); — on the coordinator, not here. It starts above what any worker already took of it (a tag the coordinator lost in a failover or restore), or says which start to use.",
                quote_literal(tag)
            ),
        ),
        CitusCreateBelowWorkers { tag, start, floor, step } => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "segment tag \"{tag}\" cannot start at {start}: a Citus worker already took its IDs up to {floor} (from a tag of that name dropped, or lost with a failover or restore of the coordinator)"
            ),
            format!(
                "Start it above them: SELECT segment_create({}, start => {}{});",
                quote_literal(tag),
                floor.saturating_add(1),
                if *step == 1000 { String::new() } else { format!(", step => {step}") }
            ),
        ),
        CitusNewRowUnanswered { tag, nodes } => Report::new(
            ERRCODE_CONNECTION_FAILURE,
            format!(
                "segment tag \"{tag}\" cannot be made on the Citus coordinator while a worker does not say what it took of it ({nodes})"
            ),
            "A worker may keep IDs of a tag of this name (dropped, or lost with a failover), and the new row must go on above them; nothing was changed. Bring the workers back (SELECT * FROM citus_check_cluster_node_health();), activate a disabled one (SELECT citus_activate_node('<host>', <port>);), and run it again.",
        ),
        CitusRenameBelowWorkers { old, new, max_id, floor } => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "segment tag \"{old}\" cannot be renamed to \"{new}\": a Citus worker already took IDs of \"{new}\" up to {floor}, above where \"{old}\" is ({max_id})"
            ),
            format!(
                "Move it above them first: SELECT segment_setval({}, {floor}); then rename it.",
                quote_literal(old)
            ),
        ),
        CitusCreateOnWorker { tag } => Report::new(
            ERRCODE_FEATURE_NOT_SUPPORTED,
            format!(
                "segment tag \"{tag}\" cannot be created on a Citus worker: on Citus every node draws a tag from the coordinator's id_segment"
            ),
            format!(
                "Create it on the coordinator: SELECT segment_create({}); — every worker then draws it with no step of its own. To give this worker an ID space of its own anyway, add force => true.",
                quote_literal(tag)
            ),
        ),
        CitusNotCoordinator {
            function,
            elsewhere: NotCoordinator::Worker,
        } => Report::new(
            ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("{function}() runs on the Citus coordinator only, and this node is a worker"),
            "Run it on the coordinator (group 0): SELECT nodename, nodeport FROM pg_dist_node WHERE groupid = 0; — a worker's refills call segment_citus_range() there by themselves.",
        ),
        CitusNotCoordinator {
            function,
            elsewhere: NotCoordinator::NotJoined,
        } => Report::new(
            ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("{function}() runs on the Citus coordinator only, and this node is in no Citus cluster yet"),
            "Run it on the coordinator once the cluster is set up; until then this node's refills take ranges from its own id_segment, and there is nothing to catch up.",
        ),
        CitusNotCoordinator {
            function,
            elsewhere: NotCoordinator::NoCitus,
        } => Report::new(
            ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("{function}() runs on the Citus coordinator only, and Citus is not installed in this database"),
            "Nothing to do on a server without Citus: its refills take ranges from its own id_segment. On a Citus cluster, run it on the coordinator.",
        ),
        CitusCatchUpUnanswered { nodes } => Report::new(
            ERRCODE_CONNECTION_FAILURE,
            format!(
                "the Citus coordinator cannot catch up its segment tags: not every worker said what it took ({nodes})"
            ),
            "On a new timeline (a failover, a point-in-time recovery) the coordinator hands out no range until every primary worker has said what it took, since one that took IDs the coordinator lost may be among them; nothing was changed. Bring those workers back (SELECT * FROM citus_check_cluster_node_health();), and activate a disabled one again (SELECT citus_activate_node('<host>', <port>);); refills are retried by themselves.",
        ),
        CitusExtensionTable { table, function } => Report::new(
            ERRCODE_FEATURE_NOT_SUPPORTED,
            format!(
                "{function}() cannot take pg_idgen's table \"{table}\": each Citus node keeps the extension's tables local — the workers draw segment IDs from the coordinator's id_segment, and each node's snowflake mark is its own"
            ),
            "Leave it a local table: create tags on the coordinator (SELECT segment_create(...)), and every node draws them with no set-up of its own.",
        ),
        other => misrouted(other),
    }
}
