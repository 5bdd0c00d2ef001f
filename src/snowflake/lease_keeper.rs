//! The lease keeper: with `pg_idgen.machine_id = 'lease'`, a background
//! worker that takes this server's snowflake machine id from the lease
//! table on a central server (through the postgres_fdw foreign table
//! `pg_idgen.lease_table` in `pg_idgen.lease_database`), renews it, and
//! tells both generators what they may issue. The rules are `lease.rs`'s;
//! this is the glue: SPI, clocks, the generators.
//!
//! * Every claim and renewal reads the central server's clock through
//!   `pg_idgen.lease_clock_table` in its transaction, before the CAS: the
//!   restore fence (`lease.rs`). That table must be on the lease table's
//!   own foreign server, or the keeper claims and renews nothing and says
//!   how to create it.
//! * Claim: read the rows, let `LeaseWatch` choose (this server's previous
//!   id, its own row, the lowest free or expired one), CAS the row. The
//!   generators switch to the id with `Generator::take_lease` once
//!   `Held::wait_before_issuing_ms` allows (the clock near the fenced
//!   floor, the ceiling above it; `lease_problem` says until when
//!   meanwhile): above the floor, below the recorded ceiling, until the
//!   monotonic deadline.
//! * Renew from a third of the duration on; a renewal that arrives in time
//!   raises ceiling and deadline (`renew_lease`). One that finds the row
//!   changed (no row, or 40001 through postgres_fdw) means the lease is
//!   lost: the generators stop at once and the keeper claims again. One
//!   that fails (the central server unreachable) changes nothing: the
//!   generators stop by themselves at the deadline, after which the lease
//!   is over and the keeper claims again — never renews: a table restored
//!   meanwhile could bring back this lease's very version after another
//!   server held the id. For the same reason a renewal whose reply comes
//!   at or after the deadline (`Held::lapses`: sent late, or held on the
//!   way) counts as a claim: the generators stop, and get the lease back
//!   above the fence. A row a session holds locked on
//!   the central server (the pinned `lock_timeout` fails the claim or
//!   renewal with 55P03) is passed over for a lease duration: the keeper
//!   claims another free id.
//! * After each renewal it reads the table again, and tells (a WARNING,
//!   and `lease_problem`) a live server holding rows under its name
//!   (`LeaseWatch::namesakes`) or under another lease duration
//!   (`LeaseWatch::other_durations`), a central clock that went back
//!   (`CentralClock`), and its own clock running ahead of the central one.
//! * At shutdown (SIGTERM) the generators stop, then the row is given up
//!   with the exact floor, so the id is free at once (tried again for up
//!   to `GIVE_UP_TIMEOUT_MS` while the row is locked: a renewal the
//!   shutdown cut off may still be committing on the central server).
//! * Seeding: the rows `0 ..= lease::leased_max_machine_id(layout)` (at
//!   most 1,024 whatever the machine bits) are inserted before the first
//!   read, and again before the next read whenever one finds some missing.
//! * A reload (SIGHUP) re-reads `pg_idgen.snowflake_max_lead` and
//!   `pg_idgen.remote_timeout`: the next claim or renewal uses them.
//!
//! # States
//!
//! ```text
//!   start
//!     |
//!     v
//!  SEEKING <-----------------------------------------------+
//!     |                                                    |
//!     | claim won                                          |
//!     v                                                    |
//!  CLAIMED: waits for the floor or the ceiling <-------+   |
//!     |     (and renews meanwhile)                     |   |
//!     | floor near, ceiling above it                   |   |
//!     v                                                |   |
//!   HELD: renewed in time, stays HELD                  |   |
//!     |                                                |   |
//!     +-- a renewal replied at or after the -----------+   |
//!     |   deadline (lapses): fenced anew                   |
//!     +-- the deadline passed, no renewal in time:         |
//!     |   LAPSED ------------------------------------------+
//!     +-- a renewal matched no row: LOST ------------------+
//!         (LAPSED and LOST come from CLAIMED too)
//!
//!  any state --SIGTERM--> GIVING UP: stop the generators, give the
//!                         row up with the exact floor, exit
//! ```
//!
//! The states are the fields `held` and `handed_over` of `Keeper`:
//!
//! * **SEEKING**: `held` is `None`. Each `step` reads the rows and claims
//!   one (`claim`): `previous` is the id to take back first, `avoid` the
//!   ids whose row was locked at the last try (passed over for a lease
//!   duration). With nothing to claim it waits for a row to expire
//!   (`ClaimChoice::WaitUntil`, `LeaseError::AllHeld`) and says so.
//! * **CLAIMED**: `held` is `Some`, `handed_over` false: the generators
//!   issue nothing. `hand_over_when_ready` waits for the floor
//!   (`IssueWait::ForClock`) or for the ceiling (`IssueWait::ForCeiling`:
//!   a renewal must raise it); `waiting` says which, `taken` how the lease
//!   was taken (`CLAIMED`, or `RENEWED_LATE`). Renewals go on meanwhile.
//! * **HELD**: `held` is `Some`, `handed_over` true: the generators issue
//!   under it (`apply`), and each renewal in time raises its ceiling and
//!   deadline in them.
//! * **LAPSED**: `held.stop_at_mono_ms` passed with no renewal in time
//!   (the generators stopped by themselves): `step`, or a `renew` that
//!   failed, ends the lease (`end_lease`). A renewal whose reply comes at
//!   or after the deadline (`Held::lapses`) but in time for the one it
//!   grants goes back to CLAIMED instead (`stop`, fenced anew); one past
//!   that too leaves the deadline passed: LAPSED at the next `step`.
//! * **LOST**: a renewal matched no row (its CAS lost, or 40001 through
//!   postgres_fdw): `end_lease` at once.
//! * **GIVING UP**: on SIGTERM (or when the postmaster dies), from any
//!   state: `give_up` stops the generators, then, if `held` is `Some`,
//!   frees the row with the exact floor; the process exits.
//!
//! LAPSED and LOST are moments, not states to rest in: `end_lease` stops
//! the generators and sets `held` to `None`, which is SEEKING.
//!
//! # Privileges
//!
//! `pg_idgen.lease_table` and `pg_idgen.lease_clock_table` are read as
//! `schema.name`, never on a search path; each must be a foreign table
//! owned by a superuser or the owner of pg_idgen, or it is refused with a
//! WARNING and never touched (`find_tables`). Every statement on them runs
//! as that owner in a security-restricted operation (`Table::as_owner`),
//! with the worker's pinned search path (`bgworker::connect`): a role
//! with CREATE on a schema or the database can neither redirect the
//! keeper nor run code through it.
//!
//! # Shared state
//!
//! `LeaseShared` (`shared.rs`), in the snowflake shared memory: written by
//! this keeper alone, read by `snowflake_status` and by callers that found
//! no lease.
//!
//! Each remote transaction is bounded by `pg_idgen.remote_timeout`, the
//! setting that bounds every transaction of the extension on a central
//! server.

use super::clock::timestamptz_text;
use super::clock::{mono_now_ms, now_unix_ms};
use super::config::{lease_holder, lease_settings, setting_text};
use super::generator::Generator;
use super::lease::{
    check_central_reading, clock_ahead_of_central_ms, clock_foreign_table_sql, clock_sql,
    holder_name, holder_of_this_start, leased_max_machine_id, needs_seeding, read_sql, seed_sql,
    CentralClock, Claim, ClaimChoice, Claimant, Held, IssueWait, LeaseRow, LeaseSettings,
    LeaseWatch, Written, CENTRAL_CLOCK_SLACK_MS, CLOCK_VIEW_SQL,
};
use super::shared::{snowflake, Snowflake};
use crate::bgworker;
use crate::catalog::{as_owner, quote_identifier};
use crate::errors::{IdgenError, LeaseTableProblem, StoredError};
use crate::failpoints::failpoint;
use crate::gucs;
use crate::remote_session;
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::prelude::*;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The shortest and longest sleep between two steps of the keeper: it
/// never spins, and it looks at its row at least once a second.
const MIN_SLEEP_MS: i64 = 10;
const MAX_SLEEP_MS: i64 = 1000;

/// After a failure (the central server unreachable, no lease table, rows
/// it cannot use): try again in this long.
const RETRY_MS: i64 = 1000;

/// After a read whose rows changed under it: read again in this long.
const READ_AGAIN_MS: i64 = 100;

/// A renewal that failed is tried again after this share of the time
/// between renewals (at least `RENEW_RETRY_MIN_MS`): about ten more tries
/// before the deadline stops the generators.
const RENEW_RETRY_DIVISOR: i64 = 10;
const RENEW_RETRY_MIN_MS: i64 = 50;

/// Registers the keeper; called from `_PG_init` in lease mode.
pub fn register() {
    BackgroundWorkerBuilder::new("pg_idgen lease keeper")
        .set_type("pg_idgen lease keeper")
        .set_library("pg_idgen")
        .set_function("pg_idgen_lease_keeper_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// How the keeper's last remote statement ended.
enum Outcome<T> {
    Done(T),
    /// The statement matched nothing: the row is not as read (someone
    /// else wrote it, or 40001 through postgres_fdw), or — looking for the
    /// lease table — no such table.
    NoMatch,
    Failed(StoredError),
}

/// How long the give-up at shutdown may take at most (less if
/// `pg_idgen.remote_timeout` is shorter); its connection is cut
/// `bgworker::CUT_AFTER_TIMEOUT_MS` later, so the keeper answers a fast
/// shutdown on a dead network within 4 s. Not less: a shutdown that cut
/// a renewal's connection leaves the give-up to open a new one, which a
/// busy machine may take over a second to do. A give-up that finds its
/// row locked — by the renewal the shutdown cut off, still committing on
/// the central server — tries again within this time. A row not given up
/// expires after the lease, as a crashed holder's does.
const GIVE_UP_TIMEOUT_MS: i32 = 3000;

/// How long the give-up waits before it tries again on a locked row.
const GIVE_UP_RETRY_MS: i64 = 50;

/// Runs `body` in a transaction of its own, bounded by
/// `pg_idgen.remote_timeout`; a body that returns `None` matched nothing.
fn run<T>(body: impl FnOnce() -> Result<Option<T>, pgrx::spi::Error>) -> Outcome<T> {
    run_within(gucs::REMOTE_TIMEOUT_MS.get(), body)
}

/// `run`, bounded by `timeout_ms`.
fn run_within<T>(
    timeout_ms: i32,
    body: impl FnOnce() -> Result<Option<T>, pgrx::spi::Error>,
) -> Outcome<T> {
    match bgworker::in_transaction(timeout_ms, body) {
        Ok(Ok(Some(value))) => Outcome::Done(value),
        Ok(Ok(None)) => Outcome::NoMatch,
        Ok(Err(e)) => Outcome::Failed(StoredError {
            sqlstate: PgSqlErrorCode::ERRCODE_INTERNAL_ERROR as i32,
            message: e.to_string(),
            hint: String::new(),
        }),
        Err(e) if e.sqlstate == PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE as i32 => {
            Outcome::NoMatch
        }
        Err(e) => Outcome::Failed(e),
    }
}

/// Whether a remote statement failed on a locked row (55P03: the central
/// session's pinned `lock_timeout`).
fn row_locked(e: &StoredError) -> bool {
    e.sqlstate == PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE as i32
}

/// Entry point, named in `bgw_function_name`.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_idgen_lease_keeper_main(_arg: pg_sys::Datum) {
    bgworker::attach_signal_handlers();
    let Some(state) = snowflake() else { return };
    let database = setting_text(&gucs::LEASE_DATABASE);
    // Left in place if connecting fails (a FATAL in the log).
    state.lease.problem.set(&format!(
        "the lease keeper could not connect to pg_idgen.lease_database \"{database}\" (the server log says why)"
    ));
    bgworker::connect(bgworker::Database::Name(&database));
    state.lease.problem.set("");
    // SAFETY: MyProcPid is set in every started process.
    state
        .lease
        .pid
        .store(unsafe { pg_sys::MyProcPid }, Ordering::Release);
    let settings = match lease_settings() {
        Ok(s) => s,
        Err(e) => {
            state.lease.problem.set(&e.to_string());
            return;
        }
    };
    let mut keeper = Keeper {
        state,
        settings,
        holder: holder_of_this_start(&lease_holder(), start_token()),
        layout_text: {
            let l = state.main.layout();
            format!(
                "epoch_ms {} bits {}/{}/{}",
                l.epoch_ms, l.time_bits, l.machine_bits, l.sequence_bits
            )
        },
        max_machine: leased_max_machine_id(state.main.layout().max_machine()),
        table: None,
        watch: LeaseWatch::new(),
        held: None,
        handed_over: false,
        previous: None,
        seeded: false,
        avoid: Vec::new(),
        central_clock: CentralClock::default(),
        waiting: None,
        taken: CLAIMED,
        warnings: Vec::new(),
    };
    loop {
        if bgworker::reload_if_asked() {
            keeper.reread_settings();
        }
        let sleep_ms = keeper.step().clamp(MIN_SLEEP_MS, MAX_SLEEP_MS);
        if bgworker::shutdown_requested() || !bgworker::wait(Duration::from_millis(sleep_ms as u64))
        {
            keeper.give_up();
            // Exit code 1: the postmaster starts the keeper again (after
            // pg_terminate_backend, say) unless the server is shutting down.
            // SAFETY: ends this process the way PostgreSQL's own code does.
            unsafe { pg_sys::proc_exit(1) };
        }
    }
}

/// Reads the central server's clock through `clock_table` (one row, Unix
/// ms), in the caller's transaction; raises `LeaseCentralClock` (so that
/// the transaction rolls back) for a table that gives no such row, or a
/// reading `lease::check_central_reading` refuses.
fn read_central_clock(
    client: &pgrx::spi::SpiClient,
    clock: &Table,
) -> Result<i64, pgrx::spi::Error> {
    let clock_table = &clock.qualified;
    let clock = clock.as_owner(|| client.select(&clock_sql(clock_table), Some(2), &[]))?;
    let rows = clock.len();
    let reading = match rows {
        1 => clock.first().get::<i64>(1)?,
        _ => None,
    };
    let problem = match reading {
        None => format!(
            "pg_idgen.lease_clock_table {clock_table} gave {rows} rows, not one row with a unix_ms: it must be a foreign table over the central server's view ({CLOCK_VIEW_SQL})"
        ),
        Some(central) => match check_central_reading(central, now_unix_ms()) {
            Ok(()) => return Ok(central),
            Err(e) => e.to_string(),
        },
    };
    IdgenError::LeaseCentralClock { problem }.raise()
}

/// How a lease waiting for its hand-over was taken (`Keeper::taken`).
const CLAIMED: &str = "is claimed";
const RENEWED_LATE: &str =
    "was renewed after its deadline, which counts as a claim (its row could have been taken over and given back)";

/// A token for this start of the keeper (`lease::holder_of_this_start`):
/// random, so that two servers with one name draw different ones.
fn start_token() -> u32 {
    let mut bytes = [0u8; 4];
    // SAFETY: fills the buffer it is given; on failure (no entropy
    // source) the process id and the time stand in.
    let random = unsafe { pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), bytes.len()) };
    if random {
        u32::from_ne_bytes(bytes)
    } else {
        // SAFETY: plain reads of this process's id and the clock.
        unsafe { (pg_sys::MyProcPid as u32) ^ (pg_sys::GetCurrentTimestamp() as u32) }
    }
}

struct Keeper {
    state: &'static Snowflake,
    settings: LeaseSettings,
    /// This start's holder: the server's name and a token.
    holder: String,
    layout_text: String,
    max_machine: i32,
    /// The lease table, as last found (for the give-up).
    table: Option<Table>,
    watch: LeaseWatch,
    held: Option<Held>,
    /// Whether the generators were given `held` (`Generator::take_lease`):
    /// a claimed lease waits for `Held::wait_before_issuing_ms`. A flag,
    /// not `LeaseShared::machine`: a keeper that died without stopping
    /// the generators leaves that set, and its successor must hand its own
    /// claim over rather than renew the old lease.
    handed_over: bool,
    previous: Option<i32>,
    /// The last read found every row `0 ..= max_machine`; until then each
    /// read seeds the missing ones first.
    seeded: bool,
    /// Ids whose row was locked on the central server at the last try,
    /// and until when (monotonic ms) not to try them again.
    avoid: Vec<(i32, i64)>,
    /// The central clock as read by this keeper's claims and renewals.
    central_clock: CentralClock,
    /// Why the claimed lease is not with the generators yet.
    waiting: Option<String>,
    /// How the held lease was last taken anew, for `waiting`: claimed, or
    /// renewed after its deadline (`Held::lapses`).
    taken: &'static str,
    /// What the last successful write and read found wrong, to tell.
    warnings: Vec<String>,
}

/// The relations the keeper reads, as found.
struct Tables {
    lease: Table,
    clock: Table,
}

/// A relation the keeper touches: its quoted, schema-qualified name, its
/// OID and its owner (whose rights its statements run with).
#[derive(Clone)]
struct Table {
    qualified: String,
    oid: u32,
    owner: pg_sys::Oid,
}

impl Table {
    /// Runs `body` (a statement on this table) as the table's owner, in a
    /// security-restricted operation.
    fn as_owner<R>(&self, body: impl FnOnce() -> R) -> R {
        // INVARIANT: never as the bootstrap superuser (`find_tables`).
        as_owner(self.owner, body)
    }
}

/// A trusted foreign table a setting names, as the catalog has it.
struct Foreign {
    qualified: String,
    oid: u32,
    owner: pg_sys::Oid,
    server: String,
    options: Option<String>,
}

impl Foreign {
    fn table(&self) -> Table {
        Table {
            qualified: self.qualified.clone(),
            oid: self.oid,
            owner: self.owner,
        }
    }
}

/// What a setting names.
enum Looked {
    Missing,
    Foreign(Foreign),
    Refused(LeaseTableProblem),
}

/// Looks `name` up as `schema.relation` (`parse_ident`), never on a
/// search path, in the caller's transaction.
fn look_up(client: &pgrx::spi::SpiClient, name: &str) -> Result<Looked, pgrx::spi::Error> {
    let rows = client.select(
        &format!(
            "SELECT c.oid::pg_catalog.regclass::pg_catalog.text, c.oid, c.relowner, \
                    CASE c.relkind WHEN 'f' THEN NULL WHEN 'r' THEN 'table' WHEN 'p' THEN 'table' \
                         WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' \
                         ELSE 'relation' END, \
                    pg_catalog.pg_get_userbyid(c.relowner)::pg_catalog.text, \
                    r.rolsuper OR c.relowner OPERATOR(pg_catalog.=) ANY ( \
                        SELECT e.extowner FROM pg_catalog.pg_extension e \
                         WHERE e.extname OPERATOR(pg_catalog.=) 'pg_idgen'), \
                    s.srvname::pg_catalog.text, {} \
               FROM (SELECT pg_catalog.parse_ident($1) AS parts) i \
               JOIN pg_catalog.pg_namespace n \
                 ON n.nspname OPERATOR(pg_catalog.=) i.parts[1] \
                AND pg_catalog.array_length(i.parts, 1) OPERATOR(pg_catalog.=) 2 \
               JOIN pg_catalog.pg_class c \
                 ON c.relnamespace OPERATOR(pg_catalog.=) n.oid \
                AND c.relname OPERATOR(pg_catalog.=) i.parts[2] \
               JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) c.relowner \
               LEFT JOIN pg_catalog.pg_foreign_table f ON f.ftrelid OPERATOR(pg_catalog.=) c.oid \
               LEFT JOIN pg_catalog.pg_foreign_server s ON s.oid OPERATOR(pg_catalog.=) f.ftserver",
            remote_session::SERVER_OPTIONS_SQL
        ),
        Some(1),
        &[name.into()],
    )?;
    if rows.is_empty() {
        let parts = client.select(
            "SELECT pg_catalog.array_length(pg_catalog.parse_ident($1), 1)",
            Some(1),
            &[name.into()],
        )?;
        return Ok(match parts.first().get::<i32>(1)? {
            Some(2) => Looked::Missing,
            _ => Looked::Refused(LeaseTableProblem::NotQualified),
        });
    }
    let row = rows.first();
    let relation = row.get::<String>(1)?.unwrap_or_default();
    let owner_name = row.get::<String>(5)?.unwrap_or_default();
    if let Some(kind) = row.get::<String>(4)? {
        return Ok(Looked::Refused(LeaseTableProblem::NotForeign {
            relation,
            kind,
            owner: owner_name,
        }));
    }
    if row.get::<bool>(6)? != Some(true) {
        return Ok(Looked::Refused(LeaseTableProblem::UntrustedOwner {
            relation,
            owner: owner_name,
        }));
    }
    Ok(Looked::Foreign(Foreign {
        qualified: relation,
        oid: row.get::<pg_sys::Oid>(2)?.map_or(0, |o| o.to_u32()),
        owner: row.get::<pg_sys::Oid>(3)?.unwrap_or(pg_sys::InvalidOid),
        server: row.get::<String>(7)?.unwrap_or_default(),
        options: row.get::<String>(8)?,
    }))
}

impl Keeper {
    /// After a reload: `pg_idgen.snowflake_max_lead` (the one lease setting
    /// a reload can change) reaches the ceiling of the next renewal and the
    /// hand-over of a claimed lease. A value the lease rules refuse keeps
    /// the one before, and says so.
    fn reread_settings(&mut self) {
        match lease_settings() {
            Ok(settings) => self.settings = settings,
            Err(e) => self.problem(&format!(
                "the settings after the reload are refused, the lease goes on with the ones before: {e}"
            )),
        }
    }

    /// One step; returns how long to sleep (ms).
    fn step(&mut self) -> i64 {
        if self
            .held
            .as_ref()
            .is_some_and(|held| mono_now_ms() >= held.stop_at_mono_ms)
        {
            // The deadline passed with no renewal (the generators stopped
            // by themselves): the lease is over, whatever happens to the
            // tables meanwhile.
            // INVARIANT: unique IDs — the restore fence (lease.rs): a lease
            // past its deadline is never renewed, only claimed anew.
            self.end_lease();
        }
        let Some(tables) = self.find_tables() else {
            return RETRY_MS;
        };
        match self.held.clone() {
            Some(held) if held.renew_due(mono_now_ms()) => self.renew(&tables, &held),
            Some(_) => self.hand_over_when_ready(),
            None => self.claim(&tables),
        }
    }

    /// A failure: counted, logged once, and `lease_problem`.
    fn problem(&self, text: &str) {
        self.state.lease.failures.fetch_add(1, Ordering::Relaxed);
        if !self.state.lease.problem.holds(text) {
            pgrx::log!("pg_idgen lease keeper: {text}");
        }
        self.state.lease.problem.set(text);
    }

    /// After a successful step: `lease_problem` is what the keeper waits
    /// for and what it found wrong ("" when nothing), logged once — a
    /// WARNING when something is wrong.
    fn publish(&self) {
        let text = self
            .waiting
            .iter()
            .chain(&self.warnings)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        if !self.state.lease.problem.holds(&text) {
            if !self.warnings.is_empty() {
                pgrx::warning!("pg_idgen lease keeper: {text}");
            } else if !text.is_empty() {
                pgrx::log!("pg_idgen lease keeper: {text}");
            }
        }
        self.state.lease.problem.set(&text);
    }

    /// The lease table and the central clock's table, looked up at every
    /// step (a local catalog read): the lease table's server `options`
    /// must pin the central session (`remote_session.rs`), the clock must
    /// be read through the same server, and an `ALTER SERVER` or a new
    /// table takes effect at once.
    ///
    /// INVARIANT: the keeper touches only the relation each setting names
    /// by schema and name (never through a search path), only if it is a
    /// foreign table whose owner is a superuser or pg_idgen's owner, and
    /// only as that owner (`catalog::as_owner`). Anything else is refused
    /// with a WARNING (`LeaseTableRefused`), never read.
    fn find_tables(&mut self) -> Option<Tables> {
        let lease_name = setting_text(&gucs::LEASE_TABLE);
        let clock_name = setting_text(&gucs::LEASE_CLOCK_TABLE);
        let database = setting_text(&gucs::LEASE_DATABASE);
        let found = run(|| {
            Spi::connect(|client| {
                Ok(Some((
                    look_up(client, &lease_name)?,
                    look_up(client, &clock_name)?,
                )))
            })
        });
        let (lease, clock) = match found {
            Outcome::Done(found) => found,
            Outcome::NoMatch => return None,
            Outcome::Failed(e) => {
                self.problem(&e.message);
                return None;
            }
        };
        let lease = match self.usable("pg_idgen.lease_table", &lease_name, lease) {
            Some(Some(lease)) => lease,
            Some(None) => {
                self.problem(&format!(
                    "pg_idgen.lease_table \"{lease_name}\" does not exist in database \"{database}\" (create the foreign table over the central idgen_machine_lease)"
                ));
                return None;
            }
            None => return None,
        };
        self.state.lease.source.set(&format!(
            "{} ({database}.{})",
            lease.server, lease.qualified
        ));
        if self.table.as_ref().is_some_and(|t| t.oid != lease.oid) {
            pgrx::warning!(
                "pg_idgen lease keeper: pg_idgen.lease_table \"{lease_name}\" is another relation than at the last look ({}, OID {}); the held lease, if any, is renewed through it or lost",
                lease.qualified,
                lease.oid
            );
        }
        self.table = Some(lease.table());
        if let Some(problem) = remote_session::problem(lease.options.as_deref()) {
            let unsafe_session = IdgenError::RemoteSessionUnsafe {
                server: lease.server.clone(),
                problem,
                options: lease.options.clone(),
            }
            .stored();
            self.problem(&format!(
                "{} (no lease is claimed or renewed through it). {}",
                unsafe_session.message, unsafe_session.hint
            ));
            return None;
        }
        let create = format!(
            "on the central server: {CLOCK_VIEW_SQL}; and here, in database \"{database}\": {};",
            clock_foreign_table_sql(&clock_name, &quote_identifier(&lease.server))
        );
        match self.usable("pg_idgen.lease_clock_table", &clock_name, clock) {
            None => None,
            Some(None) => {
                self.problem(&format!(
                    "pg_idgen.lease_clock_table \"{clock_name}\" does not exist in database \"{database}\": no lease is claimed or renewed without the central server's clock, which keeps a restored lease table from repeating IDs. Create it {create}"
                ));
                None
            }
            Some(Some(clock)) if clock.server != lease.server => {
                self.problem(&format!(
                    "pg_idgen.lease_clock_table \"{clock_name}\" is on foreign server \"{}\", the lease table on foreign server \"{}\": the clock must be the lease table's own server's, or it guards nothing. Create it {create}",
                    clock.server, lease.server
                ));
                None
            }
            Some(Some(clock)) => Some(Tables {
                lease: lease.table(),
                clock: clock.table(),
            }),
        }
    }

    /// What `find_tables` may use of a look-up: `Some(Some(found))` a
    /// trusted foreign table, `Some(None)` none by that name; `None` a
    /// refusal, told.
    fn usable(
        &mut self,
        setting: &'static str,
        value: &str,
        looked: Looked,
    ) -> Option<Option<Foreign>> {
        let why = match looked {
            Looked::Missing => return Some(None),
            Looked::Foreign(found) => return Some(Some(found)),
            Looked::Refused(why) => why,
        };
        self.refuse(IdgenError::LeaseTableRefused {
            setting,
            value: value.to_string(),
            why,
        });
        None
    }

    /// A refusal of what a setting names: a WARNING with its SQLSTATE when
    /// it is new, and `lease_problem` while it lasts.
    fn refuse(&mut self, refusal: IdgenError) {
        let stored = refusal.stored();
        let text = format!("{} {}", stored.message, stored.hint);
        self.state.lease.failures.fetch_add(1, Ordering::Relaxed);
        if !self.state.lease.problem.holds(&text) {
            refusal.warn();
        }
        self.state.lease.problem.set(&text);
    }

    fn read_rows(&mut self, table: &Table) -> Outcome<Vec<LeaseRow>> {
        let max = self.max_machine;
        let seed = !self.seeded;
        run(|| {
            Spi::connect_mut(|client| {
                if seed {
                    table.as_owner(|| {
                        client.update(&seed_sql(&table.qualified), None, &[max.into()])
                    })?;
                }
                let rows = table
                    .as_owner(|| client.select(&read_sql(&table.qualified), None, &[max.into()]))?;
                let mut read = Vec::new();
                for row in rows {
                    read.push(LeaseRow {
                        machine_id: row.get::<i32>(1)?.unwrap_or(-1),
                        holder: row.get::<String>(2)?,
                        version: row.get::<i64>(3)?.unwrap_or(0),
                        lease_ms: row.get::<i64>(4)?.unwrap_or(0),
                        floor_unix_ms: row.get::<i64>(5)?,
                        layout: row.get::<String>(6)?,
                    });
                }
                Ok(Some(read))
            })
        })
    }

    /// Runs a claim or renewal statement in a transaction that reads the
    /// central clock before it (the ceiling is held to that reading) and
    /// after it (what `Written::central_unix_ms` reports, for the fence: a
    /// CAS that a restore could have met must fence above a reading taken
    /// after it — one taken before may precede the restore). A clock that
    /// cannot be used rolls the transaction back (`LeaseCentralClock`).
    /// `None` from the statement: no row.
    fn write(&self, tables: &Tables, sql: &str, machine: i32, version: i64) -> Outcome<Written> {
        // INVARIANT: no two live holders — the clock-rate margin
        // (lease.rs): the deadline counts from `sent_mono`, read before
        // the transaction's first remote statement (the proof's `s`).
        let sent_mono = mono_now_ms();
        let sent_wall = now_unix_ms();
        let until = self.settings.stops_by_unix_ms(sent_wall);
        let outcome = run(|| {
            Spi::connect_mut(|client| {
                // INVARIANT: unique IDs — the ceiling, held to the central
                // clock read before the CAS (the restore fence, lease.rs).
                let before = read_central_clock(client, &tables.clock)?;
                failpoint("lease-before-cas");
                let ceiling = self.settings.ceiling_unix_ms(sent_wall, before);
                let rows = tables.lease.as_owner(|| {
                    client.update(
                        sql,
                        None,
                        &[
                            machine.into(),
                            version.into(),
                            self.holder.as_str().into(),
                            self.settings.duration_ms.into(),
                            ceiling.into(),
                            until.into(),
                            self.layout_text.as_str().into(),
                        ],
                    )
                })?;
                if rows.is_empty() {
                    return Ok(None);
                }
                let version = rows.first().get::<i64>(1)?.unwrap_or(i64::MIN);
                // INVARIANT: unique IDs — the restore fence (lease.rs): the
                // fence's central reading is taken after the CAS.
                let after = read_central_clock(client, &tables.clock)?;
                Ok(Some((version, ceiling, after.max(before))))
            })
        });
        match outcome {
            Outcome::Done((new_version, ceiling, central)) => {
                self.state
                    .lease
                    .until_unix_ms
                    .store(until, Ordering::Relaxed);
                Outcome::Done(Written {
                    sent_mono_ms: sent_mono,
                    // After the COMMIT returned (`lease::reply_in_time`).
                    received_mono_ms: mono_now_ms(),
                    version: new_version,
                    ceiling_unix_ms: ceiling,
                    central_unix_ms: central,
                })
            }
            Outcome::NoMatch => Outcome::NoMatch,
            Outcome::Failed(e) => Outcome::Failed(e),
        }
    }

    /// What a successful write says of the clocks: the central clock went
    /// back, or this server's runs ahead of it (`warnings`). Then records
    /// the reading.
    fn check_clocks(&mut self, written: &Written, sent_unix_ms: i64) {
        self.warnings.clear();
        if let Some(back) = self.central_clock.went_back_ms(written.central_unix_ms) {
            self.warnings.push(format!(
                "the central server's clock went back {:.1} s since this server last read it (through pg_idgen.lease_clock_table): a lease table restored while it is behind could let a server start among IDs issued before; this server claims above the highest reading it saw (if that reading was the wrong one, the clock having been set ahead, terminate the lease keeper with pg_terminate_backend to forget it), and keep the central server's clock (and its standbys') set right",
                back as f64 / 1000.0
            ));
        }
        self.central_clock.observe(written.central_unix_ms);
        if let Some(ahead) = clock_ahead_of_central_ms(written, sent_unix_ms) {
            self.warnings.push(format!(
                "this server's clock is {:.1} s ahead of the central server's: a lease's ceiling is at most the central clock plus the lease and {CENTRAL_CLOCK_SLACK_MS} ms, so this server issues less far ahead of its clock, and nothing once it is ahead by about the lease less the time between renewals; set its clock right (NTP)",
                ahead as f64 / 1000.0
            ));
        }
    }

    fn claim(&mut self, tables: &Tables) -> i64 {
        let seeded_by_this_read = !self.seeded;
        let rows = match self.read_rows(&tables.lease) {
            Outcome::Done(rows) => rows,
            Outcome::NoMatch => return READ_AGAIN_MS,
            Outcome::Failed(e) => {
                self.problem(&e.message);
                return RETRY_MS;
            }
        };
        self.seeded = !needs_seeding(rows.len(), self.max_machine);
        if !self.seeded && !seeded_by_this_read {
            // Rows deleted by hand: the next read seeds them again first.
            return READ_AGAIN_MS;
        }
        // INVARIANT: no two live holders — expiry by observation
        // (lease.rs): the instant is taken after the read returned.
        self.watch.observe(rows, mono_now_ms());
        failpoint("lease-after-read");
        let avoid = self.avoided_now();
        let claim: Claim = match self.watch.choose(&self.claimant(&avoid), mono_now_ms()) {
            Ok(ClaimChoice::Take(claim)) => claim,
            Ok(ClaimChoice::WaitUntil { mono_ms }) => {
                self.problem(&format!(
                    "every machine id 0 to {} is held by a live server; waiting for one to expire",
                    self.max_machine
                ));
                return mono_ms - mono_now_ms();
            }
            Err(e) => {
                self.problem(&e.to_string());
                return RETRY_MS;
            }
        };
        let sql = super::lease::claim_sql(&tables.lease.qualified);
        let sent_wall = now_unix_ms();
        match self.write(tables, &sql, claim.machine_id, claim.version) {
            Outcome::Done(written) => {
                // The fence starts above the highest central time seen.
                // INVARIANT: unique IDs — the restore fence (lease.rs).
                let fenced = Written {
                    central_unix_ms: self.central_clock.fence_base_ms(written.central_unix_ms),
                    ..written
                };
                self.check_clocks(&written, sent_wall);
                let held = Held::claimed(&self.settings, &claim, &fenced);
                self.previous = Some(held.machine_id);
                self.held = Some(held);
                self.handed_over = false;
                self.taken = CLAIMED;
                self.hand_over_when_ready()
            }
            Outcome::NoMatch => 0, // someone else won: read again
            Outcome::Failed(e) if row_locked(&e) => {
                self.avoid_for_a_lease(claim.machine_id);
                self.problem(&format!(
                    "the row of machine id {} is locked on the central server ({}); claiming another id",
                    claim.machine_id, e.message
                ));
                READ_AGAIN_MS
            }
            Outcome::Failed(e) => {
                self.problem(&e.message);
                RETRY_MS
            }
        }
    }

    /// Gives the held lease to the generators once
    /// `Held::wait_before_issuing_ms` allows, saying meanwhile until when
    /// (`lease_problem`, published at each look); returns how long to
    /// sleep: until then, or until the next renewal.
    fn hand_over_when_ready(&mut self) -> i64 {
        let Some(held) = self.held.clone() else {
            return 0;
        };
        let until_renewal = held.renew_at_mono_ms - mono_now_ms();
        if self.handed_over {
            return until_renewal;
        }
        let sleep = match held.wait_before_issuing_ms(now_unix_ms(), self.settings.max_lead_ms) {
            None => {
                self.apply(&held, true);
                self.handed_over = true;
                self.waiting = None;
                until_renewal
            }
            Some(IssueWait::ForClock { ms, until_unix_ms }) => {
                self.waiting = Some(format!(
                    "machine id {} {}; its first ID waits until {}: a claim starts above the central server's clock plus the lease duration and {CENTRAL_CLOCK_SLACK_MS} ms, so that a restored lease table cannot repeat the IDs of a holder it forgot, and snowflake time may run only pg_idgen.snowflake_max_lead ({} ms) ahead of this server's clock",
                    held.machine_id,
                    self.taken,
                    timestamptz_text(until_unix_ms),
                    self.settings.max_lead_ms
                ));
                ms.min(until_renewal)
            }
            Some(IssueWait::ForCeiling) => {
                self.waiting = Some(format!(
                    "machine id {} {}; its first ID waits for a renewal to raise the lease's ceiling above the floor it starts from, {}: a holder issues no time above the central server's clock plus the lease and {CENTRAL_CLOCK_SLACK_MS} ms, and a claim starts above the row's floor and the central clock plus a lease and {CENTRAL_CLOCK_SLACK_MS} ms, so that a restored lease table cannot repeat the IDs of a holder it forgot",
                    held.machine_id,
                    self.taken,
                    held.floor_unix_ms.map_or("none".into(), timestamptz_text)
                ));
                until_renewal
            }
        };
        self.publish();
        sleep
    }

    /// This server as `LeaseWatch` sees it, passing over `avoid`.
    fn claimant<'a>(&'a self, avoid: &'a [i32]) -> Claimant<'a> {
        Claimant {
            holder: &self.holder,
            previous_machine_id: self.previous,
            layout: &self.layout_text,
            max_machine_id: self.max_machine,
            avoid,
        }
    }

    /// The ids not to claim now (forgetting those whose time is up).
    fn avoided_now(&mut self) -> Vec<i32> {
        let now = mono_now_ms();
        self.avoid.retain(|&(_, until)| until > now);
        self.avoid.iter().map(|&(id, _)| id).collect()
    }

    /// Passes `machine_id` over for one lease duration: a session holds
    /// its row locked on the central server.
    fn avoid_for_a_lease(&mut self, machine_id: i32) {
        let until = mono_now_ms() + self.settings.duration_ms;
        self.avoid.retain(|&(id, _)| id != machine_id);
        self.avoid.push((machine_id, until));
    }

    fn renew(&mut self, tables: &Tables, held: &Held) -> i64 {
        failpoint("lease-before-renew");
        let sql = super::lease::renew_sql(&tables.lease.qualified);
        let sent_wall = now_unix_ms();
        match self.write(tables, &sql, held.machine_id, held.version) {
            Outcome::Done(written) => {
                // A reply at or after the deadline counts as a claim: its
                // CAS may have landed on a row a restore brought back after
                // another server took the id over. Fenced anew, handed
                // over anew.
                // INVARIANT: unique IDs — the restore fence (lease.rs).
                let lapsed = held.lapses(written.received_mono_ms);
                let fenced = Written {
                    central_unix_ms: self.central_clock.fence_base_ms(written.central_unix_ms),
                    ..written
                };
                let renewed = held.renewed(&self.settings, &fenced);
                if lapsed {
                    self.stop();
                    self.taken = RENEWED_LATE;
                } else if self.handed_over {
                    self.apply(&renewed, false);
                }
                self.held = Some(renewed);
                self.state.lease.renewals.fetch_add(1, Ordering::Relaxed);
                self.check_clocks(&written, sent_wall);
                self.look_at_other_holders(&tables.lease);
                let sleep = self.hand_over_when_ready();
                self.publish();
                sleep
            }
            Outcome::NoMatch => {
                // INVARIANT: unique IDs — the version CAS (lease.rs): a row
                // taken over gets no more IDs and no higher ceiling.
                self.end_lease();
                self.problem(&format!(
                    "the lease of machine id {} was lost (its row changed on the central server); claiming again",
                    held.machine_id
                ));
                0
            }
            Outcome::Failed(e) if mono_now_ms() >= held.stop_at_mono_ms => {
                // The deadline passed (the generators stopped by
                // themselves): the lease is over. Claim again — another id
                // if a session holds this one's row locked.
                self.end_lease();
                if row_locked(&e) {
                    self.avoid_for_a_lease(held.machine_id);
                }
                self.problem(&format!(
                    "the lease of machine id {} ran out, no renewal got through: {}",
                    held.machine_id, e.message
                ));
                0
            }
            Outcome::Failed(e) => {
                // Nothing changes: the generators stop by themselves at the
                // deadline if no renewal succeeds before it.
                self.problem(&format!("renewal failed: {}", e.message));
                (self.settings.renew_after_ms() / RENEW_RETRY_DIVISOR).max(RENEW_RETRY_MIN_MS)
            }
        }
    }

    /// After a renewal: reads the rows again, and adds to `warnings` what
    /// they show of other live servers: one holding rows under this
    /// server's name (each of the two says it: their rows are renewed
    /// under each other's eyes), or under another lease duration.
    fn look_at_other_holders(&mut self, table: &Table) {
        let rows = match self.read_rows(table) {
            Outcome::Done(rows) => rows,
            // The next renewal looks again.
            Outcome::NoMatch | Outcome::Failed(_) => return,
        };
        let now = mono_now_ms();
        self.watch.observe(rows, now);
        let me = self.claimant(&[]);
        let namesakes = self.watch.namesakes(&me, now);
        let other_durations = self
            .watch
            .other_durations(&me, self.settings.duration_ms, now);
        if !namesakes.is_empty() {
            let name = holder_name(&self.holder);
            self.warnings.push(format!(
                "another live server leases machine id(s) {namesakes:?} under this server's name \"{name}\" (this server holds machine id {}): a clone of this server, or two servers given one pg_idgen.lease_holder; the machine ids stay distinct, but give each server its own name (set pg_idgen.lease_holder, or leave it empty for host:port:data directory)",
                self.previous.unwrap_or(-1)
            ));
        }
        if !other_durations.is_empty() {
            self.warnings.push(format!(
                "live servers lease machine ids under another pg_idgen.lease_duration than this server's {} ms (machine id, duration ms: {other_durations:?}): give every server sharing the lease table one lease duration — a claim fences above its own and a held row's, not above that of a holder a restored table forgot",
                self.settings.duration_ms
            ));
        }
    }

    /// Tells both generators what the lease allows.
    fn apply(&self, held: &Held, claimed: bool) {
        let machine = i64::from(held.machine_id);
        let javascript_ok = self
            .state
            .javascript
            .layout()
            .check_machine(machine)
            .is_ok();
        let generators: [(&Generator, bool); 2] = [
            (&self.state.main, true),
            (&self.state.javascript, javascript_ok),
        ];
        for (generator, fits) in generators {
            let epoch = generator.layout().epoch_ms;
            // INVARIANT: unique IDs — the floor (the version CAS, the
            // restore fence) and the ceiling (lease.rs), in each
            // generator's epoch; no two live holders — the deadline.
            let floor = held.floor_unix_ms.map(|f| f - epoch);
            let ceiling = held.ceiling_unix_ms - epoch;
            match (fits, claimed) {
                (false, _) => {
                    generator.drop_lease();
                }
                (true, true) => generator.take_lease(machine, floor, ceiling, held.stop_at_mono_ms),
                (true, false) => generator.renew_lease(ceiling, held.stop_at_mono_ms),
            }
        }
        self.state
            .javascript_ok
            .store(javascript_ok, Ordering::Release);
        self.state.lease.machine.store(machine, Ordering::Release);
    }

    /// Stops both generators; returns the Unix time of the last ID either
    /// handed out (no call hands out one above it afterwards).
    fn stop(&mut self) -> i64 {
        let last = [&self.state.main, &self.state.javascript]
            .map(|g| g.layout().epoch_ms + g.drop_lease())
            .into_iter()
            .max()
            .unwrap_or(i64::MIN);
        self.state.lease.machine.store(-1, Ordering::Release);
        self.handed_over = false;
        self.waiting = None;
        last
    }

    /// The lease is over (lost, or run out): stop, and forget it — it is
    /// not renewed, and not given up.
    fn end_lease(&mut self) {
        self.stop();
        self.held = None;
    }

    /// At shutdown: stop issuing, then free the row with the exact floor:
    /// the higher of the floor it had when claimed (every earlier holder's
    /// IDs, and the restore fence) and this server's last ID — never
    /// lower, and never above this server's ceiling — so a restart (or
    /// anyone) claims it at once.
    fn give_up(&mut self) {
        let last_issued = self.stop();
        let (Some(held), Some(table)) = (self.held.take(), self.table.clone()) else {
            return;
        };
        let sql = super::lease::give_up_sql(&table.qualified);
        // INVARIANT: unique IDs — the floor left covers every ID this
        // holder issued (the generators stopped first; none above the
        // ceiling) and every earlier holder's (`give_up_floor_unix_ms`).
        let floor = held
            .give_up_floor_unix_ms(Some(last_issued.min(held.ceiling_unix_ms)))
            .unwrap_or(held.ceiling_unix_ms);
        let deadline =
            mono_now_ms() + i64::from(gucs::REMOTE_TIMEOUT_MS.get().min(GIVE_UP_TIMEOUT_MS));
        let given_up = loop {
            let left_ms = (deadline - mono_now_ms()).max(1) as i32;
            let outcome = run_within(left_ms, || {
                Spi::connect_mut(|client| {
                    let rows = table.as_owner(|| {
                        client.update(
                            &sql,
                            None,
                            &[
                                held.machine_id.into(),
                                self.holder.as_str().into(),
                                floor.into(),
                            ],
                        )
                    })?;
                    Ok(Some(rows.len()))
                })
            });
            // The row locked (55P03, the central session's pinned
            // lock_timeout): most likely by the renewal this shutdown cut
            // off, whose central transaction is still committing. Try
            // again while the give-up's time lasts.
            match outcome {
                Outcome::Failed(e)
                    if row_locked(&e) && mono_now_ms() + GIVE_UP_RETRY_MS < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(GIVE_UP_RETRY_MS as u64));
                }
                outcome => break outcome,
            }
        };
        match given_up {
            Outcome::Done(1) => {}
            Outcome::Done(_) | Outcome::NoMatch => pgrx::log!(
                "pg_idgen lease keeper: machine id {} was not given up: its row no longer names this server",
                held.machine_id
            ),
            Outcome::Failed(e) => pgrx::log!(
                "pg_idgen lease keeper: machine id {} was not given up ({}): its row is free a lease after this server's last renewal, as a crashed server's",
                held.machine_id,
                e.message
            ),
        }
    }
}
