//! Errors of snowflake IDs: the clock, the snowflake keeper and its
//! high-water mark (the state file and `snowflake_high_water`), the
//! layout's limits, and the SQL helpers that take IDs apart or make their
//! text. Each arm declares one error: SQLSTATE, message, hint.

use pgrx::pg_sys::errcodes::PgSqlErrorCode::*;

use super::{misrouted, IdgenError, Report};
use crate::snowflake::backup_copy::BACKUP_LABEL_OLD;
use crate::snowflake::state_file::STATE_FILE;

/// The report of an error about snowflake IDs.
pub(super) fn report(error: &IdgenError) -> Report {
    use IdgenError::*;
    match error {
        SnowflakeClockBehind { generator, lead_ms, max_lead_ms, waited_ms } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "snowflake time ({generator} generator) is {lead_ms} ms ahead of the wall clock, more than pg_idgen.snowflake_max_lead ({max_lead_ms} ms), and the clock cannot catch up within pg_idgen.snowflake_max_wait (waited {waited_ms} ms)"
            ),
            "The clock stepped back (or IDs were asked for faster than the layout allows). Wait for it to catch up, fix the time source, or raise pg_idgen.snowflake_max_lead or pg_idgen.snowflake_max_wait.",
        ),
        SnowflakeKeeperNotRunning { waited_ms } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "the pg_idgen snowflake keeper is not running, so no snowflake ID can be issued beyond the high-water mark on disk (waited {waited_ms} ms)"
            ),
            "Check the server log for why the \"pg_idgen snowflake keeper\" background worker exited or did not start; the postmaster restarts it 1 s after it exits. If no worker slot is free, raise max_worker_processes and restart the server.",
        ),
        SnowflakeStateNotWritten { problem, waited_ms } => Report::new(
            ERRCODE_IO_ERROR,
            format!(
                "the snowflake keeper cannot write pg_idgen_snowflake.state: {problem} (waited {waited_ms} ms)"
            ),
            "Free space, or fix the permissions, in the data directory; snowflake IDs resume as soon as the keeper can write the file (the server log has its WARNING).",
        ),
        SnowflakeKeeperSlow { waited_ms } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "the snowflake keeper has not finished writing pg_idgen_snowflake.state within {waited_ms} ms"
            ),
            "The disk is slow to fsync. Raise pg_idgen.snowflake_persist_ahead so the keeper writes earlier, or pg_idgen.snowflake_max_wait.",
        ),
        SnowflakeMarkNotLogged { problem, waited_ms } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "no snowflake ID can be issued: the high-water mark is not WAL-logged ({problem}); waited {waited_ms} ms"
            ),
            "pg_idgen commits the snowflake high-water mark in the table snowflake_high_water of pg_idgen.snowflake_database before it issues IDs up to it, so that standbys, restores and pg_upgrade continue above every ID. Install pg_idgen there (CREATE EXTENSION pg_idgen, or ALTER EXTENSION pg_idgen UPDATE after updating the library), or set pg_idgen.snowflake_database to a database that has it and restart.",
        ),
        SnowflakeStateFile { problem, io } => Report::new(
            if *io { ERRCODE_IO_ERROR } else { ERRCODE_DATA_CORRUPTED },
            format!(
                "pg_idgen cannot use the snowflake state file \"pg_idgen_snowflake.state\": {problem}"
            ),
            "Move the damaged file aside and start the server: it continues above the high-water mark WAL-logged in snowflake_high_water, and writes the file anew. Do not write a time into it by hand (see \"Recovering the snowflake state file\" in the pg_idgen README).",
        ),
        StateFileWriteFailed { problem } => Report::new(
            ERRCODE_IO_ERROR,
            format!("pg_idgen: could not write {STATE_FILE}: {problem}"),
            "Snowflake IDs wait until it can be written; check the data directory's space and permissions.",
        ),
        SnowflakeMarkLowered { operation } => Report::new(
            ERRCODE_CHECK_VIOLATION,
            format!(
                "{operation} on snowflake_high_water would lose or lower the snowflake high-water mark: a promoted standby, a restore or a restart would then start below IDs already issued"
            ),
            "Leave the row to the snowflake keeper, which only raises it. A superuser who means it (no snowflake ID issued so far is kept anywhere) runs the statement after SET LOCAL pg_idgen.allow_max_id_decrease = on in the same transaction.",
        ),
        SnowflakeServerMayBeACopy { machine_id, timeline } => Report::new(
            ERRCODE_WARNING,
            format!(
                "pg_idgen: this primary started from a base backup and still runs on the backup's timeline {timeline}, with pg_idgen.machine_id = {machine_id}: if the server it was copied from is still running with that machine id, both issue the same snowflake IDs"
            ),
            format!(
                "Give one of the two its own pg_idgen.machine_id (or 'lease') and restart it. A standby that was promoted, or a restore with recovery.signal, starts a new timeline and is not a copy. If the original is gone for good (the server was moved), remove {BACKUP_LABEL_OLD} from the data directory to end this warning."
            ),
        ),
        SnowflakeExhausted { generator, time_bits, ended } => Report::new(
            ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
            format!(
                "snowflake time of the {generator} generator is used up: its {time_bits} bits of milliseconds ended at {ended}"
            ),
            match *generator {
                "JavaScript-safe" => "The JavaScript-safe layout always has 41 time bits: use a later pg_idgen.snowflake_epoch (restart), or snowflake_nextval().",
                _ => "Use a later pg_idgen.snowflake_epoch or more pg_idgen.snowflake_time_bits for new IDs.",
            },
        ),
        SnowflakeFieldTooLarge { field, value, bits } => Report::new(
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "snowflake {field} {value} does not fit the layout's {bits} {field} bits (at most {})",
                (1i128 << bits) - 1
            ),
            "Write the machine id and sequence as snowflake_format() does, within the layout set by pg_idgen.snowflake_machine_bits and pg_idgen.snowflake_sequence_bits.",
        ),
        SnowflakeMachineTooLarge { machine, machine_bits } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "pg_idgen.machine_id = {machine} does not fit the JavaScript-safe layout's {machine_bits} machine bits"
            ),
            "Give servers that hand out JavaScript-safe IDs machine ids 0 to 15.",
        ),
        BadSnowflakeId { id, problem } => Report::new(
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("{id} is not a snowflake ID: {problem}"),
            "Pass an ID made by snowflake_nextval() on a server with the same layout settings.",
        ),
        BadSnowflakeText { text } => Report::new(
            ERRCODE_INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for a snowflake ID: \"{text}\""),
            "Use the form yyyyMMddHHmmssSSS-machine-sequence in UTC, as snowflake_format() writes it, e.g. 20250623131730192-1-0.",
        ),
        TimestampOutOfRange { problem } => Report::new(
            ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!("timestamp out of range for snowflake IDs: {problem}"),
            "Pass a finite timestamp between pg_idgen.snowflake_epoch and the end of the layout's time bits.",
        ),
        BadLayoutArgument { problem } => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid snowflake layout: {problem}"),
            "Pass the layout the IDs were made with: pg_idgen.snowflake_epoch, pg_idgen.snowflake_machine_bits and pg_idgen.snowflake_sequence_bits (SHOW them, or see snowflake_status); the time takes the rest of the 63 bits.",
        ),
        SnowflakeMarkDropped { database } => Report::new(
            ERRCODE_WARNING,
            format!(
                "dropping pg_idgen in database \"{database}\" (pg_idgen.snowflake_database) drops the snowflake high-water mark: no snowflake ID is issued on this server, in any database, until pg_idgen is created here again"
            ),
            format!(
                "Run CREATE EXTENSION pg_idgen; in database \"{database}\" after the drop (the keeper starts above the last commit or checkpoint plus pg_idgen.snowflake_max_lead), or set pg_idgen.snowflake_database to another database that has pg_idgen and restart."
            ),
        ),
        other => misrouted(other),
    }
}
