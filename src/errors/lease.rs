//! Errors of machine-id leases (`pg_idgen.machine_id = 'lease'`): no lease
//! held, the lease's ceiling reached, the central server's clock unusable,
//! a lease table the keeper refuses to touch. Each arm declares one error:
//! SQLSTATE, message, hint.

use pgrx::pg_sys::errcodes::PgSqlErrorCode::*;

use super::{misrouted, IdgenError, LeaseTableProblem, Report};
use crate::snowflake::lease::CLOCK_VIEW_SQL;

/// The report of an error about the machine-id lease.
pub(super) fn report(error: &IdgenError) -> Report {
    use IdgenError::*;
    match error {
        SnowflakeNoLease { waited_ms, why } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("this server holds no snowflake machine id lease (waited {waited_ms} ms): {why}"),
            "pg_idgen.machine_id = 'lease': the lease keeper takes a machine id from pg_idgen.lease_table (in pg_idgen.lease_database) and renews it; the message says why it holds none (also in snowflake_status.lease_problem and the server log, \"pg_idgen lease keeper\"), and how to mend it.",
        ),
        SnowflakeLeaseCeiling { waited_ms, why } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "snowflake time reached the ceiling of this server's machine id lease (waited {waited_ms} ms for a renewal){}",
                why.as_ref().map_or(String::new(), |why| format!(": {why}"))
            ),
            "The lease keeper raises the ceiling at each renewal; if renewals fail (see the server log), IDs stop until they succeed again.",
        ),
        LeaseCentralClock { problem } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            problem.clone(),
            format!("Create on the central server, beside the lease table, {CLOCK_VIEW_SQL}; and keep its clock and every leasing server's right (NTP)."),
        ),
        LeaseTableRefused { setting, value, why } => lease_table_refused(setting, value, why),
        other => misrouted(other),
    }
}

/// `LeaseTableRefused`: the relation `setting` = `value` names is not one
/// the lease keeper may use, for `why`.
fn lease_table_refused(setting: &str, value: &str, why: &LeaseTableProblem) -> Report {
    match why {
        LeaseTableProblem::NotQualified => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "{setting} \"{value}\" is not a schema-qualified name: the lease keeper never looks a table up on a search path, where a role with CREATE on a schema could put a relation of its own first"
            ),
            format!(
                "Set {setting} to the schema and name of the foreign table (its default is 'public.{}') in postgresql.conf, and restart the server.",
                if setting == "pg_idgen.lease_table" { "idgen_machine_lease" } else { "idgen_lease_clock" }
            ),
        ),
        LeaseTableProblem::NotForeign { relation, kind, owner } => Report::new(
            ERRCODE_WRONG_OBJECT_TYPE,
            format!(
                "{setting} \"{value}\" is {kind} {relation} owned by role \"{owner}\", not a foreign table: the lease keeper reads and writes only a foreign table over the central server's, and leaves this one alone"
            ),
            format!(
                "Create the foreign table over the central server's as the many-servers guide shows, under a name nothing else uses, and set {setting} to it; a relation nobody here created may be an attempt to run code as the lease keeper: look at it, then drop it."
            ),
        ),
        LeaseTableProblem::UntrustedOwner { relation, owner } => Report::new(
            ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!(
                "{setting} \"{value}\" is foreign table {relation} owned by role \"{owner}\", which is neither a superuser nor the owner of pg_idgen: the lease keeper runs its statements as the table's owner and leaves it alone"
            ),
            format!(
                "If a superuser created it for the lease keeper, make one its owner: ALTER FOREIGN TABLE {relation} OWNER TO CURRENT_USER; (run as that superuser). Otherwise it may be an attempt to run code as the lease keeper: look at it, then drop it."
            ),
        ),
    }
}
