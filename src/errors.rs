//! Every error and warning pg_idgen reports, in one place: its SQLSTATE,
//! its message and the hint that names the fix. Code elsewhere builds an
//! `IdgenError` and calls `raise()` (ERROR), `warn()` (WARNING) or
//! `stored()` (a worker's error kept for its callers); nothing else calls
//! `ereport`. Each of them is `#[track_caller]`, so the report's LOCATION
//! names the line that raised it, not this file.

use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::PgLogLevel;

use crate::catalog::{quote_identifier, quote_literal};
use crate::segment::policy::RefillProblem;
use crate::snowflake::backup_copy::BACKUP_LABEL_OLD;
use crate::snowflake::lease::CLOCK_VIEW_SQL;
use crate::snowflake::state_file::STATE_FILE;

/// Why the lease keeper refuses a relation a setting names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseTableProblem {
    /// The setting is not `schema.name`.
    NotQualified,
    /// Not a foreign table: `kind` as a user reads it ("table", "view").
    NotForeign {
        relation: String,
        kind: String,
        owner: String,
    },
    /// A foreign table whose owner is neither a superuser nor the
    /// extension's owner.
    UntrustedOwner { relation: String, owner: String },
}

/// The longest tag a slot (and `id_segment.biz_tag`, `varchar(64)`) holds.
pub const TAG_MAX_BYTES: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdgenError {
    NotPreloaded,
    NullArgument {
        what: &'static str,
    },
    EmptyTag,
    TagTooLong {
        tag: String,
    },
    UnknownTag {
        tag: String,
    },
    TagExists {
        tag: String,
    },
    /// `segment_drop` of a tag a column default (or generated column)
    /// still calls `segment_nextval` with.
    TagInUse {
        tag: String,
        /// What uses it (`default_check::User::describe`), and the
        /// statement that takes the use away.
        user: String,
        undo: String,
        others: usize,
    },
    /// A column default names a tag that does not exist as the transaction
    /// that created or altered its table commits.
    DefaultOfUnknownTag {
        user: String,
        tag: String,
    },
    BadStep {
        step: i64,
    },
    BadStart {
        start: i64,
    },
    BadCount {
        n: i32,
    },
    BadReserveCount {
        n: i32,
        max: i32,
    },
    BadBase62 {
        input: String,
        problem: crate::base62::Base62Error,
    },
    ReadOnly {
        function: &'static str,
    },
    DuringRecovery {
        function: &'static str,
    },
    TooManyTags {
        max_tags: i32,
        /// The databases holding slots and how many, most first.
        holders: Vec<(String, usize)>,
    },
    /// The database holds its quota of slots (`pg_idgen.max_tags_per_database`).
    TagQuotaReached {
        tag: String,
        database: String,
        held: usize,
    },
    WorkerNotStarted {
        database: String,
    },
    RefillTimeout {
        tag: String,
        waited_ms: i64,
    },
    BadSetting {
        name: &'static str,
        value: String,
        problem: String,
        hint: String,
    },
    /// After a reload: the configuration files hold settings the next
    /// start would refuse (`refusal`: that start's error).
    NextStartWouldFail {
        sqlstate: i32,
        message: String,
        hint: String,
    },
    SnowflakeClockBehind {
        generator: &'static str,
        lead_ms: i64,
        max_lead_ms: i64,
        waited_ms: i64,
    },
    /// No keeper process: nothing can raise the persisted limit.
    SnowflakeKeeperNotRunning {
        waited_ms: i64,
    },
    /// The keeper runs but its writes of the state file fail.
    SnowflakeStateNotWritten {
        problem: String,
        waited_ms: i64,
    },
    /// The keeper runs, its writes do not fail, but none finished in time.
    /// The machine id is leased and this server holds no lease now.
    SnowflakeNoLease {
        waited_ms: i64,
        why: String,
    },
    /// `pg_idgen.machine_id = 'citus'` and the node has no usable group:
    /// in no Citus cluster yet (`group` -1), or one that does not fit.
    SnowflakeNoCitusGroup {
        waited_ms: i64,
        group: i64,
        machine_bits: u32,
        why: String,
    },
    /// A Citus worker's refill: the coordinator did not answer (Citus's
    /// `run_command_on_coordinator` failed: `message` is its text).
    CitusCoordinatorFailed {
        tag: String,
        message: String,
    },
    /// A Citus worker's refill: the coordinator refused it.
    CitusCoordinatorRefused {
        tag: String,
        sqlstate: i32,
        message: String,
        hint: String,
    },
    /// A Citus worker's tag has no row on the coordinator either.
    CitusTagMissing {
        tag: String,
    },
    /// `segment_create` on a Citus worker, not forced.
    CitusCreateOnWorker {
        tag: String,
    },
    /// `segment_citus_range` called on a node that is not the coordinator.
    CitusNotCoordinator,
    /// Other nodes of this Citus cluster have this node's snowflake machine
    /// id: with the same layout (`proven`) their IDs can be equal.
    SnowflakeMachineIdShared {
        machine: i64,
        nodes: Vec<String>,
        proven: bool,
    },
    /// Snowflake IDs refused while `SnowflakeMachineIdShared` is proven
    /// (`problem`: its message).
    SnowflakeMachineRefused {
        problem: String,
    },
    /// A Citus function asked to distribute one of the extension's tables.
    CitusExtensionTable {
        table: String,
        function: String,
    },
    /// The lease keeper cannot use the central server's clock (raised in
    /// its claim's or renewal's transaction, which it rolls back).
    LeaseCentralClock {
        problem: String,
    },
    /// The lease keeper refuses the relation a setting names
    /// (`pg_idgen.lease_table`, `pg_idgen.lease_clock_table`).
    LeaseTableRefused {
        setting: &'static str,
        value: String,
        why: LeaseTableProblem,
    },
    /// Snowflake time reached the ceiling of the lease.
    SnowflakeLeaseCeiling {
        waited_ms: i64,
        /// What the lease keeper says is wrong, if anything.
        why: Option<String>,
    },
    SnowflakeKeeperSlow {
        waited_ms: i64,
    },
    /// The keeper cannot read or commit the WAL-logged mark.
    SnowflakeMarkNotLogged {
        problem: String,
        waited_ms: i64,
    },
    /// The keeper could not be registered at server start.
    SnowflakeKeeperNotRegistered {
        max_worker_processes: i32,
    },
    /// The state file exists but cannot be used (at server start).
    SnowflakeStateFile {
        problem: String,
        io: bool,
    },
    /// The settings changed since the state file was written, so that IDs
    /// would have to run far ahead of the clock (at server start).
    SnowflakeSettingsChanged {
        change: String,
        generator: &'static str,
        high_id: i64,
        ahead_ms: i64,
    },
    SnowflakeExhausted {
        generator: &'static str,
        time_bits: u32,
        ended: String,
    },
    /// A field of the friendly text form beyond the layout.
    SnowflakeFieldTooLarge {
        field: &'static str,
        value: i64,
        bits: u32,
    },
    SnowflakeMachineTooLarge {
        machine: i64,
        machine_bits: u32,
    },
    BadSnowflakeId {
        id: i64,
        problem: String,
    },
    BadSnowflakeText {
        text: String,
    },
    TimestampOutOfRange {
        problem: String,
    },
    /// Something that cannot happen did; `context` says where.
    Internal {
        context: &'static str,
        message: String,
    },
    /// An UPDATE tried to lower `id_segment.max_id`.
    MaxIdDecrease {
        tag: String,
        from: i64,
        to: i64,
    },
    /// An UPDATE tried to change `id_segment.biz_tag`.
    TagRenamed {
        from: String,
        to: String,
    },
    /// The transaction that created a tag could not raise its `max_id`
    /// past the IDs it handed out, just before committing.
    MaxIdNotRaised {
        tag: String,
        high_water: i64,
        why: String,
    },
    /// `segment_attach`: no foreign server of that name.
    NoSuchServer {
        server: String,
    },
    /// `segment_attach`: the server is not a postgres_fdw one.
    NotPostgresFdw {
        server: String,
        wrapper: String,
    },
    /// `segment_attach`: the server has no `connect_timeout`.
    NoConnectTimeout {
        server: String,
    },
    /// `segment_attach`, or a remote refill: the server's `options` do not
    /// pin the central session's settings (`remote_session.rs`).
    RemoteSessionUnsafe {
        server: String,
        problem: String,
        options: Option<String>,
    },
    /// `segment_attach`: the tag was attached here before and dropped, and
    /// the central row is now below what this database took from it.
    AttachBelowDetachedMark {
        tag: String,
        server: String,
        max_id: i64,
        mark: i64,
    },
    /// `segment_attach`: the central server is not where this database saw
    /// it last (`segment::fence`), and was not accepted there since.
    AttachCentralMoved {
        tag: String,
        server: String,
        moved: crate::segment::fence::Refusal,
    },
    /// `segment_attach`: the central server has no row for the tag.
    RemoteTagMissing {
        tag: String,
        server: String,
    },
    /// `segment_attach` or a refill: the central server has no
    /// `id_segment_origin` in the remote schema, so a shard could not tell
    /// a failover or restore.
    NoCentralOrigin {
        server: String,
        view: String,
    },
    /// `segment_attach`: the foreign table's name is taken by another table.
    ForeignTableTaken {
        name: String,
        server: String,
    },
    /// The calling transaction wrote or locked the row a refill needs.
    RowHeldByCaller {
        tag: String,
    },
    /// A draw of a tag the calling transaction attached (or whose
    /// `id_segment_remote` row it changed) and has not committed.
    AttachedByCaller {
        tag: String,
    },
    /// The function's `id_segment` is gone: the extension was dropped
    /// while the statement ran.
    ExtensionDropped,
    /// A refill failed in the worker; the worker's own report, carried over.
    RefillFailed {
        tag: String,
        sqlstate: i32,
        message: String,
        hint: String,
    },
    /// A waiting call gave up at `refill_timeout` while refills failed
    /// with an error that may pass (a locked row, a lost connection).
    RefillTimedOutBecause {
        tag: String,
        waited_ms: i64,
        sqlstate: i32,
        message: String,
        hint: String,
    },
    /// The IDs of a tag created by the calling transaction ran out.
    TagExhausted {
        tag: String,
    },
    /// A refill's UPDATE raised `max_id` by less than it asked: something
    /// on `id_segment` holds each update back (logged as a WARNING).
    RangeShortened {
        tag: String,
        asked: u64,
        granted: u64,
        central: bool,
    },
    /// The worker's refill found the row (or the table) locked: the local
    /// one, or for an attached tag (`central`: its server) the central one.
    RefillRowLocked {
        central: Option<String>,
    },
    /// A refill of an attached tag failed on its central server (or on
    /// the way there): the cause's SQLSTATE and message, named.
    RemoteRefillFailed {
        server: String,
        sqlstate: i32,
        message: String,
        hint: String,
    },
    /// SPI itself failed in a refill (not a PostgreSQL error).
    RefillSpiFailed {
        tag: String,
        message: String,
    },
    /// A trigger changed the update that gives a tag's untaken IDs back to
    /// its row at a clean stop (`distributor::give_back`).
    GiveBackRewritten {
        tag: String,
        wanted: i64,
        written: i64,
    },
    /// A range the worker took could not be put into shared memory.
    RangeNotCached {
        tag: String,
        first: i64,
        last: i64,
        problem: String,
    },
    /// A refill worker exited before it could serve its database.
    WorkerExitedWhileStarting {
        database: u32,
    },
    /// WARNING: `segment_nextval` hands out snowflake IDs instead
    /// (`pg_idgen.snowflake_fallback`).
    FallbackIds {
        tag: String,
        waited_ms: i64,
        cause: String,
        count: u64,
    },
    /// A snowflake ID was asked for, but `pg_idgen.machine_id` is not set
    /// on this server.
    MachineIdNotSet {
        function: &'static str,
    },
    /// `segment_currval` before this session drew the tag.
    CurrvalNotYetDefined {
        tag: String,
    },
    /// `segment_setval` of a tag attached to a central server.
    SetvalOfAttachedTag {
        tag: String,
        server: String,
    },
    /// `segment_setval` of a tag the calling transaction created.
    SetvalOfNewTag {
        tag: String,
    },
    /// `segment_setval` to a negative value.
    BadSetvalValue {
        value: i64,
    },
    /// The layout arguments of an IMMUTABLE snowflake helper make no
    /// layout.
    BadLayoutArgument {
        problem: String,
    },
    /// `pg_idgen.snowflake_fallback` turned on (or on at start) while
    /// `pg_idgen.machine_id` is not set.
    FallbackNeedsMachineId,
    /// The snowflake keeper found `snowflake_persist_ahead` above
    /// `snowflake_max_lead` (a WARNING): it writes the mark no further ahead
    /// than the window.
    PersistAheadAboveMaxLead {
        persist_ahead_ms: i32,
        max_lead_ms: i32,
        window_ms: i32,
    },
    /// `pg_idgen.snowflake_fallback` would stand in, but this server's
    /// `pg_idgen.machine_id` was never set.
    FallbackWithoutMachineId {
        tag: String,
        waited_ms: i64,
        cause: String,
    },
    /// WARNING: `pg_idgen.machine_id = 'hostname'` on a host whose name
    /// may not be unique.
    HostnameMachineIdDoubt {
        machine: i64,
        doubt: String,
    },
    /// WARNING: the snowflake keeper could not write the state file.
    StateFileWriteFailed {
        problem: String,
    },
    /// A DELETE, TRUNCATE or lowering UPDATE of `snowflake_high_water`.
    SnowflakeMarkLowered {
        operation: &'static str,
    },
    /// A warning: a primary started from a base backup, still on the
    /// backup's timeline, with a fixed machine id.
    SnowflakeServerMayBeACopy {
        machine_id: i64,
        timeline: u32,
    },
}

/// An error the refill worker meets, as it is stored in shared memory for
/// the callers that wait on the tag.
pub struct StoredError {
    pub sqlstate: i32,
    pub message: String,
    pub hint: String,
}

impl StoredError {
    /// Whether the next refill may well succeed (a locked row, a lost
    /// race, a connection or resource problem): waiting callers keep
    /// waiting until `refill_timeout`, then report it. Anything else (no
    /// such row, a bad step, exhaustion) is reported to them at once.
    pub fn is_transient(&self) -> bool {
        use PgSqlErrorCode::*;
        let transient = [
            ERRCODE_LOCK_NOT_AVAILABLE,
            ERRCODE_T_R_SERIALIZATION_FAILURE,
            ERRCODE_T_R_DEADLOCK_DETECTED,
            ERRCODE_QUERY_CANCELED,
        ];
        let class = |code: PgSqlErrorCode| (code as i32) & 0xFFF;
        let code = PgSqlErrorCode::from(self.sqlstate);
        transient.contains(&code)
            || (self.sqlstate & 0xFFF) == class(ERRCODE_CONNECTION_EXCEPTION)
            || (self.sqlstate & 0xFFF) == class(ERRCODE_INSUFFICIENT_RESOURCES)
    }
}

/// The hint of a caught error that brought none of its own.
pub const SEE_SERVER_LOG: &str = "Check the server log.";

/// Whether `sqlstate` is in the class (its first two characters) of `code`.
pub fn in_class(sqlstate: i32, code: PgSqlErrorCode) -> bool {
    // MAKE_SQLSTATE packs six bits a character, the first in the lowest.
    sqlstate & 0xFFF == code as i32 & 0xFFF
}

/// What went wrong on the way to (or on) central server `server`, for a
/// caught error with `sqlstate` and `message`.
fn remote_cause(server: &str, sqlstate: i32, message: &str) -> String {
    use PgSqlErrorCode::*;
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
    use PgSqlErrorCode::*;
    let class = |code: PgSqlErrorCode| in_class(sqlstate, code);
    let server = crate::catalog::quote_identifier(server);
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
fn central_moved_hint(tag: &str) -> String {
    format!(
        "It may have lost ranges any attached server took; no ID is handed out until, on the central server, the row of every tag attached servers draw from — not only this one: the accept lifts the refusal for all of them — is raised to the largest id_segment_remote.max_id_seen (or id_segment_detached.max_id_seen) of those servers for that tag, for this one: UPDATE id_segment SET max_id = greatest(max_id, <that value>), version = version + 1 WHERE biz_tag = {}; then SELECT segment_central_accept() there. After a switchover to a synchronous standby, the accept alone will do.",
        quote_literal(tag)
    )
}

/// The error a refill problem gives the callers waiting on `tag`.
pub fn refill_problem_report(problem: &RefillProblem, tag: &str) -> StoredError {
    {
        use PgSqlErrorCode::*;
        let (code, message, hint) = match problem {
            RefillProblem::ServedByAnotherLane { lane } => (
                ERRCODE_INTERNAL_ERROR,
                format!("segment tag \"{tag}\" is refilled by another worker (lane {lane})"),
                SEE_SERVER_LOG.to_string(),
            ),
            RefillProblem::NoExtension => (
                ERRCODE_UNDEFINED_OBJECT,
                "extension \"pg_idgen\" is not installed in this database".to_string(),
                "Run CREATE EXTENSION pg_idgen.".to_string(),
            ),
            RefillProblem::NoRow => {
                let e = IdgenError::UnknownTag { tag: tag.to_string() };
                (e.code(), e.message(), e.hint())
            }
            RefillProblem::NoRemoteRow { foreign_table, max_id_seen, step } => (
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
            RefillProblem::ForeignTableGone { server } => (
                ERRCODE_UNDEFINED_TABLE,
                format!("segment tag \"{tag}\" is attached to server \"{server}\", but its foreign table was dropped"),
                format!("Attach it again: SELECT segment_drop({0}); SELECT segment_attach({0}, {1});", quote_literal(tag), quote_literal(server)),
            ),
            RefillProblem::StepNotPositive { step } => (
                ERRCODE_INVALID_PARAMETER_VALUE,
                format!("id_segment.step of segment tag \"{tag}\" is {step}, but it must be positive"),
                format!("UPDATE id_segment SET step = 1000 WHERE biz_tag = {};", quote_literal(tag)),
            ),
            RefillProblem::MaxIdBehind { max_id, handed_out } => (
                ERRCODE_DATA_EXCEPTION,
                format!(
                    "id_segment.max_id of segment tag \"{tag}\" went backwards: it is {max_id}, but this server already handed out IDs up to {handed_out}"
                ),
                format!(
                    "Someone moved max_id back; refilling would repeat IDs. Set it to at least {handed_out}: UPDATE id_segment SET max_id = {handed_out} WHERE biz_tag = {};",
                    quote_literal(tag)
                ),
            ),
            RefillProblem::Exhausted { max_id } => (
                ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                format!("segment tag \"{tag}\" is exhausted: max_id {max_id} is the largest bigint"),
                "No more IDs can be handed out for this tag; move the table to a new tag.".to_string(),
            ),
            RefillProblem::WriteNotApplied { read_max_id, written_max_id } => (
                ERRCODE_TRIGGERED_ACTION_EXCEPTION,
                format!(
                    "the update of id_segment.max_id of segment tag \"{tag}\" from {read_max_id} left it at {written_max_id}"
                ),
                "A trigger, rule or row security policy on id_segment (on the central server, for an attached tag) changed or skipped what the version-CAS wrote. Drop it, or let the update raise max_id.".to_string(),
            ),
            RefillProblem::CentralWentBack { server, foreign_table, max_id, seen } => (
                ERRCODE_DATA_EXCEPTION,
                format!(
                    "central server \"{server}\" went back for segment tag \"{tag}\": its row (foreign table {foreign_table}) has max_id {max_id}, but this server has already taken IDs up to {seen} from it"
                ),
                format!(
                    "It lost ranges it handed out (restored, failed over, or the row lowered); no ID was handed out. On the central server, raise the row to the largest id_segment_remote.max_id_seen (or id_segment_detached.max_id_seen) of any server attached to it (this server's is {seen}): UPDATE id_segment SET max_id = <that value>, version = version + 1 WHERE biz_tag = {}; then run SELECT segment_central_accept() there.",
                    quote_literal(tag)
                ),
            ),
            RefillProblem::CentralMoved { server, moved } => (
                ERRCODE_DATA_EXCEPTION,
                format!(
                    "central server \"{server}\" is not where this server left it for segment tag \"{tag}\": {moved}"
                ),
                central_moved_hint(tag),
            ),
            RefillProblem::RemoteSessionUnsafe { server, problem, options } => {
                let e = IdgenError::RemoteSessionUnsafe {
                    server: server.clone(),
                    problem: problem.clone(),
                    options: options.clone(),
                };
                (e.code(), e.message(), e.hint())
            }
            RefillProblem::CasContention { attempts } => (
                ERRCODE_LOCK_NOT_AVAILABLE,
                format!("segment tag \"{tag}\" lost the version check of id_segment {attempts} times in a row to other allocators"),
                "Another allocator updates this row without pause; raise its step or give it its own tag.".to_string(),
            ),
        };
        StoredError {
            sqlstate: code as i32,
            message,
            hint,
        }
    }
}

/// The value of a SQL argument that must not be NULL; raises the
/// `NullArgument` error naming `what` when it is.
#[track_caller]
pub fn required<T>(value: Option<T>, what: &'static str) -> T {
    let Some(value) = value else {
        IdgenError::NullArgument { what }.raise()
    };
    value
}

impl IdgenError {
    fn code(&self) -> PgSqlErrorCode {
        use PgSqlErrorCode::*;
        match self {
            IdgenError::NotPreloaded => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::NullArgument { .. } => ERRCODE_NULL_VALUE_NOT_ALLOWED,
            IdgenError::EmptyTag => ERRCODE_INVALID_PARAMETER_VALUE,
            IdgenError::TagTooLong { .. } => ERRCODE_NAME_TOO_LONG,
            IdgenError::UnknownTag { .. } => ERRCODE_UNDEFINED_OBJECT,
            IdgenError::TagExists { .. } => ERRCODE_DUPLICATE_OBJECT,
            IdgenError::TagInUse { .. } => ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST,
            IdgenError::DefaultOfUnknownTag { .. } => ERRCODE_WARNING,
            IdgenError::BadStep { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
            IdgenError::BadStart { .. } => ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            IdgenError::BadCount { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
            IdgenError::BadReserveCount { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
            IdgenError::BadBase62 { problem, .. } => match problem {
                crate::base62::Base62Error::Negative(_) | crate::base62::Base62Error::Overflow => {
                    ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE
                }
                _ => ERRCODE_INVALID_TEXT_REPRESENTATION,
            },
            IdgenError::ReadOnly { .. } => ERRCODE_READ_ONLY_SQL_TRANSACTION,
            IdgenError::DuringRecovery { .. } => ERRCODE_READ_ONLY_SQL_TRANSACTION,
            IdgenError::TooManyTags { .. } => ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            IdgenError::TagQuotaReached { .. } => ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            IdgenError::WorkerNotStarted { .. } => ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            IdgenError::RefillTimeout { .. } => ERRCODE_LOCK_NOT_AVAILABLE,
            IdgenError::BadSetting { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
            IdgenError::NextStartWouldFail { sqlstate, .. } => PgSqlErrorCode::from(*sqlstate),
            IdgenError::SnowflakeClockBehind { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::SnowflakeKeeperNotRunning { .. } => {
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
            }
            IdgenError::SnowflakeStateNotWritten { .. } => ERRCODE_IO_ERROR,
            IdgenError::SnowflakeKeeperSlow { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::SnowflakeMarkNotLogged { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::SnowflakeNoLease { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::CitusCoordinatorFailed { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::CitusCoordinatorRefused { sqlstate, .. } => PgSqlErrorCode::from(*sqlstate),
            IdgenError::CitusTagMissing { .. } => ERRCODE_UNDEFINED_OBJECT,
            IdgenError::CitusCreateOnWorker { .. } => ERRCODE_FEATURE_NOT_SUPPORTED,
            IdgenError::CitusNotCoordinator => ERRCODE_FEATURE_NOT_SUPPORTED,
            IdgenError::CitusExtensionTable { .. } => ERRCODE_FEATURE_NOT_SUPPORTED,
            IdgenError::SnowflakeMachineIdShared { proven: true, .. } => {
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
            }
            IdgenError::SnowflakeMachineIdShared { .. } => ERRCODE_WARNING,
            IdgenError::SnowflakeMachineRefused { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::SnowflakeNoCitusGroup { group, .. } if *group >= 0 => {
                ERRCODE_INVALID_PARAMETER_VALUE
            }
            IdgenError::SnowflakeNoCitusGroup { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::SnowflakeLeaseCeiling { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::LeaseCentralClock { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::LeaseTableRefused { why, .. } => match why {
                LeaseTableProblem::NotQualified => ERRCODE_INVALID_PARAMETER_VALUE,
                LeaseTableProblem::NotForeign { .. } => ERRCODE_WRONG_OBJECT_TYPE,
                LeaseTableProblem::UntrustedOwner { .. } => ERRCODE_INSUFFICIENT_PRIVILEGE,
            },
            IdgenError::SnowflakeKeeperNotRegistered { .. } => ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            IdgenError::SnowflakeStateFile { io: true, .. } => ERRCODE_IO_ERROR,
            IdgenError::SnowflakeStateFile { io: false, .. } => ERRCODE_DATA_CORRUPTED,
            IdgenError::SnowflakeSettingsChanged { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
            IdgenError::SnowflakeExhausted { .. } => ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
            IdgenError::SnowflakeFieldTooLarge { .. } => ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            IdgenError::SnowflakeMachineTooLarge { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::BadSnowflakeId { .. } => ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            IdgenError::BadSnowflakeText { .. } => ERRCODE_INVALID_TEXT_REPRESENTATION,
            IdgenError::TimestampOutOfRange { .. } => ERRCODE_DATETIME_FIELD_OVERFLOW,
            IdgenError::Internal { .. } => ERRCODE_INTERNAL_ERROR,
            IdgenError::MaxIdDecrease { .. } => ERRCODE_CHECK_VIOLATION,
            IdgenError::TagRenamed { .. } => ERRCODE_CHECK_VIOLATION,
            IdgenError::MaxIdNotRaised { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::RowHeldByCaller { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::AttachedByCaller { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::NoSuchServer { .. } => ERRCODE_UNDEFINED_OBJECT,
            IdgenError::NotPostgresFdw { .. } => ERRCODE_WRONG_OBJECT_TYPE,
            IdgenError::NoConnectTimeout { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
            IdgenError::RemoteSessionUnsafe { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
            IdgenError::AttachBelowDetachedMark { .. } => ERRCODE_DATA_EXCEPTION,
            IdgenError::AttachCentralMoved { .. } => ERRCODE_DATA_EXCEPTION,
            IdgenError::RemoteTagMissing { .. } => ERRCODE_UNDEFINED_OBJECT,
            IdgenError::NoCentralOrigin { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::ForeignTableTaken { .. } => ERRCODE_DUPLICATE_TABLE,
            IdgenError::ExtensionDropped => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::RefillFailed { sqlstate, .. } => PgSqlErrorCode::from(*sqlstate),
            IdgenError::RefillTimedOutBecause { sqlstate, .. } => PgSqlErrorCode::from(*sqlstate),
            IdgenError::TagExhausted { .. } => ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
            IdgenError::RefillRowLocked { .. } => ERRCODE_LOCK_NOT_AVAILABLE,
            IdgenError::RangeShortened { .. } => ERRCODE_WARNING,
            IdgenError::RemoteRefillFailed { sqlstate, .. } => PgSqlErrorCode::from(*sqlstate),
            IdgenError::RefillSpiFailed { .. } => ERRCODE_INTERNAL_ERROR,
            IdgenError::RangeNotCached { .. } => ERRCODE_INTERNAL_ERROR,
            IdgenError::GiveBackRewritten { .. } => ERRCODE_TRIGGERED_DATA_CHANGE_VIOLATION,
            IdgenError::WorkerExitedWhileStarting { .. } => {
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
            }
            IdgenError::FallbackIds { .. } => ERRCODE_WARNING,
            IdgenError::FallbackWithoutMachineId { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::MachineIdNotSet { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::FallbackNeedsMachineId => ERRCODE_INVALID_PARAMETER_VALUE,
            IdgenError::BadLayoutArgument { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
            IdgenError::CurrvalNotYetDefined { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::SetvalOfAttachedTag { .. } => ERRCODE_FEATURE_NOT_SUPPORTED,
            IdgenError::SetvalOfNewTag { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            IdgenError::BadSetvalValue { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
            IdgenError::PersistAheadAboveMaxLead { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
            IdgenError::HostnameMachineIdDoubt { .. } => ERRCODE_WARNING,
            IdgenError::StateFileWriteFailed { .. } => ERRCODE_IO_ERROR,
            IdgenError::SnowflakeServerMayBeACopy { .. } => ERRCODE_WARNING,
            IdgenError::SnowflakeMarkLowered { .. } => ERRCODE_CHECK_VIOLATION,
        }
    }

    fn message(&self) -> String {
        match self {
            IdgenError::NotPreloaded => "pg_idgen must be loaded via shared_preload_libraries".into(),
            IdgenError::NullArgument { what } => format!("{what} must not be NULL"),
            IdgenError::EmptyTag => "segment tag must not be empty".into(),
            IdgenError::TagTooLong { tag } => format!(
                "segment tag \"{}...\" is {} bytes long, more than the {TAG_MAX_BYTES} allowed",
                truncate_utf8(tag, 20),
                tag.len()
            ),
            IdgenError::UnknownTag { tag } => format!("segment tag \"{tag}\" does not exist"),
            IdgenError::TagExists { tag } => format!("segment tag \"{tag}\" already exists"),
            IdgenError::TagInUse {
                tag, user, others, ..
            } => format!(
                "cannot drop segment tag \"{tag}\" because {user} uses it{}",
                match others {
                    0 => String::new(),
                    1 => " (and 1 more expression)".to_string(),
                    n => format!(" (and {n} more expressions)"),
                }
            ),
            IdgenError::DefaultOfUnknownTag { user, tag } => format!(
                "{user} draws from segment tag \"{tag}\", which does not exist"
            ),
            IdgenError::NoSuchServer { server } => format!("server \"{server}\" does not exist"),
            IdgenError::NotPostgresFdw { server, wrapper } => format!(
                "server \"{server}\" uses the foreign-data wrapper \"{wrapper}\", not postgres_fdw"
            ),
            IdgenError::NoConnectTimeout { server } => {
                format!("server \"{server}\" has no connect_timeout option")
            }
            IdgenError::RemoteSessionUnsafe { server, problem, .. } => {
                format!("server \"{server}\" {problem}")
            }
            IdgenError::AttachBelowDetachedMark { tag, server, max_id, mark } => format!(
                "segment tag \"{tag}\" cannot be attached to server \"{server}\": its central row has max_id {max_id}, but this database already handed out the tag's IDs up to {mark} (id_segment_detached, from when it was attached before)"
            ),
            IdgenError::AttachCentralMoved { tag, server, moved } => format!(
                "segment tag \"{tag}\" cannot be attached to server \"{server}\": the central server is not where this database left it: {moved}"
            ),
            IdgenError::RemoteTagMissing { tag, server } => {
                format!("segment tag \"{tag}\" does not exist on server \"{server}\"")
            }
            IdgenError::NoCentralOrigin { server, view } => format!(
                "server \"{server}\" has no view {view}, so this server could not tell when it fails over or is restored"
            ),
            IdgenError::ForeignTableTaken { name, server } => format!(
                "relation \"{name}\" already exists and is not a foreign table of server \"{server}\" with the same remote table"
            ),
            IdgenError::BadStep { step } => format!("step must be positive, got {step}"),
            IdgenError::BadStart { start } => {
                format!("start must be between 1 and 9223372036854775807, got {start}")
            }
            IdgenError::BadCount { n } => format!("number of IDs must not be negative, got {n}"),
            IdgenError::BadBase62 { input, problem } => {
                use crate::base62::Base62Error::*;
                let input = truncate_utf8(input, 40);
                match problem {
                    Negative(n) => format!("{n} has no base62 code: it is negative"),
                    Empty => "an empty string is not a base62 code".into(),
                    BadCharacter { character, position } => format!(
                        "invalid base62 code \"{input}\": character \"{character}\" at position {position} is not one of 0-9, A-Z, a-z"
                    ),
                    Overflow => format!(
                        "base62 code \"{input}\" stands for a number larger than the largest bigint (AzL8n0Y58m7)"
                    ),
                }
            }
            IdgenError::BadReserveCount { n, max } => {
                format!("number of IDs to reserve must be from 1 to {max}, got {n}")
            }
            IdgenError::ReadOnly { function } => {
                format!("cannot execute {function} in a read-only transaction")
            }
            IdgenError::DuringRecovery { function } => format!("cannot execute {function} during recovery"),
            IdgenError::TooManyTags { max_tags, holders } => format!(
                "too many segment tags in use: shared memory holds pg_idgen.max_tags = {max_tags}, all drawn from in the last minute ({})",
                holders
                    .iter()
                    .map(|(db, n)| format!("database \"{db}\": {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            IdgenError::TagQuotaReached { tag, database, held } => format!(
                "segment tag \"{tag}\" gets no slot in shared memory: database \"{database}\" holds {held}, its share (pg_idgen.max_tags_per_database), each drawn from in the last minute"
            ),
            IdgenError::WorkerNotStarted { database } => {
                format!("could not start the pg_idgen refill worker for database \"{database}\"")
            }
            IdgenError::RefillTimeout { tag, waited_ms } => format!(
                "segment tag \"{tag}\" got no new range within pg_idgen.refill_timeout ({waited_ms} ms)"
            ),
            IdgenError::NextStartWouldFail { message, .. } => format!(
                "the configuration files hold a setting the next server start will refuse: {message}"
            ),
            IdgenError::BadSetting { name, value, problem, .. } => {
                format!("invalid value for parameter \"{name}\": \"{value}\": {problem}")
            }
            IdgenError::SnowflakeClockBehind { generator, lead_ms, max_lead_ms, waited_ms } => format!(
                "snowflake time ({generator} generator) is {lead_ms} ms ahead of the wall clock, more than pg_idgen.snowflake_max_lead ({max_lead_ms} ms), and the clock cannot catch up within pg_idgen.snowflake_max_wait (waited {waited_ms} ms)"
            ),
            IdgenError::SnowflakeKeeperNotRunning { waited_ms } => format!(
                "the pg_idgen snowflake keeper is not running, so no snowflake ID can be issued beyond the high-water mark on disk (waited {waited_ms} ms)"
            ),
            IdgenError::SnowflakeStateNotWritten { problem, waited_ms } => format!(
                "the snowflake keeper cannot write pg_idgen_snowflake.state: {problem} (waited {waited_ms} ms)"
            ),
            IdgenError::SnowflakeNoLease { waited_ms, why } => format!(
                "this server holds no snowflake machine id lease (waited {waited_ms} ms): {why}"
            ),
            IdgenError::SnowflakeNoCitusGroup { waited_ms, group, machine_bits, why } => match group {
                g if *g >= 0 => format!(
                    "this node's Citus group id {g} does not fit in pg_idgen.snowflake_machine_bits = {machine_bits}, so it cannot be its snowflake machine id (pg_idgen.machine_id = 'citus')"
                ),
                _ => format!(
                    "this node has no Citus group to use as its snowflake machine id yet (waited {waited_ms} ms): {why}"
                ),
            },
            IdgenError::CitusCoordinatorFailed { tag, message } => format!(
                "the Citus coordinator did not answer a refill of segment tag \"{tag}\": {message}"
            ),
            IdgenError::CitusCoordinatorRefused { tag, message, .. } => format!(
                "the Citus coordinator refused a refill of segment tag \"{tag}\": {message}"
            ),
            IdgenError::CitusTagMissing { tag } => format!(
                "segment tag \"{tag}\" does not exist on the Citus coordinator, where this worker takes its ranges"
            ),
            IdgenError::CitusCreateOnWorker { tag } => format!(
                "segment tag \"{tag}\" cannot be created on a Citus worker: on Citus every node draws a tag from the coordinator's id_segment"
            ),
            IdgenError::CitusNotCoordinator => "segment_citus_range() answers a Citus worker's refill, on the coordinator only".into(),
            IdgenError::SnowflakeMachineIdShared { machine, nodes, proven } => match proven {
                true => format!(
                    "snowflake machine id {machine} is also the machine id of Citus node {} with the same layout: both would issue the same IDs, so neither issues any",
                    nodes.join(", ")
                ),
                false => format!(
                    "snowflake machine id {machine} is also the machine id of Citus node {} (under another layout)",
                    nodes.join(", ")
                ),
            },
            IdgenError::SnowflakeMachineRefused { problem } => problem.clone(),
            IdgenError::CitusExtensionTable { table, function } => format!(
                "{function}() cannot take pg_idgen's table \"{table}\": each Citus node keeps the extension's tables local — the workers draw segment IDs from the coordinator's id_segment, and each node's snowflake mark is its own"
            ),
            IdgenError::LeaseCentralClock { problem } => problem.clone(),
            IdgenError::LeaseTableRefused { setting, value, why } => match why {
                LeaseTableProblem::NotQualified => format!(
                    "{setting} \"{value}\" is not a schema-qualified name: the lease keeper never looks a table up on a search path, where a role with CREATE on a schema could put a relation of its own first"
                ),
                LeaseTableProblem::NotForeign { relation, kind, owner } => format!(
                    "{setting} \"{value}\" is {kind} {relation} owned by role \"{owner}\", not a foreign table: the lease keeper reads and writes only a foreign table over the central server's, and leaves this one alone"
                ),
                LeaseTableProblem::UntrustedOwner { relation, owner } => format!(
                    "{setting} \"{value}\" is foreign table {relation} owned by role \"{owner}\", which is neither a superuser nor the owner of pg_idgen: the lease keeper runs its statements as the table's owner and leaves it alone"
                ),
            },
            IdgenError::SnowflakeLeaseCeiling { waited_ms, why } => format!(
                "snowflake time reached the ceiling of this server's machine id lease (waited {waited_ms} ms for a renewal){}",
                why.as_ref().map_or(String::new(), |why| format!(": {why}"))
            ),
            IdgenError::SnowflakeMarkNotLogged { problem, waited_ms } => format!(
                "no snowflake ID can be issued: the high-water mark is not WAL-logged ({problem}); waited {waited_ms} ms"
            ),
            IdgenError::SnowflakeKeeperSlow { waited_ms } => format!(
                "the snowflake keeper has not finished writing pg_idgen_snowflake.state within {waited_ms} ms"
            ),
            IdgenError::SnowflakeKeeperNotRegistered { max_worker_processes } => format!(
                "pg_idgen cannot register its snowflake keeper: max_worker_processes = {max_worker_processes} leaves no background worker slot for it"
            ),
            IdgenError::SnowflakeStateFile { problem, .. } => format!(
                "pg_idgen cannot use the snowflake state file \"pg_idgen_snowflake.state\": {problem}"
            ),
            IdgenError::SnowflakeSettingsChanged { change, generator, high_id, ahead_ms } => format!(
                "pg_idgen snowflake settings changed since pg_idgen_snowflake.state was written ({change}): every new {generator} ID must stay above {high_id}, which is now {ahead_ms} ms ahead of the clock, more than pg_idgen.snowflake_max_lead"
            ),
            IdgenError::SnowflakeExhausted { generator, time_bits, ended } => format!(
                "snowflake time of the {generator} generator is used up: its {time_bits} bits of milliseconds ended at {ended}"
            ),
            IdgenError::SnowflakeFieldTooLarge { field, value, bits } => format!(
                "snowflake {field} {value} does not fit the layout's {bits} {field} bits (at most {})",
                (1i128 << bits) - 1
            ),
            IdgenError::SnowflakeMachineTooLarge { machine, machine_bits } => format!(
                "pg_idgen.machine_id = {machine} does not fit the JavaScript-safe layout's {machine_bits} machine bits"
            ),
            IdgenError::BadSnowflakeId { id, problem } => format!("{id} is not a snowflake ID: {problem}"),
            IdgenError::BadSnowflakeText { text } => {
                format!("invalid input syntax for a snowflake ID: \"{text}\"")
            }
            IdgenError::TimestampOutOfRange { problem } => format!("timestamp out of range for snowflake IDs: {problem}"),
            IdgenError::Internal { context, message } => format!("{context}: {message}"),
            IdgenError::MaxIdDecrease { tag, from, to } => format!(
                "id_segment.max_id of segment tag \"{tag}\" cannot move back from {from} to {to}: IDs up to {from} may have been handed out"
            ),
            IdgenError::TagRenamed { from, to } => format!(
                "id_segment.biz_tag cannot change from \"{from}\" to \"{to}\": the row would hand out IDs \"{to}\" may already have handed out"
            ),
            IdgenError::MaxIdNotRaised { tag, high_water, why } => format!(
                "this transaction handed out IDs of segment tag \"{tag}\" up to {high_water}, but could not raise its id_segment.max_id to that before committing: {why}"
            ),
            IdgenError::RowHeldByCaller { tag } => format!(
                "segment tag \"{tag}\" needs a new range, but this transaction has changed or locked its id_segment row"
            ),
            IdgenError::AttachedByCaller { tag } => format!(
                "segment tag \"{tag}\" was attached to its central server by this transaction, which has not committed"
            ),
            IdgenError::ExtensionDropped => {
                "extension \"pg_idgen\" was dropped while this statement was running".into()
            }
            IdgenError::RefillFailed { message, .. } => message.clone(),
            IdgenError::RefillTimedOutBecause {
                tag,
                waited_ms,
                message,
                ..
            } => format!(
                "segment tag \"{tag}\" got no new range within pg_idgen.refill_timeout ({waited_ms} ms): {message}"
            ),
            IdgenError::TagExhausted { tag } => {
                format!("segment tag \"{tag}\" is exhausted: its last ID is the largest bigint")
            }
            IdgenError::RefillRowLocked { central: None } => {
                "its id_segment row (or the table) is locked by another transaction".into()
            }
            IdgenError::RangeShortened { tag, asked, granted, central } => format!(
                "a refill of segment tag \"{tag}\" asked {} id_segment for {asked} IDs and its update raised max_id by {granted} only",
                if *central { "the central server's" } else { "its" }
            ),
            IdgenError::RefillRowLocked {
                central: Some(server),
            } => format!(
                "its row on central server \"{server}\" is locked by another transaction there"
            ),
            IdgenError::RemoteRefillFailed {
                server,
                sqlstate,
                message,
                ..
            } => remote_cause(server, *sqlstate, message),
            IdgenError::RefillSpiFailed { tag, message } => {
                format!("refill of segment tag \"{tag}\" failed: {message}")
            }
            IdgenError::GiveBackRewritten { tag, wanted, written } => format!(
                "a trigger on id_segment changed the give-back of segment tag \"{tag}\" at a clean stop: max_id {written} instead of {wanted}"
            ),
            IdgenError::RangeNotCached {
                tag,
                first,
                last,
                problem,
            } => format!(
                "range {first}..{last} of segment tag \"{tag}\" could not be cached: {problem}"
            ),
            IdgenError::WorkerExitedWhileStarting { database } => format!(
                "the pg_idgen refill worker for the database with OID {database} exited while starting"
            ),
            IdgenError::FallbackIds {
                tag,
                waited_ms,
                cause,
                count,
            } => format!(
                "segment tag \"{tag}\" got no range within {waited_ms} ms ({cause}): handing out snowflake IDs instead ({count} so far)"
            ),
            IdgenError::MachineIdNotSet { function } => format!(
                "{function} needs pg_idgen.machine_id, which is not set on this server"
            ),
            IdgenError::BadLayoutArgument { problem } => format!("invalid snowflake layout: {problem}"),
            IdgenError::CurrvalNotYetDefined { tag } => {
                format!("currval of segment tag \"{tag}\" is not yet defined in this session")
            }
            IdgenError::SetvalOfAttachedTag { tag, server } => format!(
                "segment tag \"{tag}\" takes its ranges from central server \"{server}\": segment_setval cannot move it here"
            ),
            IdgenError::SetvalOfNewTag { tag } => format!(
                "segment tag \"{tag}\" was created by this transaction, which has not committed"
            ),
            IdgenError::BadSetvalValue { value } => {
                format!("segment_setval value must be 0 or more, got {value}")
            }
            IdgenError::FallbackNeedsMachineId => "pg_idgen.snowflake_fallback cannot be on: pg_idgen.machine_id is not set on this server".into(),
            IdgenError::PersistAheadAboveMaxLead { persist_ahead_ms, max_lead_ms, window_ms } => format!(
                "pg_idgen.snowflake_persist_ahead ({persist_ahead_ms} ms) is above pg_idgen.snowflake_max_lead ({max_lead_ms} ms): the snowflake keeper writes the high-water mark at most {window_ms} ms ahead"
            ),
            IdgenError::FallbackWithoutMachineId {
                tag,
                waited_ms,
                cause,
            } => format!(
                "segment tag \"{tag}\" got no range within {waited_ms} ms ({cause}), and pg_idgen.snowflake_fallback cannot stand in: pg_idgen.machine_id is not set on this server"
            ),
            IdgenError::HostnameMachineIdDoubt { machine, doubt } => format!(
                "pg_idgen.machine_id = 'hostname' gives machine id {machine}, but {doubt}"
            ),
            IdgenError::StateFileWriteFailed { problem } => {
                format!("pg_idgen: could not write {STATE_FILE}: {problem}")
            }
            IdgenError::SnowflakeMarkLowered { operation } => format!(
                "{operation} on snowflake_high_water would lose or lower the snowflake high-water mark: a promoted standby, a restore or a restart would then start below IDs already issued"
            ),
            IdgenError::SnowflakeServerMayBeACopy { machine_id, timeline } => format!(
                "pg_idgen: this primary started from a base backup and still runs on the backup's timeline {timeline}, with pg_idgen.machine_id = {machine_id}: if the server it was copied from is still running with that machine id, both issue the same snowflake IDs"
            ),
        }
    }

    fn hint(&self) -> String {
        match self {
            IdgenError::NotPreloaded => {
                "Add pg_idgen to shared_preload_libraries in postgresql.conf and restart the server.".into()
            }
            IdgenError::NullArgument { what } => format!("Pass a non-NULL {what}."),
            IdgenError::EmptyTag | IdgenError::TagTooLong { .. } => format!(
                "Use the biz_tag of a row in id_segment: 1 to {TAG_MAX_BYTES} bytes, e.g. segment_nextval('orders')."
            ),
            IdgenError::UnknownTag { tag } => {
                format!("Create it first: SELECT segment_create({});", quote_literal(tag))
            }
            IdgenError::TagExists { .. } => {
                "Use the existing tag, or remove it first with segment_drop().".into()
            }
            IdgenError::TagInUse { tag, undo, .. } => format!(
                "Change it first ({undo}), or drop the tag anyway with SELECT segment_drop({}, force => true) (INSERTs that take the default then fail until the tag exists again).",
                quote_literal(tag)
            ),
            IdgenError::DefaultOfUnknownTag { tag, .. } => format!(
                "INSERTs that take the default fail until the tag exists: create it with SELECT segment_create({}); or fix the default's tag.",
                quote_literal(tag)
            ),
            IdgenError::NoSuchServer { server } => format!(
                "Create it with postgres_fdw: CREATE EXTENSION postgres_fdw; CREATE SERVER {} FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '...', dbname '...', connect_timeout '5', options '{}'); CREATE USER MAPPING FOR CURRENT_USER SERVER {} OPTIONS (user '...', password '...');",
                quote_identifier(server), crate::remote_session::PINNED_OPTIONS, quote_identifier(server)
            ),
            IdgenError::NotPostgresFdw { .. } => "segment_attach takes ranges through postgres_fdw: name a server created with FOREIGN DATA WRAPPER postgres_fdw.".into(),
            IdgenError::NoConnectTimeout { server } => format!(
                "Without it a refill can hang on an unreachable server: ALTER SERVER {} OPTIONS (ADD connect_timeout '5');",
                quote_identifier(server)
            ),
            IdgenError::AttachBelowDetachedMark { tag, .. } => format!(
                "The central server went back since (a restore, a failover, a row lowered or made anew), and its ranges would repeat IDs. On the central server, raise the row to the largest id_segment_remote.max_id_seen and id_segment_detached.max_id_seen of every server attached to it: UPDATE id_segment SET max_id = <that value>, version = version + 1 WHERE biz_tag = {}; then attach again.",
                quote_literal(tag)
            ),
            IdgenError::RemoteSessionUnsafe { server, options, .. } => format!(
                "Ranges and machine-id leases are taken through it only when the central server's session flushes each commit, waits at most 10ms for a row lock and ends a transaction left idle: ALTER SERVER {} OPTIONS ({} options {});",
                quote_identifier(server),
                if options.is_some() { "SET" } else { "ADD" },
                quote_literal(&crate::remote_session::fixed_options(options.as_deref()))
            ),
            IdgenError::AttachCentralMoved { tag, .. } => format!(
                "{} Moving the tag to another central server on purpose: create it there above this database's mark (the largest id_segment_detached.max_id_seen of the tag), then run SELECT segment_central_accept() there.",
                central_moved_hint(tag)
            ),
            IdgenError::RemoteTagMissing { tag, .. } => format!(
                "Create it on the central server first (SELECT segment_create({}) there, or INSERT the tag's row into its id_segment), then attach it here.",
                quote_literal(tag)
            ),
            IdgenError::NoCentralOrigin { .. } => "Install or update pg_idgen 0.3.0 on the central server, in the database and schema its id_segment is in (CREATE EXTENSION pg_idgen, or ALTER EXTENSION pg_idgen UPDATE); for an id_segment made there by hand, run there the SQL of examples/sharding/central_by_hand.sql (linked from the README's \"Many servers\"). Then try again.".into(),
            IdgenError::ForeignTableTaken { .. } => "Drop or rename that relation, then run segment_attach again.".into(),
            IdgenError::BadStep { .. } => "Pass step => a positive integer; the default is 1000.".into(),
            IdgenError::BadStart { .. } => "Pass start => a positive bigint; the default is 1.".into(),
            IdgenError::BadCount { .. } => "Ask for 0 or more IDs.".into(),
            IdgenError::BadBase62 { problem, .. } => match problem {
                crate::base62::Base62Error::Negative(_) => {
                    "Only IDs of 0 and above have a code; segment and snowflake IDs always are.".into()
                }
                _ => "A code is made of 0-9, A-Z and a-z (case matters), at most AzL8n0Y58m7 (leading zeros aside), as idgen_base62() writes them.".into(),
            },
            IdgenError::BadReserveCount { max, .. } => {
                format!("Reserve 1 to {max} IDs per call, and call again for more.")
            }
            IdgenError::ReadOnly { .. } => {
                "Call it in a read-write transaction (SET TRANSACTION READ WRITE).".into()
            }
            IdgenError::DuringRecovery { .. } => {
                "IDs can only be handed out on the primary server; connect to it instead.".into()
            }
            IdgenError::TooManyTags { .. } => "Raise pg_idgen.max_tags in postgresql.conf and restart the server, remove unused tags with segment_drop(), or try again once a tag has gone a minute undrawn (its slot is then given to a new tag).".into(),
            IdgenError::TagQuotaReached { .. } => "Raise pg_idgen.max_tags_per_database (a reload) or pg_idgen.max_tags (a restart) in postgresql.conf, remove unused tags of this database with segment_drop(), or try again once one of its tags has gone a minute undrawn.".into(),
            IdgenError::WorkerNotStarted { .. } => {
                "Raise max_worker_processes in postgresql.conf and restart the server: pg_idgen takes one worker (its snowflake keeper; two with leases) and, while busy, one refill worker per database that draws segment IDs and one per central server those databases attach tags to, beside parallel query and other extensions.".into()
            }
            IdgenError::RefillTimeout { .. } => "Check the server log and segment_status for the refill worker's errors, and whether a session holds a lock on the id_segment row; raise pg_idgen.refill_timeout if refills are just slow.".into(),
            IdgenError::BadSetting { hint, .. } => hint.clone(),
            IdgenError::NextStartWouldFail { hint, .. } => {
                format!("{hint} The running server keeps its settings until it restarts.")
            }
            IdgenError::SnowflakeClockBehind { .. } => "The clock stepped back (or IDs were asked for faster than the layout allows). Wait for it to catch up, fix the time source, or raise pg_idgen.snowflake_max_lead or pg_idgen.snowflake_max_wait.".into(),
            IdgenError::SnowflakeKeeperNotRunning { .. } => "Check the server log for why the \"pg_idgen snowflake keeper\" background worker exited or did not start; the postmaster restarts it 1 s after it exits. If no worker slot is free, raise max_worker_processes and restart the server.".into(),
            IdgenError::SnowflakeStateNotWritten { .. } => "Free space, or fix the permissions, in the data directory; snowflake IDs resume as soon as the keeper can write the file (the server log has its WARNING).".into(),
            IdgenError::SnowflakeNoLease { .. } => "pg_idgen.machine_id = 'lease': the lease keeper takes a machine id from pg_idgen.lease_table (in pg_idgen.lease_database) and renews it; the message says why it holds none (also in snowflake_status.lease_problem and the server log, \"pg_idgen lease keeper\"), and how to mend it.".into(),
            IdgenError::SnowflakeNoCitusGroup { group, .. } if *group >= 0 => "Give every node of the Citus cluster enough machine bits (pg_idgen.snowflake_machine_bits, with as many fewer sequence bits, the same on every node; a restart), or set this node's pg_idgen.machine_id to a number no other node uses.".into(),
            IdgenError::SnowflakeNoCitusGroup { .. } => "pg_idgen.machine_id = 'citus' takes the node's group id from Citus's metadata in pg_idgen.snowflake_database, once the node is in a Citus cluster: on the coordinator, add this node (SELECT citus_add_node('<host>', <port>)), or on a coordinator, SELECT citus_set_coordinator_host('<host>', <port>). Citus must be installed in pg_idgen.snowflake_database (CREATE EXTENSION citus).".into(),
            IdgenError::CitusCoordinatorFailed { .. } => "Check that the coordinator is up and reachable from this node with Citus's own settings (SELECT * FROM citus_check_cluster_node_health()); the tag's sessions go on with the IDs cached here meanwhile, and refills are retried.".into(),
            IdgenError::CitusCoordinatorRefused { hint, .. } => format!("On the coordinator: {hint}"),
            IdgenError::CitusTagMissing { tag } => format!(
                "Create it on the coordinator, where every node takes its ranges from: SELECT segment_create({}); — on the coordinator, not here.",
                quote_literal(tag)
            ),
            IdgenError::CitusCreateOnWorker { tag } => format!(
                "Create it on the coordinator: SELECT segment_create({}); — every worker then draws it with no step of its own. To give this worker an ID space of its own anyway, add force => true.",
                quote_literal(tag)
            ),
            IdgenError::CitusNotCoordinator => "Nothing to do: the refill workers of Citus workers call it on the coordinator.".into(),
            IdgenError::SnowflakeMachineIdShared { .. } | IdgenError::SnowflakeMachineRefused { .. } => "Give every node of the Citus cluster its own machine id: pg_idgen.machine_id = 'citus' on every node uses each node's Citus group id; or set a number no other node uses. Restart the node you change.".into(),
            IdgenError::CitusExtensionTable { .. } => "Leave it a local table: create tags on the coordinator (SELECT segment_create(...)), and every node draws them with no set-up of its own.".into(),
            IdgenError::LeaseCentralClock { .. } => format!("Create on the central server, beside the lease table, {CLOCK_VIEW_SQL}; and keep its clock and every leasing server's right (NTP)."),
            IdgenError::LeaseTableRefused { setting, why, .. } => match why {
                LeaseTableProblem::NotQualified => format!(
                    "Set {setting} to the schema and name of the foreign table (its default is 'public.{}') in postgresql.conf, and restart the server.",
                    if *setting == "pg_idgen.lease_table" { "idgen_machine_lease" } else { "idgen_lease_clock" }
                ),
                LeaseTableProblem::NotForeign { .. } => format!(
                    "Create the foreign table over the central server's as the many-servers guide shows, under a name nothing else uses, and set {setting} to it; a relation nobody here created may be an attempt to run code as the lease keeper: look at it, then drop it."
                ),
                LeaseTableProblem::UntrustedOwner { relation, .. } => format!(
                    "If a superuser created it for the lease keeper, make one its owner: ALTER FOREIGN TABLE {relation} OWNER TO CURRENT_USER; (run as that superuser). Otherwise it may be an attempt to run code as the lease keeper: look at it, then drop it."
                ),
            },
            IdgenError::SnowflakeLeaseCeiling { .. } => "The lease keeper raises the ceiling at each renewal; if renewals fail (see the server log), IDs stop until they succeed again.".into(),
            IdgenError::SnowflakeMarkNotLogged { .. } => "pg_idgen commits the snowflake high-water mark in the table snowflake_high_water of pg_idgen.snowflake_database before it issues IDs up to it, so that standbys, restores and pg_upgrade continue above every ID. Install pg_idgen there (CREATE EXTENSION pg_idgen, or ALTER EXTENSION pg_idgen UPDATE after updating the library), or set pg_idgen.snowflake_database to a database that has it and restart.".into(),
            IdgenError::SnowflakeKeeperSlow { .. } => "The disk is slow to fsync. Raise pg_idgen.snowflake_persist_ahead so the keeper writes earlier, or pg_idgen.snowflake_max_wait.".into(),
            IdgenError::SnowflakeKeeperNotRegistered { .. } => "Raise max_worker_processes in postgresql.conf (pg_idgen needs one slot for its keeper, plus one per database using segment IDs) and start the server again.".into(),
            IdgenError::SnowflakeStateFile { .. } => "Move the damaged file aside and start the server: it continues above the high-water mark WAL-logged in snowflake_high_water, and writes the file anew. Do not write a time into it by hand (see \"Recovering the snowflake state file\" in the pg_idgen README).".into(),
            IdgenError::SnowflakeSettingsChanged { .. } => "Restore the previous pg_idgen.snowflake_epoch and bit widths: a later epoch, or more time bits, makes new IDs numerically overlap the old ones. Only if no snowflake ID issued before is kept anywhere, remove pg_idgen_snowflake.state to start over.".into(),
            IdgenError::SnowflakeExhausted { generator: "JavaScript-safe", .. } => "The JavaScript-safe layout always has 41 time bits: use a later pg_idgen.snowflake_epoch (restart), or snowflake_nextval().".into(),
            IdgenError::SnowflakeExhausted { .. } => "Use a later pg_idgen.snowflake_epoch or more pg_idgen.snowflake_time_bits for new IDs.".into(),
            IdgenError::SnowflakeFieldTooLarge { .. } => "Write the machine id and sequence as snowflake_format() does, within the layout set by pg_idgen.snowflake_machine_bits and pg_idgen.snowflake_sequence_bits.".into(),
            IdgenError::SnowflakeMachineTooLarge { .. } => "Give servers that hand out JavaScript-safe IDs machine ids 0 to 15.".into(),
            IdgenError::BadSnowflakeId { .. } => "Pass an ID made by snowflake_nextval() on a server with the same layout settings.".into(),
            IdgenError::BadSnowflakeText { .. } => "Use the form yyyyMMddHHmmssSSS-machine-sequence in UTC, as snowflake_format() writes it, e.g. 20250623131730192-1-0.".into(),
            IdgenError::TimestampOutOfRange { .. } => "Pass a finite timestamp between pg_idgen.snowflake_epoch and the end of the layout's time bits.".into(),
            IdgenError::Internal { .. } => "This is a bug in pg_idgen; please report it with the server log.".into(),
            IdgenError::MaxIdDecrease { from, .. } => format!("Keep max_id at {from} or above. To lower it on purpose, knowing that IDs above the new value will be handed out again, a superuser runs the UPDATE (or segment_setval) after SET LOCAL pg_idgen.allow_max_id_decrease = on in the same transaction."),
            IdgenError::TagRenamed { to, .. } => format!("To give a table a new tag, create it with segment_create({}, start => <above every ID in use>) and drop the old one with segment_drop(). A superuser who means it runs the UPDATE after SET LOCAL pg_idgen.allow_max_id_decrease = on.", quote_literal(to)),
            IdgenError::MaxIdNotRaised { .. } => "The transaction is rolled back so that no ID can come out twice. Remove what blocks the UPDATE of the row (a trigger, rule or row-level security policy on id_segment, or READ ONLY), or draw the tag's IDs after the transaction that creates it has committed.".into(),
            IdgenError::RowHeldByCaller { .. } => "Commit or roll back the change to the id_segment row first (the refill worker waits for it), or draw the IDs before changing the row.".into(),
            IdgenError::AttachedByCaller { .. } => "Ranges of an attached tag come from the central server once segment_attach() has committed (or a change to its id_segment_remote row): commit first, then draw its IDs.".into(),
            IdgenError::ExtensionDropped => "Run the statement again; IDs cached before the drop are never handed out.".into(),
            IdgenError::RefillFailed { hint, .. } => hint.clone(),
            IdgenError::RefillTimedOutBecause { hint, .. } => hint.clone(),
            IdgenError::TagExhausted { .. } => "No more IDs can be handed out for this tag; move the table to a new tag.".into(),
            IdgenError::RangeShortened { .. } => "A trigger, rule or row security policy on id_segment (on the central server, for an attached tag) limits how far one update may raise max_id, so every refill brings only that much and the tag's callers may wait for refills. Let the update raise max_id as asked, or raise the row's step. No ID repeats either way.".into(),
            IdgenError::RefillRowLocked { central: Some(_) } => "A transaction on the central server holds the row (another server's refill in flight, SELECT ... FOR UPDATE, an UPDATE not yet committed); the central session waits at most its lock_timeout for it, and the refill is retried. pg_locks and pg_stat_activity on the central server show which session it is.".into(),
            IdgenError::RemoteRefillFailed { server, sqlstate, hint, .. } => remote_hint(server, *sqlstate, hint),
            IdgenError::RefillRowLocked { central: None } => "A transaction holds the row (SELECT ... FOR UPDATE, or an UPDATE or DELETE not yet committed) or a lock on id_segment (ALTER EXTENSION pg_idgen UPDATE, DDL): end it. pg_locks and pg_stat_activity show which session it is.".into(),
            IdgenError::RefillSpiFailed { .. } => SEE_SERVER_LOG.into(),
            IdgenError::RangeNotCached { .. } => "This is a bug in pg_idgen; the range is skipped and no ID repeats.".into(),
            IdgenError::GiveBackRewritten { .. } => "Nothing was given back and no ID repeats: the unused IDs are a gap, as after a crash. Let triggers on id_segment leave an update that lowers max_id alone (it happens only at a clean stop, under pg_idgen.allow_max_id_decrease).".into(),
            IdgenError::WorkerExitedWhileStarting { .. } => "The server log has the worker's error (look for \"pg_idgen refill worker\"); the next call that needs IDs starts it again.".into(),
            IdgenError::FallbackWithoutMachineId { .. } | IdgenError::FallbackNeedsMachineId => "Servers that fall back together need machine ids of their own, or they hand out the same IDs. Set pg_idgen.machine_id to a number no other server uses (or 'hostname', or 'lease') in postgresql.conf and restart.".into(),
            IdgenError::CurrvalNotYetDefined { tag } => format!(
                "Call segment_nextval({}) in this session first.",
                quote_literal(tag)
            ),
            IdgenError::SetvalOfAttachedTag { tag, .. } => format!(
                "Run SELECT segment_setval({}, <value>) on the central server, in the database the tag is attached to. This server hands out the IDs it has cached first (up to pg_idgen.remote_cache_ahead of its demand); to drop them at once, run segment_drop({}) and segment_attach again here.",
                quote_literal(tag),
                quote_literal(tag)
            ),
            IdgenError::SetvalOfNewTag { tag } => format!(
                "Commit the transaction that ran segment_create, or pass the start to segment_create({}, start => <value + 1>) instead.",
                quote_literal(tag)
            ),
            IdgenError::BadSetvalValue { .. } => "Pass the largest ID in use, or 0: the next ID is above it.".into(),
            IdgenError::BadLayoutArgument { .. } => "Pass the layout the IDs were made with: pg_idgen.snowflake_epoch, pg_idgen.snowflake_machine_bits and pg_idgen.snowflake_sequence_bits (SHOW them, or see snowflake_status); the time takes the rest of the 63 bits.".into(),
            IdgenError::PersistAheadAboveMaxLead { .. } => "After a crash, IDs resume up to pg_idgen.snowflake_persist_ahead ahead of the clock, and every call would wait for the clock beyond pg_idgen.snowflake_max_lead: lower snowflake_persist_ahead, or raise snowflake_max_lead, and reload.".into(),
            IdgenError::MachineIdNotSet { .. } => "Every server that issues snowflake IDs needs a machine id no other server uses: set pg_idgen.machine_id in postgresql.conf to a number (0 is fine for a single server), to 'hostname' (pods of a StatefulSet) or to 'lease' (from a central server), and restart.".into(),
            IdgenError::FallbackIds { .. } => "pg_idgen.snowflake_fallback is on. These IDs are far larger than the tag's own; segment_status.fallback_ids counts them.".into(),
            IdgenError::HostnameMachineIdDoubt { .. } => "Two servers with the same machine id can issue the same snowflake IDs. 'hostname' suits the pods of one StatefulSet (pg-0, pg-1, ...); elsewhere set pg_idgen.machine_id to a number unique to each server.".into(),
            IdgenError::StateFileWriteFailed { .. } => "Snowflake IDs wait until it can be written; check the data directory's space and permissions.".into(),
            IdgenError::SnowflakeMarkLowered { .. } => "Leave the row to the snowflake keeper, which only raises it. A superuser who means it (no snowflake ID issued so far is kept anywhere) runs the statement after SET LOCAL pg_idgen.allow_max_id_decrease = on in the same transaction.".into(),
            IdgenError::SnowflakeServerMayBeACopy { .. } => format!(
                "Give one of the two its own pg_idgen.machine_id (or 'lease') and restart it. A standby that was promoted, or a restore with recovery.signal, starts a new timeline and is not a copy. If the original is gone for good (the server was moved), remove {BACKUP_LABEL_OLD} from the data directory to end this warning."
            ),
        }
    }

    /// Raises the error as a PostgreSQL `ERROR`: never returns.
    #[track_caller]
    pub fn raise(self) -> ! {
        let report =
            ErrorReport::new(self.code(), self.message(), "pg_idgen").set_hint(self.hint());
        report.report(PgLogLevel::ERROR);
        unreachable!("ERROR does not return")
    }

    /// Reports it as a `WARNING` (to the client and the log) and carries on.
    #[track_caller]
    pub fn warn(self) {
        ErrorReport::new(self.code(), self.message(), "pg_idgen")
            .set_hint(self.hint())
            .report(PgLogLevel::WARNING);
    }

    /// The error as a worker stores it in shared memory for its callers
    /// (and logs it): SQLSTATE, message and hint.
    pub fn stored(&self) -> StoredError {
        StoredError {
            sqlstate: self.code() as i32,
            message: self.message(),
            hint: self.hint(),
        }
    }

    /// Logs a stored error at `WARNING`/`LOG` level with its SQLSTATE and
    /// carries on.
    #[track_caller]
    pub fn log(stored: &StoredError, level: PgLogLevel) {
        ErrorReport::new(
            PgSqlErrorCode::from(stored.sqlstate),
            stored.message.clone(),
            "pg_idgen",
        )
        .set_hint(stored.hint.clone())
        .report(level);
    }
}

/// Keeps Rust backtraces out of the errors clients see, whatever
/// `RUST_BACKTRACE` says in the server's environment.
///
/// pgrx's panic hook captures a backtrace at every panic — and an ERROR
/// raised by PostgreSQL inside a call into it (a cancel, a timeout) travels
/// through Rust as a panic — and appends it to the ERROR's DETAIL, which
/// goes to the client. This replaces that hook (in this library only: each
/// Rust library has its own) by one that records nothing on PostgreSQL's
/// thread; pgrx then reports the error with its message, SQLSTATE and hint
/// only. On any other thread the default hook runs, as pgrx's would.
/// Called once from `_PG_init`, in the postmaster, before any backend.
pub fn keep_backtraces_out_of_errors() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // SAFETY: getpid and gettid only read the calling process's ids.
        let main_thread = unsafe { libc::getpid() == libc::gettid() };
        if !main_thread {
            previous(info);
        }
    }));
}

/// The first `max` bytes of `text`, cut at a character boundary.
pub fn truncate_utf8(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
