//! The snowflake keeper: the background worker, one per cluster, that
//! writes the generators' high-water mark ahead — committed to the WAL in
//! `snowflake_high_water` (`wal_mark.rs`) and written to the state file
//! (`state_file.rs`) — so that callers never wait for a disk in the common
//! case, as `segment/worker.rs` does for segment ranges.
//!
//! * Start, promotion, end of a restore: before it persists anything (so
//!   before any ID of the run is issued) it reads the WAL-logged mark and
//!   raises both generators' floors to it (`Generator::raise_floor`): a
//!   promoted standby, a restored or upgraded cluster issues only above it.
//! * Every `KEEPER_INTERVAL` (or when a caller wakes it) it asks each
//!   generator for the mark it wants persisted (`mark_to_persist`: the
//!   current time plus `pg_idgen.snowflake_persist_ahead`, also through a
//!   pause of up to `generator::KEEP_AHEAD_WHILE_IDLE_MS` after the last
//!   ID), commits it,
//!   writes the file durably, and only then tells the generators they may
//!   issue up to it (`persisted`). A failure is retried at every pass;
//!   callers that reach the persisted mark wait, then fail naming it.
//! * On a standby (recovery) it commits nothing; it shows the replayed mark
//!   in `snowflake_status`, raises the generators' floors to it and writes
//!   it to this server's state file (which a restart reads: it replays WAL
//!   only from the last restartpoint).
//! * No mark at all after a start (the row deleted, the extension dropped):
//!   the floors go above the last commit or checkpoint the server knows
//!   of, plus `snowflake_max_lead`, unless nothing was ever issued.
//!
//! It is registered in `_PG_init` and started by the postmaster once the
//! server is consistent (it connects to `pg_idgen.snowflake_database`); the
//! server refuses to start without a worker slot for it, since without a
//! keeper no snowflake ID can ever be issued.

use super::backup_copy::{self, BACKUP_LABEL_OLD};
use super::clock::{mono_now_ms, now_unix_ms, PG_EPOCH_UNIX_MICROS};
use super::config::{self, config, setting_text};
use super::generator::IdleWatch;
use super::layout::Layout;
use super::shared::{snowflake, Snowflake, KEEPER_RESTART};
use super::state_file::{self, HighWater, Saved, STATE_FILE};
use super::wal_mark::{self, MarkProblem, Marks, OtherMark};
use crate::bgworker;
use crate::citus::{self, Node};
use crate::errors::IdgenError;
use crate::gucs;
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::pg_sys::panic::CaughtError;
use pgrx::pg_sys::PgTryBuilder;
use pgrx::prelude::*;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the keeper looks at the generators when nobody wakes it.
const KEEPER_INTERVAL: Duration = Duration::from_millis(100);

/// The shortest bound on one keeper transaction, whatever
/// `pg_idgen.snowflake_max_wait` says (a commit is one WAL flush).
const KEEPER_TRANSACTION_MIN_MS: i32 = 1_000;

/// How often a running keeper reads the row besides its own commits (a
/// read-only transaction: it counts in `pg_stat_database.xact_commit`).
const REREAD_MS: i64 = 1_000;

/// Set by the log hook while the keeper is being registered, when
/// PostgreSQL refuses the registration (it only logs that).
static REGISTRATION_REFUSED: AtomicBool = AtomicBool::new(false);
static mut PREV_EMIT_LOG_HOOK: pg_sys::emit_log_hook_type = None;

#[pg_guard]
unsafe extern "C-unwind" fn registration_log_hook(edata: *mut pg_sys::ErrorData) {
    // SAFETY: PostgreSQL passes the ErrorData being emitted.
    unsafe {
        if (*edata).sqlerrcode == PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED as i32 {
            REGISTRATION_REFUSED.store(true, Ordering::Relaxed);
        }
        if let Some(prev) = PREV_EMIT_LOG_HOOK {
            prev(edata);
        }
    }
}

/// Registers the keeper; called from `_PG_init` while preloading. Refuses
/// to start the server when there is no worker slot for it: without a
/// keeper no snowflake ID can ever be issued, and PostgreSQL's own message
/// ("too many background workers") does not say whose worker is missing.
pub fn register() {
    // SAFETY: a plain read of a setting, in the postmaster.
    let max_workers = unsafe { pg_sys::max_worker_processes };
    if max_workers == 0 {
        IdgenError::SnowflakeKeeperNotRegistered {
            max_worker_processes: max_workers,
        }
        .raise();
    }
    // PostgreSQL reports a refused registration at LOG level only, with
    // ERRCODE_CONFIGURATION_LIMIT_EXCEEDED; listen for it around the call.
    // SAFETY: _PG_init runs single-threaded in the postmaster; the hook is
    // put back right after the call.
    unsafe {
        PREV_EMIT_LOG_HOOK = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(registration_log_hook);
    }
    BackgroundWorkerBuilder::new("pg_idgen snowflake keeper")
        .set_type("pg_idgen snowflake keeper")
        .set_library("pg_idgen")
        .set_function("pg_idgen_snowflake_keeper_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::ConsistentState)
        .set_restart_time(Some(KEEPER_RESTART))
        .load();
    // SAFETY: as above.
    unsafe { pg_sys::emit_log_hook = PREV_EMIT_LOG_HOOK };
    if REGISTRATION_REFUSED.load(Ordering::Relaxed) {
        IdgenError::SnowflakeKeeperNotRegistered {
            max_worker_processes: max_workers,
        }
        .raise();
    }
}

/// Runs when the keeper exits, however it exits: it no longer runs.
#[pg_guard]
unsafe extern "C-unwind" fn keeper_exit(_code: i32, _arg: pg_sys::Datum) {
    if let Some(state) = snowflake() {
        state.keeper_gone();
    }
}

/// The keeper's entry point, named in `bgw_function_name`.
///
/// On SIGTERM it exits with code 1, so the postmaster starts it again after
/// `KEEPER_RESTART` (code 0 would unregister it for good; at shutdown the
/// postmaster restarts nothing anyway).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_idgen_snowflake_keeper_main(_arg: pg_sys::Datum) {
    bgworker::attach_signal_handlers();
    let Some(state) = snowflake() else { return };
    // SAFETY: MyLatch and MyProcPid are set in every started process; the
    // exit callback is registered once, with no argument.
    unsafe {
        pg_sys::before_shmem_exit(Some(keeper_exit), pg_sys::Datum::from(0));
        state.keeper_started(pg_sys::MyProcPid, pg_sys::MyLatch);
    }
    let database = setting_text(&gucs::SNOWFLAKE_DATABASE);
    // Left in place if connecting fails (a FATAL in the log, and the
    // postmaster starts the keeper again).
    state.set_mark_problem(&format!(
        "the snowflake keeper could not connect to pg_idgen.snowflake_database \"{database}\" (the server log says why)"
    ));
    bgworker::connect(bgworker::Database::Name(&database));
    state.set_mark_problem("");
    let mut keeper = Keeper {
        state,
        database,
        data_dir: Path::new("."),
        floors_raised: false,
        committed_here: None,
        replayed_here: None,
        last_read_ms: i64::MIN / 2,
        file_failing: false,
        window_warned: None,
        idle_watches: Default::default(),
        namesakes_looked_ms: None,
        other_clusters_seen: Default::default(),
        citus_namesake: None,
        replicated_namesake: None,
    };
    loop {
        if bgworker::reload_if_asked() {
            warn_if_next_start_would_fail();
        }
        keeper.step();
        if !bgworker::wait(KEEPER_INTERVAL) {
            break;
        }
    }
    // SAFETY: ends this process; the exit callback clears the pid.
    unsafe { pg_sys::proc_exit(1) };
}

/// The settings only a start reads together (`config::next_start_problem`).
const READ_AT_START: [&str; 5] = [
    "pg_idgen.snowflake_epoch",
    "pg_idgen.snowflake_time_bits",
    "pg_idgen.snowflake_machine_bits",
    "pg_idgen.snowflake_sequence_bits",
    "pg_idgen.machine_id",
];

/// After a reload: a WARNING when the configuration files (or the command
/// line) hold snowflake settings the next start would refuse — a layout
/// whose widths do not add up, a machine id that does not fit — with the
/// message that start would give, so a restart is not where it is found.
fn warn_if_next_start_would_fail() {
    let read = bgworker::in_transaction(KEEPER_TRANSACTION_MIN_MS, || {
        Spi::connect(|client| {
            let names: Vec<String> = READ_AT_START.iter().map(|n| n.to_string()).collect();
            let rows = client.select(
                "SELECT s.name::pg_catalog.text, \
                        CASE WHEN s.source OPERATOR(pg_catalog.=) 'command line' THEN s.setting \
                             ELSE coalesce((SELECT f.setting FROM pg_catalog.pg_file_settings f \
                                             WHERE pg_catalog.lower(f.name) OPERATOR(pg_catalog.=) s.name \
                                             ORDER BY f.seqno DESC LIMIT 1), s.boot_val) END \
                   FROM pg_catalog.pg_settings s \
                  WHERE s.name OPERATOR(pg_catalog.=) ANY ($1)",
                None,
                &[names.into()],
            )?;
            let mut settings = std::collections::HashMap::new();
            for row in rows {
                if let (Some(name), value) = (row.get::<String>(1)?, row.get::<String>(2)?) {
                    settings.insert(name, value);
                }
            }
            Ok::<_, pgrx::spi::Error>(settings)
        })
    });
    let Ok(Ok(settings)) = read else { return };
    // Numbers as PostgreSQL reads them (hex, octal, a fraction rounded).
    let setting = |name: &str| {
        let text = settings.get(name).cloned().flatten()?;
        Some(match name.ends_with("_bits") {
            true => pg_int(&text).map_or(text, |n| n.to_string()),
            false => text,
        })
    };
    if let Some(problem) = config::next_start_problem(setting) {
        let refusal = problem.stored();
        IdgenError::NextStartWouldFail {
            sqlstate: refusal.sqlstate,
            message: refusal.message,
            hint: refusal.hint,
        }
        .warn();
    }
}

/// The quoted schema of pg_idgen in the keeper's database, if it is
/// installed there.
fn extension_schema() -> Result<Option<String>, pgrx::spi::Error> {
    Spi::get_one(
        "SELECT pg_catalog.quote_ident(n.nspname) FROM pg_catalog.pg_extension e \
           JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace \
          WHERE e.extname OPERATOR(pg_catalog.=) 'pg_idgen'",
    )
}

/// An integer setting's text as PostgreSQL's own parser reads it.
fn pg_int(text: &str) -> Option<i32> {
    let text = std::ffi::CString::new(text).ok()?;
    let mut value = 0;
    // SAFETY: parse_int reads the NUL-terminated text and writes the int;
    // a null hint pointer is allowed.
    let parsed = unsafe { pg_sys::parse_int(text.as_ptr(), &mut value, 0, std::ptr::null_mut()) };
    parsed.then_some(value)
}

/// The least `pg_idgen.snowflake_persist_ahead` may be (`gucs.rs`).
const PERSIST_AHEAD_MIN_MS: i32 = 100;

struct Keeper {
    state: &'static Snowflake,
    /// `pg_idgen.snowflake_database`, which the keeper is connected to.
    database: String,
    /// The data directory: every server process's working directory.
    data_dir: &'static Path,
    /// Whether the WAL-logged mark was read since recovery ended and the
    /// generators' floors raised to it: nothing is persisted (so nothing
    /// issued) before.
    floors_raised: bool,
    /// The row as this run's last commit left it: a row read above it was
    /// restored or written elsewhere; one at it is the keeper's own mark,
    /// which never raises the floors (while the state file cannot be
    /// written, the generators' limits stay below it, and raising them to
    /// it at every pass would run the clock away).
    committed_here: Option<HighWater>,
    /// On a standby: the highest marks replayed (and written to the state
    /// file) in this run.
    replayed_here: Option<HighWater>,
    /// When (monotonic ms) the row was last read.
    last_read_ms: i64,
    /// Whether the last write of the state file failed (logged once).
    file_failing: bool,
    /// `(snowflake_persist_ahead, snowflake_max_lead)` when the keeper last
    /// warned that the first is above the second.
    window_warned: Option<(i32, i32)>,
    /// Whether each generator (main, JavaScript-safe) still counts as in
    /// use while no ID is issued: the mark stays ahead through a pause.
    idle_watches: [IdleWatch; 2],
    /// When (monotonic ms) the other Citus nodes were last asked for their
    /// machine ids (`look_for_namesakes`).
    namesakes_looked_ms: Option<i64>,
    /// When each other cluster's row with this machine id was last seen
    /// raised (`watch_other_clusters`), by system identifier.
    other_clusters_seen: std::collections::HashMap<i64, i64>,
    /// What the last look found: a Citus node with this machine id; a live
    /// cluster whose mark replicates here with it.
    citus_namesake: Option<IdgenError>,
    replicated_namesake: Option<IdgenError>,
}

/// How often a node with a machine id of its own asks the other nodes of
/// its Citus cluster for theirs: once at start, then every minute (each
/// look opens a connection to every node).
const NAMESAKES_EVERY_MS: i64 = 60_000;

/// The longest a look at the other Citus nodes may take, connections
/// included: less than `pg_idgen.snowflake_persist_ahead`'s default, so
/// that callers do not wait for a mark meanwhile (the mark is committed
/// first).
const NAMESAKES_TIMEOUT_MS: i32 = 1_000;

impl Keeper {
    fn step(&mut self) {
        // SAFETY: a plain query of this process's view of recovery.
        if unsafe { pg_sys::RecoveryInProgress() } {
            // A standby: nothing is issued here; show the replayed mark.
            self.floors_raised = false;
            self.committed_here = None;
            let now_ms = mono_now_ms();
            if now_ms - self.last_read_ms >= REREAD_MS {
                self.last_read_ms = now_ms;
                if let Ok(Marks {
                    own: Some(mark), ..
                }) = self.read()
                {
                    self.state.set_wal_mark(mark_unix_ms(&mark));
                    self.remember_replayed(&mark);
                }
            }
            return;
        }
        // Read before anything is persisted, then once a second (each
        // commit reads it too): a row restored (or written by another run)
        // above what this run committed raises the floors.
        let now_ms = mono_now_ms();
        if !self.floors_raised || now_ms - self.last_read_ms >= REREAD_MS {
            let Ok(marks) = self.read() else { return };
            self.last_read_ms = now_ms;
            let issued = |m: &HighWater| m.main >= 0 || m.javascript >= 0;
            for other in marks.others.iter().filter(|o| issued(&o.mark)) {
                // Another cluster's IDs under this machine id: above them.
                self.raise_floors(&other.mark);
            }
            self.watch_other_clusters(&marks.others);
            match marks.own.filter(issued) {
                Some(mark) => {
                    self.raise_floors(&mark.above(self.committed_here.as_ref()));
                    self.state.set_wal_mark(mark_unix_ms(&mark));
                }
                None if !self.floors_raised && !marks.others.iter().any(|o| issued(&o.mark)) => {
                    self.raise_floors_without_a_mark()
                }
                None => {}
            }
            let current = state_file::marks_are_current(
                marks.own_timeline,
                wal_mark::insertion_timeline(),
                self.state.state_file_found.load(Ordering::Acquire),
            );
            // (No row: nothing issued under this system yet, or the row
            // lost — `raise_floors_without_a_mark` bounds that case.)
            if !self.floors_raised && marks.own.is_some() && !current {
                self.raise_floors_above_any_predecessor();
            }
            if !self.floors_raised {
                self.warn_if_a_copy();
            }
            self.floors_raised = true;
            if config().is_some_and(|c| c.citus) {
                self.follow_citus_group();
            }
        }
        self.persist_if_wanted();
        self.look_for_namesakes();
    }

    /// With a machine id of its own (a number or `hostname`) on a node of a
    /// Citus cluster: asks the other nodes for theirs (`citus::namesakes`)
    /// at start, then every `NAMESAKES_EVERY_MS`. Another node with the
    /// same machine id and layout is proof that both can issue the same
    /// IDs: snowflake IDs are refused here (55000) until one of them gets
    /// another id, and a WARNING says so; the same id under another layout
    /// is a WARNING and `snowflake_status.machine_problem` only.
    fn look_for_namesakes(&mut self) {
        if !config().is_some_and(|c| c.machine_set && !c.lease && !c.citus) {
            return;
        }
        let now = mono_now_ms();
        if self
            .namesakes_looked_ms
            .is_some_and(|at| now - at < NAMESAKES_EVERY_MS)
        {
            return;
        }
        self.namesakes_looked_ms = Some(now);
        let main = self.state.main.layout();
        let machine = self.state.main.machine();
        let layout = (main.machine_bits, main.sequence_bits, main.epoch_ms);
        let found = bgworker::in_transaction(NAMESAKES_TIMEOUT_MS, || {
            if !matches!(citus::node()?, Node::Coordinator | Node::Worker { .. }) {
                return Ok(Vec::new());
            }
            Spi::connect(|client| {
                client
                    .select(
                        "SELECT pg_catalog.set_config('citus.node_connection_timeout', $1, true)",
                        None,
                        &[NAMESAKES_TIMEOUT_MS.to_string().into()],
                    )
                    .map(|_| ())
            })?;
            let Some(schema) = extension_schema()? else {
                return Ok(Vec::new());
            };
            citus::namesakes(&schema, machine, layout)
        });
        let found = match found {
            Ok(Ok(found)) => found,
            // Unknown: the other nodes could not be asked now.
            Ok(Err(_)) | Err(_) => return,
        };
        let proven: Vec<String> = found
            .iter()
            .filter(|n| n.same_layout)
            .map(|n| n.node.clone())
            .collect();
        let problem = match (proven.is_empty(), found.is_empty()) {
            (_, true) => None,
            (false, _) => Some(IdgenError::SnowflakeMachineIdShared {
                machine,
                nodes: proven,
                proven: true,
            }),
            (true, false) => Some(IdgenError::SnowflakeMachineIdShared {
                machine,
                nodes: found.iter().map(|n| n.node.clone()).collect(),
                proven: false,
            }),
        };
        self.citus_namesake = problem;
        self.publish_machine_problem();
    }

    /// With `pg_idgen.machine_id = 'citus'` (once the floors are raised,
    /// then once a second): the node's Citus group becomes both
    /// generators' machine id — the JavaScript-safe one's only where it
    /// fits its 4 bits. A group that does not fit the main layout is
    /// refused (callers get 22023); no group yet leaves the generators
    /// waiting, with why in `lease_problem`. Citus never gives one group
    /// id to two nodes, so the id is held for good: no ceiling, no
    /// deadline, and a new group (the node removed and added again) is
    /// switched to at once.
    fn follow_citus_group(&self) {
        let state = self.state;
        let database = &self.database;
        let node = match bgworker::in_transaction(KEEPER_TRANSACTION_MIN_MS, citus::node) {
            Ok(Ok(node)) => node,
            Ok(Err(e)) => return self.citus_problem(&e.to_string()),
            Err(e) => return self.citus_problem(&e.message),
        };
        let group = match node {
            Node::NotCitus => {
                return self.citus_problem(&format!(
                "Citus is not installed in database \"{database}\" (pg_idgen.snowflake_database)"
            ))
            }
            Node::NotJoined => {
                return self.citus_problem(&format!(
                    "this node is in no Citus cluster yet (database \"{database}\" knows no node)"
                ))
            }
            Node::Coordinator | Node::Worker { .. } => i64::from(node.group().unwrap_or(0)),
        };
        state.citus_group.store(group, Ordering::Release);
        if state.main.layout().check_machine(group).is_err() {
            return self.citus_problem(&format!(
                "the Citus group id {group} does not fit in pg_idgen.snowflake_machine_bits = {}",
                state.main.layout().machine_bits
            ));
        }
        if state.lease.machine.load(Ordering::Acquire) != group {
            let javascript_ok = state.javascript.layout().check_machine(group).is_ok();
            state.main.take_lease(group, None, i64::MAX, i64::MAX);
            match javascript_ok {
                true => state.javascript.take_lease(group, None, i64::MAX, i64::MAX),
                false => {
                    state.javascript.drop_lease();
                }
            }
            state.javascript_ok.store(javascript_ok, Ordering::Release);
            state.lease.machine.store(group, Ordering::Release);
            state.lease.source.set(&format!(
                "Citus group {group} (pg_dist_local_group in database \"{database}\")"
            ));
            pgrx::log!("pg_idgen snowflake keeper: machine id {group}, this node's Citus group");
        }
        state.lease.problem.set("");
    }

    /// Why `'citus'` gives no machine id now: logged once, and shown.
    fn citus_problem(&self, problem: &str) {
        if !self.state.lease.problem.holds(problem) {
            pgrx::log!("pg_idgen snowflake keeper: {problem}");
        }
        self.state.lease.problem.set(problem);
    }

    /// The WAL-logged marks: this cluster's, and the other clusters' rows
    /// with this server's machine id; a problem is stored for the callers
    /// and the status view, and is `Err`.
    fn read(&self) -> Result<Marks, ()> {
        let database = self.database.clone();
        let machine = self.machine_id();
        self.transact(move || wal_mark::read(&database, machine))
    }

    /// The machine id the generators issue under now (`None` while a
    /// lease or a Citus group is not given yet).
    fn machine_id(&self) -> Option<i64> {
        let config = config()?;
        match config.lease || config.citus {
            true => Some(self.state.lease.machine.load(Ordering::Acquire)).filter(|m| *m >= 0),
            false => config.machine_set.then_some(config.machine),
        }
    }

    /// Another cluster's row with this server's machine id that moves while
    /// this server runs: a live server issues IDs under the same machine id
    /// — its row reaches this database by logical replication (a publisher
    /// or subscriber whose configuration was copied). Its IDs raise this
    /// server's floor at each read, which keeps the two apart only as far
    /// as replication is current: a WARNING and `machine_problem` say so.
    fn watch_other_clusters(&mut self, others: &[OtherMark]) {
        let machine = self.machine_id();
        let mut live = None;
        for other in others
            .iter()
            .filter(|o| o.machine_id.is_some() && o.machine_id == machine)
        {
            let seen = self
                .other_clusters_seen
                .insert(other.system_identifier, other.updated_unix_ms);
            if seen.is_some_and(|before| other.updated_unix_ms > before) {
                live = Some(other.system_identifier);
            }
        }
        if let Some(system_identifier) = live {
            self.replicated_namesake = Some(IdgenError::SnowflakeMachineIdReplicated {
                machine: machine.unwrap_or(-1),
                system_identifier,
            });
            self.publish_machine_problem();
        }
    }

    /// The machine id's problem for the status view and the callers: a
    /// Citus node with the same id (proven: IDs refused), or a live
    /// cluster whose mark replicates here with it.
    fn publish_machine_problem(&self) {
        let problem = self
            .citus_namesake
            .clone()
            .or_else(|| self.replicated_namesake.clone());
        self.state.set_machine_problem(problem);
    }

    /// Runs `body` in a transaction of its own, bounded by how long callers
    /// wait for the keeper; any failure is stored as the mark's problem.
    fn transact<T>(
        &self,
        body: impl FnOnce() -> Result<Result<T, MarkProblem>, pgrx::spi::Error>,
    ) -> Result<T, ()> {
        let timeout_ms = gucs::SNOWFLAKE_MAX_WAIT_MS
            .get()
            .max(KEEPER_TRANSACTION_MIN_MS);
        let problem = match bgworker::in_transaction(timeout_ms, body) {
            Ok(Ok(Ok(value))) => {
                self.state.set_mark_problem("");
                return Ok(value);
            }
            Ok(Ok(Err(problem))) => problem.to_string(),
            Ok(Err(spi)) => spi.to_string(),
            Err(caught) => caught.message,
        };
        if self.state.mark_problem().as_deref() != Some(problem.as_str()) {
            pgrx::log!("pg_idgen snowflake keeper: {problem}");
        }
        self.state.set_mark_problem(&problem);
        Err(())
    }

    /// After a start, a promotion or a restore, and whenever the row is above
    /// what this run committed: both generators go on above the WAL-logged
    /// mark, whatever the state file said.
    ///
    /// A generator is raised only by a mark above what it may issue up to
    /// already (`persisted_limit`); a field of -1 raises nothing.
    fn raise_floors(&self, mark: &HighWater) {
        let (main, javascript) = (&self.state.main, &self.state.javascript);
        let (main_floor, js_floor) =
            state_file::floors(&Saved::HighWater(*mark), main.layout(), javascript.layout());
        for (generator, floor) in [(main, main_floor), (javascript, js_floor)] {
            if let Some(floor) = floor.filter(|&f| f > generator.persisted_limit()) {
                generator.raise_floor(floor);
            }
        }
    }

    /// A start whose marks may be stale (`state_file::marks_are_current`:
    /// promoted, restored to a point in time, started without its state
    /// file, or the first start after an update from 0.3.0, whose row has
    /// no timeline): both generators start above anything the
    /// server before it could have issued under this machine id — its
    /// clock (within `pg_idgen.snowflake_clock_skew` of this one's) plus
    /// `pg_idgen.snowflake_max_lead` — as the WAL cannot prove more.
    fn raise_floors_above_any_predecessor(&self) {
        let floor_unix_ms = state_file::floor_above_any_predecessor(
            now_unix_ms(),
            i64::from(gucs::SNOWFLAKE_MAX_LEAD_MS.get()),
            i64::from(gucs::SNOWFLAKE_CLOCK_SKEW_MS.get()),
        );
        for generator in [&self.state.main, &self.state.javascript] {
            let floor = floor_unix_ms - generator.layout().epoch_ms;
            if floor > generator.persisted_limit() {
                generator.raise_floor(floor);
            }
        }
        pgrx::log!(
            "pg_idgen snowflake keeper: this start cannot prove its snowflake mark is current (promoted, restored to a point in time, or started without {STATE_FILE}); snowflake IDs start above {floor_unix_ms} ms since 1970: the clock plus pg_idgen.snowflake_max_lead and pg_idgen.snowflake_clock_skew"
        );
    }

    /// The table holds no mark (none committed, or its row deleted, or the
    /// table dropped and created again). "Nothing was issued" cannot be told
    /// from "the row was lost", so unless this is a first start (no commit
    /// replayed, no state file), both generators start above the last
    /// commit and checkpoint the server knows of, plus `snowflake_max_lead`
    /// (`state_file::floor_without_a_mark`).
    fn raise_floors_without_a_mark(&self) {
        let generators = [&self.state.main, &self.state.javascript];
        // SAFETY: a plain read of shared recovery state (0: no transaction
        // was replayed since the server started).
        let replayed = unsafe { pg_sys::GetLatestXTime() };
        let replayed_unix_ms =
            (replayed != 0).then(|| replayed / 1000 + PG_EPOCH_UNIX_MICROS / 1000);
        let file_had_a_mark = generators.iter().any(|g| g.floor() >= 0);
        let Some(floor_unix_ms) = state_file::floor_without_a_mark(
            replayed_unix_ms,
            last_checkpoint_unix_s(),
            file_had_a_mark,
            i64::from(gucs::SNOWFLAKE_MAX_LEAD_MS.get()),
        ) else {
            return;
        };
        for generator in generators {
            generator.raise_floor(floor_unix_ms - generator.layout().epoch_ms);
        }
        pgrx::log!(
            "pg_idgen snowflake keeper: snowflake_high_water in database \"{}\" holds no mark; snowflake IDs start above {floor_unix_ms} ms since 1970 (the last commit or checkpoint this server knows of, plus pg_idgen.snowflake_max_lead)",
            self.database
        );
    }

    /// Once recovery has ended: a primary started from a base backup on the
    /// backup's timeline may be a copy beside a running original
    /// (`backup_copy.rs`); with a fixed machine id, say so.
    fn warn_if_a_copy(&self) {
        let Some(config) = config().filter(|c| !c.lease && !c.citus) else {
            return;
        };
        let label = std::fs::read_to_string(self.data_dir.join(BACKUP_LABEL_OLD)).ok();
        // SAFETY: recovery has ended (checked by the caller), so the
        // insertion timeline is set and no longer changes.
        let timeline = unsafe { pg_sys::GetWALInsertionTimeLine() };
        if backup_copy::is_on_the_backups_timeline(label.as_deref(), timeline) {
            IdgenError::SnowflakeServerMayBeACopy {
                machine_id: config.machine,
                timeline,
            }
            .warn();
        }
    }

    /// `pg_idgen.snowflake_persist_ahead`, but never above
    /// `pg_idgen.snowflake_max_lead` (nor below the setting's 100 ms
    /// minimum): after a crash IDs resume up to the window ahead of the
    /// clock, and every call would wait for the clock beyond `max_lead`.
    /// A WARNING says so once per pair of values (at start, after a
    /// reload).
    fn persist_window_ms(&mut self) -> i64 {
        let persist = gucs::SNOWFLAKE_PERSIST_AHEAD_MS.get();
        let max_lead = gucs::SNOWFLAKE_MAX_LEAD_MS.get();
        let window = persist.min(max_lead.max(PERSIST_AHEAD_MIN_MS));
        if window < persist && self.window_warned != Some((persist, max_lead)) {
            IdgenError::PersistAheadAboveMaxLead {
                persist_ahead_ms: persist,
                max_lead_ms: max_lead,
                window_ms: window,
            }
            .warn();
            self.window_warned = Some((persist, max_lead));
        }
        i64::from(window)
    }

    /// Commits the marks the generators want, then writes the state file,
    /// and only then lets them issue up to the marks.
    fn persist_if_wanted(&mut self) {
        let state = self.state;
        let generators = [&state.main, &state.javascript];
        let window = self.persist_window_ms();
        let now = now_unix_ms();
        let wall_minus_mono = now - mono_now_ms();
        let in_use = [0, 1].map(|i| {
            let issued = generators[i].stats.issued.load(Ordering::Relaxed);
            self.idle_watches[i].in_use_ms(issued, wall_minus_mono, window)
        });
        let wanted = [0, 1].map(|i| generators[i].mark_to_persist(now, window, in_use[i]));
        // A file removed under a running server is written again at once.
        let removed = generators.iter().any(|g| g.persisted_limit() >= 0)
            && state_file::is_missing(self.data_dir);
        if !removed && wanted.iter().all(Option::is_none) {
            return;
        }
        let limits: Vec<i64> = generators
            .iter()
            .zip(wanted)
            .map(|(g, w)| w.unwrap_or(g.persisted_limit()))
            .collect();
        let mark = HighWater {
            layout: *state.main.layout(),
            main: state_file::high_water_id(state.main.layout(), limits[0]),
            javascript: state_file::high_water_id(state.javascript.layout(), limits[1]),
        };
        let database = self.database.clone();
        let machine = self.machine_id();
        let Ok(committed) = self.transact(move || wal_mark::commit(&database, &mark, machine))
        else {
            return;
        };
        // The row keeps the greater of each mark: one above ours (restored
        // meanwhile) raises the floors before anything more is issued.
        self.raise_floors(&committed.above(Some(&mark)));
        self.committed_here = Some(committed);
        state.set_wal_mark(mark_unix_ms(&committed));
        if self.write_state_file(&mark) {
            for (g, limit) in generators.iter().zip(&limits) {
                g.persisted(*limit);
            }
        }
    }

    /// On a standby: a replayed mark above what this server knew raises the
    /// generators' floors and goes into its own state file, so that after a
    /// restart — which replays only from the last restartpoint — it still
    /// knows the mark, even if the row is gone by the time it is promoted.
    fn remember_replayed(&mut self, mark: &HighWater) {
        let above = mark.above(self.replayed_here.as_ref());
        if above.main < 0 && above.javascript < 0 {
            return;
        }
        self.raise_floors(&above);
        let known = self.replayed_here.map_or(*mark, |before| HighWater {
            main: before.main.max(mark.main),
            javascript: before.javascript.max(mark.javascript),
            ..*mark
        });
        if self.write_state_file(&known) {
            self.replayed_here = Some(known);
        }
    }

    /// Writes the state file durably; a failure is counted for the callers
    /// and logged once.
    fn write_state_file(&mut self, mark: &HighWater) -> bool {
        match write_durably(self.data_dir, &state_file::render(mark)) {
            Ok(()) => {
                self.state.keeper_wrote(0);
                self.file_failing = false;
                true
            }
            Err(e) => {
                self.state
                    .keeper_wrote(e.raw_os_error().unwrap_or(libc::EIO));
                if !self.file_failing {
                    self.file_failing = true;
                    IdgenError::StateFileWriteFailed {
                        problem: e.to_string(),
                    }
                    .warn();
                }
                false
            }
        }
    }
}

/// Writes `content` as the state file in `dir` durably: a temporary file,
/// then PostgreSQL's `durable_rename`, which fsyncs it, renames it over
/// the old file and fsyncs the new name and the directory. The file is
/// always whole: the old content or the new. A failure is returned, never
/// raised: the keeper retries at its next pass.
pub(crate) fn write_durably(dir: &Path, content: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let tmp = dir.join(state_file::STATE_FILE_TMP);
    std::fs::write(&tmp, content)?;
    let c_path = |path: &Path| {
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)
    };
    let (from, to) = (c_path(&tmp)?, c_path(&dir.join(state_file::STATE_FILE))?);
    PgTryBuilder::new(|| {
        // SAFETY: two NUL-terminated paths in one directory. At elevel
        // ERROR durable_rename raises instead of returning -1 (its errno
        // is not kept either way, so the caught message says why); it
        // closes every file it opened before it raises, and holds no lock,
        // so the ERROR is caught below without a subtransaction.
        unsafe { pg_sys::durable_rename(from.as_ptr(), to.as_ptr(), pg_sys::PGERROR as i32) };
        Ok(())
    })
    .catch_others(|caught| match caught {
        CaughtError::PostgresError(report) => Err(std::io::Error::other(report.message())),
        _ => caught.rethrow(),
    })
    .execute()
}

/// The time (Unix seconds) of the last checkpoint (on a standby: of the
/// primary's checkpoint its last restartpoint replayed), from pg_control.
fn last_checkpoint_unix_s() -> Option<i64> {
    let mut crc_ok = false;
    // SAFETY: DataDir is set in every server process; get_controlfile
    // reads the file into palloc'd memory (or raises an ERROR, which the
    // keeper's transaction wrapper does not catch here: the worker exits
    // and the postmaster starts it again).
    let control = unsafe { pg_sys::get_controlfile(pg_sys::DataDir, &mut crc_ok) };
    if control.is_null() || !crc_ok {
        return None;
    }
    // SAFETY: `control` is a valid ControlFileData, checked above.
    Some(unsafe { (*control).checkPointCopy.time })
}

/// The time (Unix ms) no ID under `mark` is above, for the status view.
fn mark_unix_ms(mark: &HighWater) -> i64 {
    let javascript = Layout::javascript_safe(mark.layout.epoch_ms);
    [(&mark.layout, mark.main), (&javascript, mark.javascript)]
        .into_iter()
        .filter_map(|(layout, high)| {
            state_file::floor_for(layout, high).map(|t| layout.epoch_ms + t)
        })
        .max()
        .unwrap_or(-1)
}
