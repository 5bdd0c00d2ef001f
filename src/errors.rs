//! Every error and warning pg_idgen reports, in one place: its SQLSTATE,
//! its message and the hint that names the fix.
//!
//! How an error is declared: a variant of `IdgenError` below, and one arm
//! in the table of its family that yields its `Report` — SQLSTATE, message
//! and hint side by side, in one expression and nowhere else. The families:
//! `errors/calls.rs` (a SQL call's arguments and transaction),
//! `errors/segment.rs` (tags and their `id_segment` rows),
//! `errors/refill.rs` (refill workers, the callers waiting on them, the
//! snowflake fallback), `errors/remote.rs` (central servers: attach, remote
//! refills, fences), `errors/snowflake.rs`, `errors/lease.rs` (machine-id
//! leases), `errors/citus.rs` (Citus nodes) and `errors/settings.rs`. `IdgenError::report` sends each
//! variant to its family in one `match`, so the compiler names a new
//! variant that has no family yet. What a refill finds wrong with a tag's
//! row (`segment::policy::RefillProblem`, pure) is declared the same way:
//! `RefillProblem::report`, in `errors/refill.rs`. A text two errors share
//! (a tag with no row, a server whose options are unsafe) is one function
//! or constant of its family that both arms use.
//!
//! Code elsewhere builds an `IdgenError` and calls `raise()` (ERROR),
//! `warn()` (WARNING) or `stored()` (a worker's error kept for its callers,
//! which `log` reports later); nothing else calls `ereport`. `raise`, `warn`
//! and `log` are `#[track_caller]`, so the report's LOCATION names the line
//! that raised it, not this file.

use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::PgLogLevel;

// PostgreSQL's own quoting in the server. The plain `#[test]`s run without
// one, so they get a stand-in (`tests::quote_*`): they check that every
// error has its three parts, not how a name is quoted.
#[cfg(not(test))]
use crate::catalog::{quote_identifier, quote_literal};
#[cfg(test)]
use tests::{quote_identifier, quote_literal};

mod calls;
mod citus;
mod lease;
mod refill;
mod remote;
mod segment;
mod settings;
mod snowflake;

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

/// Where a coordinator-only function was called instead (`CitusNotCoordinator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotCoordinator {
    /// A database without Citus.
    NoCitus,
    /// A Citus node in no cluster yet.
    NotJoined,
    /// A Citus worker.
    Worker,
}

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
    /// No row for `tag`, which a column default draws from (`table` as
    /// `regclass` prints it, `column` unquoted): it was dropped by force.
    UnknownTagOfColumn {
        tag: String,
        table: String,
        column: String,
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
    /// Other nodes of this Citus cluster have this node's snowflake machine
    /// id: with the same layout (`proven`) their IDs can be equal.
    SnowflakeMachineIdShared {
        machine: i64,
        nodes: Vec<String>,
        proven: bool,
    },
    /// Another cluster's mark with this server's machine id keeps moving in
    /// `snowflake_high_water` (logical replication brings it here).
    SnowflakeMachineIdReplicated {
        machine: i64,
        system_identifier: i64,
    },
    /// `DROP EXTENSION pg_idgen` in `pg_idgen.snowflake_database`.
    SnowflakeMarkDropped {
        database: String,
    },
    /// Snowflake IDs refused while `SnowflakeMachineIdShared` is proven
    /// (`problem`: its message).
    SnowflakeMachineRefused {
        problem: String,
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
    /// A function that runs on the Citus coordinator only
    /// (`segment_citus_range`, `segment_citus_catch_up`) called elsewhere.
    CitusNotCoordinator {
        function: &'static str,
        elsewhere: NotCoordinator,
    },
    /// The coordinator's catch-up (`citus_catch_up.rs`): workers that did
    /// not answer, with what Citus said.
    CitusCatchUpUnanswered {
        nodes: String,
    },
    /// `segment_create` on the Citus coordinator at or below what a worker
    /// already took of a tag of that name.
    CitusCreateBelowWorkers {
        tag: String,
        start: i64,
        floor: i64,
        step: i32,
    },
    /// A row of a tag about to be made on the Citus coordinator
    /// (`segment_create`, `segment_rename`) while a worker does not say
    /// what it took of the tag.
    CitusNewRowUnanswered {
        tag: String,
        nodes: String,
    },
    /// `segment_rename` on the Citus coordinator onto a name a worker took
    /// IDs of above the tag's position.
    CitusRenameBelowWorkers {
        old: String,
        new: String,
        max_id: i64,
        floor: i64,
    },
    /// A Citus function asked to distribute one of the extension's tables.
    CitusExtensionTable {
        table: String,
        function: String,
    },
    /// `segment_rename` of a tag attached to a central server.
    RenameAttached {
        tag: String,
    },
    /// `segment_rename` of a tag a generated column draws from.
    RenameUsedByGenerated {
        tag: String,
        user: String,
    },
    /// `segment_adopt`: no such column.
    AdoptNoColumn {
        table: String,
        column: String,
    },
    /// `segment_adopt`: not a table (a view, a sequence, ...).
    AdoptNotATable {
        table: String,
    },
    /// `segment_adopt`: a generated column.
    AdoptGenerated {
        table: String,
        column: String,
    },
    /// `segment_adopt`: a column neither bigint, integer nor smallint.
    AdoptWrongType {
        table: String,
        column: String,
        type_name: String,
    },
    /// `segment_adopt`: the column draws from a tag already.
    AdoptAlreadyDrawing {
        table: String,
        column: String,
        tag: String,
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
    /// `segment_currval` before this session drew the tag (`recovery`: on
    /// a hot standby, where no session can draw it).
    CurrvalNotYetDefined {
        tag: String,
        recovery: bool,
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
    /// An ID of a tag this transaction created after it dropped or renamed
    /// away a committed tag of the same name: a rollback brings that tag
    /// back, below the IDs drawn here.
    DrawAfterRemovedHere {
        tag: String,
    },
    /// A set-returning function called through a declaration of an older
    /// pg_idgen whose columns this library does not fill (the database
    /// not yet updated).
    DeclarationOutdated {
        function: &'static str,
        column: i32,
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

/// An error as it is declared: its SQLSTATE, the message naming the
/// problem and the hint naming the fix, side by side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub code: PgSqlErrorCode,
    pub message: String,
    pub hint: String,
}

impl Report {
    /// What every arm of the families' tables yields.
    pub fn new(code: PgSqlErrorCode, message: impl Into<String>, hint: impl Into<String>) -> Self {
        Report {
            code,
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// The report as a worker stores it in shared memory (and logs it).
    pub fn stored(self) -> StoredError {
        StoredError {
            sqlstate: self.code as i32,
            message: self.message,
            hint: self.hint,
        }
    }
}

/// What a family's table answers for a variant `IdgenError::report` sends
/// to another family: cannot happen, but an internal error beats a panic
/// in a background worker.
fn misrouted(error: &IdgenError) -> Report {
    Report::new(
        PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
        format!("pg_idgen has no report for {error:?} in this family"),
        INTERNAL_HINT,
    )
}

/// The hint of an internal error.
const INTERNAL_HINT: &str = "This is a bug in pg_idgen; please report it with the server log.";

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
    /// Its SQLSTATE, message and hint, from the table of its family (each
    /// variant's three parts are one arm there).
    pub fn report(&self) -> Report {
        use IdgenError::*;
        match self {
            NullArgument { .. }
            | EmptyTag
            | TagTooLong { .. }
            | BadStep { .. }
            | BadStart { .. }
            | BadCount { .. }
            | BadReserveCount { .. }
            | BadSetvalValue { .. }
            | BadBase62 { .. }
            | ReadOnly { .. }
            | DuringRecovery { .. } => calls::report(self),
            UnknownTag { .. }
            | UnknownTagOfColumn { .. }
            | TagExists { .. }
            | TagInUse { .. }
            | DefaultOfUnknownTag { .. }
            | TooManyTags { .. }
            | TagQuotaReached { .. }
            | MaxIdDecrease { .. }
            | TagRenamed { .. }
            | RenameAttached { .. }
            | RenameUsedByGenerated { .. }
            | AdoptNoColumn { .. }
            | AdoptNotATable { .. }
            | AdoptGenerated { .. }
            | AdoptWrongType { .. }
            | AdoptAlreadyDrawing { .. }
            | MaxIdNotRaised { .. }
            | CurrvalNotYetDefined { .. }
            | SetvalOfAttachedTag { .. }
            | SetvalOfNewTag { .. }
            | DrawAfterRemovedHere { .. }
            | DeclarationOutdated { .. }
            | ExtensionDropped
            | TagExhausted { .. } => segment::report(self),
            WorkerNotStarted { .. }
            | WorkerExitedWhileStarting { .. }
            | RefillTimeout { .. }
            | RefillFailed { .. }
            | RefillTimedOutBecause { .. }
            | RowHeldByCaller { .. }
            | AttachedByCaller { .. }
            | RefillRowLocked { .. }
            | RangeShortened { .. }
            | RefillSpiFailed { .. }
            | RangeNotCached { .. }
            | GiveBackRewritten { .. }
            | FallbackIds { .. }
            | FallbackWithoutMachineId { .. } => refill::report(self),
            NoSuchServer { .. }
            | NotPostgresFdw { .. }
            | NoConnectTimeout { .. }
            | RemoteSessionUnsafe { .. }
            | AttachBelowDetachedMark { .. }
            | AttachCentralMoved { .. }
            | RemoteTagMissing { .. }
            | NoCentralOrigin { .. }
            | ForeignTableTaken { .. }
            | RemoteRefillFailed { .. } => remote::report(self),
            SnowflakeClockBehind { .. }
            | SnowflakeKeeperNotRunning { .. }
            | SnowflakeStateNotWritten { .. }
            | SnowflakeKeeperSlow { .. }
            | SnowflakeMarkNotLogged { .. }
            | SnowflakeStateFile { .. }
            | StateFileWriteFailed { .. }
            | SnowflakeMarkLowered { .. }
            | SnowflakeServerMayBeACopy { .. }
            | SnowflakeExhausted { .. }
            | SnowflakeFieldTooLarge { .. }
            | SnowflakeMachineTooLarge { .. }
            | BadSnowflakeId { .. }
            | BadSnowflakeText { .. }
            | TimestampOutOfRange { .. }
            | BadLayoutArgument { .. }
            | SnowflakeMarkDropped { .. } => snowflake::report(self),
            SnowflakeNoLease { .. }
            | SnowflakeLeaseCeiling { .. }
            | LeaseCentralClock { .. }
            | LeaseTableRefused { .. } => lease::report(self),
            SnowflakeNoCitusGroup { .. }
            | SnowflakeMachineIdShared { .. }
            | SnowflakeMachineRefused { .. }
            | SnowflakeMachineIdReplicated { .. }
            | CitusCoordinatorFailed { .. }
            | CitusCoordinatorRefused { .. }
            | CitusTagMissing { .. }
            | CitusCreateOnWorker { .. }
            | CitusNotCoordinator { .. }
            | CitusCatchUpUnanswered { .. }
            | CitusCreateBelowWorkers { .. }
            | CitusNewRowUnanswered { .. }
            | CitusRenameBelowWorkers { .. }
            | CitusExtensionTable { .. } => citus::report(self),
            NotPreloaded
            | BadSetting { .. }
            | NextStartWouldFail { .. }
            | MachineIdNotSet { .. }
            | HostnameMachineIdDoubt { .. }
            | FallbackNeedsMachineId
            | PersistAheadAboveMaxLead { .. }
            | SnowflakeKeeperNotRegistered { .. }
            | SnowflakeSettingsChanged { .. } => settings::report(self),
            Internal { context, message } => Report::new(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("{context}: {message}"),
                INTERNAL_HINT,
            ),
        }
    }

    /// Raises the error as a PostgreSQL `ERROR`: never returns.
    #[track_caller]
    pub fn raise(self) -> ! {
        let Report {
            code,
            message,
            hint,
        } = self.report();
        let report = ErrorReport::new(code, message, "pg_idgen").set_hint(hint);
        report.report(PgLogLevel::ERROR);
        unreachable!("ERROR does not return")
    }

    /// Reports it as a `WARNING` (to the client and the log) and carries on.
    #[track_caller]
    pub fn warn(self) {
        let Report {
            code,
            message,
            hint,
        } = self.report();
        ErrorReport::new(code, message, "pg_idgen")
            .set_hint(hint)
            .report(PgLogLevel::WARNING);
    }

    /// The error as a worker stores it in shared memory for its callers
    /// (and logs it): SQLSTATE, message and hint.
    pub fn stored(&self) -> StoredError {
        self.report().stored()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base62::Base62Error;
    use crate::segment::fence::{Moved, Refusal};
    use crate::segment::policy::RefillProblem;
    use PgSqlErrorCode::*;

    /// A stand-in for PostgreSQL's `quote_literal` (no server here).
    pub(super) fn quote_literal(text: &str) -> String {
        format!("'{}'", text.replace('\'', "''"))
    }

    /// A stand-in for PostgreSQL's `quote_identifier` (no server here).
    pub(super) fn quote_identifier(name: &str) -> String {
        format!("\"{}\"", name.replace('"', "\"\""))
    }

    fn s(text: &str) -> String {
        text.to_string()
    }

    fn moved() -> Refusal {
        Refusal {
            moved: Moved::OtherCluster { was: 1, now: 2 },
            accept_after_us: 2_000_000,
            clock_now_us: Some(1_000_000),
        }
    }

    /// A value of every `IdgenError` variant (of each sub-case whose
    /// report differs: a base62 problem, a refused lease table, a locked
    /// local or central row).
    fn every_error() -> Vec<IdgenError> {
        use IdgenError::*;
        let tag = || s("orders");
        let server = || s("central");
        // A caught error passed through, as a worker or a reload gets it.
        let (sqlstate, message, hint) = (
            ERRCODE_LOCK_NOT_AVAILABLE as i32,
            s("could not obtain lock"),
            s("Try again."),
        );
        let lease_table = |why| LeaseTableRefused {
            setting: "pg_idgen.lease_table",
            value: s("public.idgen_machine_lease"),
            why,
        };
        let base62 = |problem| BadBase62 {
            input: s("a-b"),
            problem,
        };
        vec![
            NotPreloaded,
            NullArgument { what: "tag" },
            EmptyTag,
            TagTooLong {
                tag: "x".repeat(70),
            },
            UnknownTag { tag: tag() },
            UnknownTagOfColumn {
                tag: tag(),
                table: s("coupons"),
                column: s("id"),
            },
            TagExists { tag: tag() },
            TagInUse {
                tag: tag(),
                user: s("the default of column t.id"),
                undo: s("ALTER TABLE t ALTER COLUMN id DROP DEFAULT"),
                others: 2,
            },
            DefaultOfUnknownTag {
                user: s("the default of column t.id"),
                tag: tag(),
            },
            DefaultOfUnknownTag {
                user: s("the default of column t.id"),
                tag: "x".repeat(100),
            },
            BadStep { step: 0 },
            BadStart { start: 0 },
            BadCount { n: -1 },
            BadReserveCount { n: 0, max: 1000 },
            base62(Base62Error::Negative(-1)),
            base62(Base62Error::Empty),
            base62(Base62Error::BadCharacter {
                character: '-',
                position: 2,
            }),
            base62(Base62Error::Overflow),
            ReadOnly {
                function: "segment_nextval",
            },
            DuringRecovery {
                function: "segment_nextval",
            },
            TooManyTags {
                max_tags: 2,
                holders: vec![(s("app"), 2)],
            },
            TagQuotaReached {
                tag: tag(),
                database: s("app"),
                held: 1,
            },
            WorkerNotStarted { database: s("app") },
            RefillTimeout {
                tag: tag(),
                waited_ms: 5000,
            },
            BadSetting {
                name: "pg_idgen.machine_id",
                value: s("x"),
                problem: s("not a number"),
                hint: s("Set it to a number."),
            },
            NextStartWouldFail {
                sqlstate: ERRCODE_INVALID_PARAMETER_VALUE as i32,
                message: s("invalid value"),
                hint: s("Set it to a number."),
            },
            SnowflakeClockBehind {
                generator: "standard",
                lead_ms: 20,
                max_lead_ms: 10,
                waited_ms: 5,
            },
            SnowflakeKeeperNotRunning { waited_ms: 5 },
            SnowflakeStateNotWritten {
                problem: s("No space left on device"),
                waited_ms: 5,
            },
            SnowflakeNoLease {
                waited_ms: 5,
                why: s("the lease table is empty"),
            },
            SnowflakeNoCitusGroup {
                waited_ms: 5,
                group: -1,
                machine_bits: 10,
                why: s("this node is in no Citus cluster yet"),
            },
            SnowflakeNoCitusGroup {
                waited_ms: 5,
                group: 2048,
                machine_bits: 10,
                why: s("too large"),
            },
            SnowflakeMachineIdShared {
                machine: 7,
                nodes: vec![s("127.0.0.1:9701")],
                proven: true,
            },
            SnowflakeMachineIdShared {
                machine: 7,
                nodes: vec![s("127.0.0.1:9701")],
                proven: false,
            },
            SnowflakeMachineRefused {
                problem: s("snowflake machine id 7 is also ..."),
            },
            SnowflakeMachineIdReplicated {
                machine: 7,
                system_identifier: 7_400_000_000_000_000_000,
            },
            SnowflakeMarkDropped {
                database: s("postgres"),
            },
            CitusCoordinatorFailed {
                tag: s("orders"),
                message: s("connection refused"),
            },
            CitusCoordinatorRefused {
                tag: s("orders"),
                sqlstate: PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE as i32,
                message: s("the row is locked"),
                hint: s("Wait."),
            },
            CitusTagMissing { tag: s("orders") },
            RenameAttached { tag: s("orders") },
            RenameUsedByGenerated {
                tag: s("orders"),
                user: s("the generation expression of column \"n\" of table t"),
            },
            AdoptNoColumn {
                table: s("orders"),
                column: s("idd"),
            },
            AdoptNotATable {
                table: s("orders_view"),
            },
            AdoptGenerated {
                table: s("orders"),
                column: s("total"),
            },
            AdoptWrongType {
                table: s("orders"),
                column: s("code"),
                type_name: s("text"),
            },
            AdoptAlreadyDrawing {
                table: s("orders"),
                column: s("id"),
                tag: s("orders"),
            },
            CitusCreateOnWorker { tag: s("orders") },
            CitusNotCoordinator {
                function: "segment_citus_catch_up",
                elsewhere: NotCoordinator::NoCitus,
            },
            CitusNotCoordinator {
                function: "segment_citus_catch_up",
                elsewhere: NotCoordinator::NotJoined,
            },
            CitusNotCoordinator {
                function: "segment_citus_catch_up",
                elsewhere: NotCoordinator::Worker,
            },
            CitusCatchUpUnanswered {
                nodes: s("127.0.0.1:9702: connection refused"),
            },
            CitusCreateBelowWorkers {
                tag: tag(),
                start: 1,
                floor: 5700,
                step: 100,
            },
            CitusCreateBelowWorkers {
                tag: tag(),
                start: 1,
                floor: 5700,
                step: 1000,
            },
            CitusNewRowUnanswered {
                tag: tag(),
                nodes: s("127.0.0.1:9702: connection refused"),
            },
            CitusRenameBelowWorkers {
                old: s("orders_v2"),
                new: tag(),
                max_id: 0,
                floor: 5700,
            },
            CitusExtensionTable {
                table: s("id_segment"),
                function: s("create_reference_table"),
            },
            LeaseCentralClock {
                problem: s("the central server has no view idgen_lease_clock"),
            },
            lease_table(LeaseTableProblem::NotQualified),
            lease_table(LeaseTableProblem::NotForeign {
                relation: s("public.idgen_machine_lease"),
                kind: s("table"),
                owner: s("mallory"),
            }),
            lease_table(LeaseTableProblem::UntrustedOwner {
                relation: s("public.idgen_machine_lease"),
                owner: s("mallory"),
            }),
            SnowflakeLeaseCeiling {
                waited_ms: 5,
                why: Some(s("the central server is unreachable")),
            },
            SnowflakeKeeperSlow { waited_ms: 5 },
            SnowflakeMarkNotLogged {
                problem: s("no table snowflake_high_water"),
                waited_ms: 5,
            },
            SnowflakeKeeperNotRegistered {
                max_worker_processes: 1,
            },
            SnowflakeStateFile {
                problem: s("bad checksum"),
                io: false,
            },
            SnowflakeSettingsChanged {
                change: s("epoch"),
                generator: "standard",
                high_id: 1,
                ahead_ms: 1000,
            },
            SnowflakeExhausted {
                generator: "JavaScript-safe",
                time_bits: 41,
                ended: s("2094-01-01"),
            },
            SnowflakeExhausted {
                generator: "standard",
                time_bits: 41,
                ended: s("2094-01-01"),
            },
            SnowflakeFieldTooLarge {
                field: "sequence",
                value: 5000,
                bits: 12,
            },
            SnowflakeMachineTooLarge {
                machine: 16,
                machine_bits: 4,
            },
            BadSnowflakeId {
                id: -1,
                problem: s("it is negative"),
            },
            BadSnowflakeText { text: s("x") },
            TimestampOutOfRange {
                problem: s("before the epoch"),
            },
            Internal {
                context: "test",
                message: s("cannot happen"),
            },
            MaxIdDecrease {
                tag: tag(),
                from: 2,
                to: 1,
            },
            TagRenamed {
                from: tag(),
                to: s("invoices"),
            },
            MaxIdNotRaised {
                tag: tag(),
                high_water: 10,
                why: s("a trigger"),
            },
            NoSuchServer { server: server() },
            NotPostgresFdw {
                server: server(),
                wrapper: s("file_fdw"),
            },
            NoConnectTimeout { server: server() },
            RemoteSessionUnsafe {
                server: server(),
                problem: s("does not set synchronous_commit in its options"),
                options: Some(s("-c work_mem=64MB")),
            },
            AttachBelowDetachedMark {
                tag: tag(),
                server: server(),
                max_id: 1,
                mark: 10,
            },
            AttachCentralMoved {
                tag: tag(),
                server: server(),
                moved: moved(),
            },
            RemoteTagMissing {
                tag: tag(),
                server: server(),
            },
            NoCentralOrigin {
                server: server(),
                view: s("public.id_segment_origin"),
            },
            ForeignTableTaken {
                name: s("id_segment_central"),
                server: server(),
            },
            RowHeldByCaller { tag: tag() },
            AttachedByCaller { tag: tag() },
            ExtensionDropped,
            RefillFailed {
                tag: tag(),
                sqlstate,
                message: message.clone(),
                hint: hint.clone(),
            },
            RefillTimedOutBecause {
                tag: tag(),
                waited_ms: 5000,
                sqlstate,
                message: message.clone(),
                hint: hint.clone(),
            },
            TagExhausted { tag: tag() },
            RangeShortened {
                tag: tag(),
                asked: 1000,
                granted: 10,
                central: true,
            },
            RefillRowLocked { central: None },
            RefillRowLocked {
                central: Some(server()),
            },
            // Not a cancel: its message reads pg_idgen.remote_timeout,
            // which needs a server.
            RemoteRefillFailed {
                server: server(),
                sqlstate: ERRCODE_CONNECTION_FAILURE as i32,
                message: s("could not connect"),
                hint: s(""),
            },
            RemoteRefillFailed {
                server: server(),
                sqlstate: ERRCODE_INSUFFICIENT_PRIVILEGE as i32,
                message: s("permission denied for table id_segment"),
                hint: s(""),
            },
            RemoteRefillFailed {
                server: server(),
                sqlstate,
                message,
                hint,
            },
            RefillSpiFailed {
                tag: tag(),
                message: s("SPI_execute failed"),
            },
            GiveBackRewritten {
                tag: tag(),
                wanted: 5,
                written: 10,
            },
            RangeNotCached {
                tag: tag(),
                first: 1,
                last: 10,
                problem: s("the slot was freed"),
            },
            WorkerExitedWhileStarting { database: 16384 },
            FallbackIds {
                tag: tag(),
                waited_ms: 100,
                cause: s("the refill failed"),
                count: 1,
            },
            MachineIdNotSet {
                function: "snowflake_nextval",
            },
            CurrvalNotYetDefined {
                tag: tag(),
                recovery: false,
            },
            CurrvalNotYetDefined {
                tag: tag(),
                recovery: true,
            },
            SetvalOfAttachedTag {
                tag: tag(),
                server: server(),
            },
            SetvalOfNewTag { tag: tag() },
            DrawAfterRemovedHere { tag: tag() },
            DeclarationOutdated {
                function: "segment_status()",
                column: 21,
            },
            BadSetvalValue { value: -1 },
            BadLayoutArgument {
                problem: s("too many bits"),
            },
            FallbackNeedsMachineId,
            PersistAheadAboveMaxLead {
                persist_ahead_ms: 2000,
                max_lead_ms: 1000,
                window_ms: 1000,
            },
            FallbackWithoutMachineId {
                tag: tag(),
                waited_ms: 100,
                cause: s("the refill failed"),
            },
            HostnameMachineIdDoubt {
                machine: 1,
                doubt: s("the host name has no number at its end"),
            },
            StateFileWriteFailed {
                problem: s("No space left on device"),
            },
            SnowflakeMarkLowered {
                operation: "DELETE",
            },
            SnowflakeServerMayBeACopy {
                machine_id: 1,
                timeline: 1,
            },
        ]
    }

    /// A value of every `RefillProblem` variant.
    fn every_refill_problem() -> Vec<RefillProblem> {
        use RefillProblem::*;
        vec![
            ServedByAnotherLane { lane: 16385 },
            NoExtension,
            NoRow,
            NoRemoteRow {
                foreign_table: s("id_segment_central"),
                max_id_seen: Some(10),
                step: Some(1000),
            },
            NoRemoteRow {
                foreign_table: s("id_segment_central"),
                max_id_seen: None,
                step: None,
            },
            ForeignTableGone {
                server: s("central"),
            },
            StepNotPositive { step: 0 },
            MaxIdBehind {
                max_id: 1,
                handed_out: 10,
            },
            CitusWentBack {
                max_id: 1,
                seen: 10,
            },
            CitusCatchUpUnanswered {
                nodes: s("127.0.0.1:9702: connection refused"),
            },
            Exhausted { max_id: i64::MAX },
            RowReplicated {
                subscription: s("from_blue"),
            },
            CasContention { attempts: 100 },
            WriteNotApplied {
                read_max_id: 1,
                written_max_id: 1,
            },
            CentralWentBack {
                server: s("central"),
                foreign_table: s("id_segment_central"),
                max_id: 1,
                seen: 10,
            },
            CentralMoved {
                server: s("central"),
                moved: moved(),
            },
            RemoteSessionUnsafe {
                server: s("central"),
                problem: s("does not set synchronous_commit in its options"),
                options: None,
            },
        ]
    }

    /// What every report must have: a message, a hint that ends a
    /// sentence (or the SQL statement to run, with its `;`), and a
    /// SQLSTATE other than XX000 unless the error is internal by nature.
    fn check(what: &str, report: &Report, internal: bool) -> Vec<String> {
        let mut wrong = Vec::new();
        if report.message.trim().is_empty() {
            wrong.push(format!("{what}: no message"));
        }
        if !(report.hint.ends_with('.') || report.hint.ends_with(';')) {
            wrong.push(format!("{what}: hint {:?} ends no sentence", report.hint));
        }
        if (report.code == ERRCODE_INTERNAL_ERROR) != internal {
            wrong.push(format!("{what}: SQLSTATE {:?}", report.code));
        }
        wrong
    }

    #[test]
    fn every_error_has_a_sqlstate_a_message_and_a_hint() {
        let mut wrong = Vec::new();
        for error in every_error() {
            // Internal by nature: a bug, or SPI failing, not the user's doing.
            let internal = matches!(
                error,
                IdgenError::Internal { .. }
                    | IdgenError::RefillSpiFailed { .. }
                    | IdgenError::RangeNotCached { .. }
            );
            wrong.extend(check(&format!("{error:?}"), &error.report(), internal));
        }
        for problem in every_refill_problem() {
            // Never reaches a caller: the worker hands the tag over.
            let internal = matches!(problem, RefillProblem::ServedByAnotherLane { .. });
            let report = problem.report("orders");
            wrong.extend(check(&format!("{problem:?}"), &report, internal));
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// A report does not come from another family's `misrouted` arm: each
    /// variant's family has an arm for it.
    #[test]
    fn every_error_is_declared_in_its_family() {
        for error in every_error() {
            let report = error.report();
            assert!(
                !report.message.starts_with("pg_idgen has no report for"),
                "{}",
                report.message
            );
        }
    }
}
