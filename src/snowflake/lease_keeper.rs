//! The lease keeper: with `pg_idgen.machine_id = 'lease'`, a background
//! worker that takes this server's snowflake machine id from the lease
//! table on a central server (through the postgres_fdw foreign table
//! `pg_idgen.lease_table` in `pg_idgen.lease_database`), renews it, and
//! tells both generators what they may issue. The rules are `lease.rs`'s;
//! this is the glue: SPI, clocks, the generators.
//!
//! * Claim: read the rows, let `LeaseWatch` choose (this server's previous
//!   id, its own row, the lowest free or expired one), CAS the row. The
//!   generators switch to the id with `Generator::take_lease`: above the
//!   row's floor, below the recorded ceiling, until the monotonic deadline.
//! * Renew from a third of the duration on; a renewal that arrives in time
//!   raises ceiling and deadline (`renew_lease`). One that finds the row
//!   changed (no row, or 40001 through postgres_fdw) means the lease is
//!   lost: the generators stop at once and the keeper claims again. One
//!   that fails (the central server unreachable) changes nothing: the
//!   generators stop by themselves at the deadline.
//! * At shutdown (SIGTERM) the generators stop, then the row is given up
//!   with the ceiling as its floor, so the id is free at once.
//!
//! # Shared state
//!
//! `LeaseShared`, in the snowflake shared memory: written by the keeper
//! alone (atomics; the two texts under a sequence counter, odd while being
//! written), read by `snowflake_status` and by callers that found no lease.

use super::generator::Generator;
use super::lease::{
    check_holder, read_sql, seed_sql, Claim, ClaimChoice, Claimant, Held, LeaseError, LeaseRow,
    LeaseSettings, LeaseWatch, Written,
};
use super::shared::{mono_now_ms, now_unix_ms, snowflake, Snowflake};
use crate::errors::{IdgenError, StoredError};
use crate::gucs;
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::prelude::*;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

const TEXT_BYTES: usize = 240;

/// A short text written by one process and read by any, under a sequence
/// counter (odd while it is being written; a reader retries).
#[repr(C)]
pub struct SharedText {
    seq: AtomicU64,
    len: AtomicU64,
    bytes: [AtomicU8; TEXT_BYTES],
}

impl SharedText {
    fn new() -> SharedText {
        SharedText {
            seq: AtomicU64::new(0),
            len: AtomicU64::new(0),
            bytes: std::array::from_fn(|_| AtomicU8::new(0)),
        }
    }

    fn set(&self, text: &str) {
        let text = crate::errors::truncate_utf8(text, TEXT_BYTES);
        self.seq.fetch_add(1, Ordering::AcqRel);
        for (slot, byte) in self.bytes.iter().zip(text.bytes()) {
            slot.store(byte, Ordering::Relaxed);
        }
        self.len.store(text.len() as u64, Ordering::Relaxed);
        self.seq.fetch_add(1, Ordering::AcqRel);
    }

    pub fn get(&self) -> String {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            let len = (self.len.load(Ordering::Relaxed) as usize).min(TEXT_BYTES);
            let bytes: Vec<u8> = self.bytes[..len]
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect();
            std::sync::atomic::fence(Ordering::Acquire);
            if before.is_multiple_of(2) && self.seq.load(Ordering::Relaxed) == before {
                return String::from_utf8_lossy(&bytes).into_owned();
            }
            std::hint::spin_loop();
        }
    }
}

/// What the keeper holds, for `snowflake_status` and waiting callers.
#[repr(C)]
pub struct LeaseShared {
    latch: AtomicPtr<pg_sys::Latch>,
    pub pid: AtomicI32,
    /// The machine id held (-1: none).
    pub machine: AtomicI64,
    /// When this server stops issuing unless it renews (Unix ms, its own
    /// clock), 0 before the first claim.
    pub until_unix_ms: AtomicI64,
    pub renewals: AtomicU64,
    pub failures: AtomicU64,
    /// The foreign server and table the lease comes from.
    pub source: SharedText,
    /// Why no lease is held, or the last renewal's error ("" when fine).
    problem: SharedText,
}

impl LeaseShared {
    pub fn new() -> LeaseShared {
        LeaseShared {
            latch: AtomicPtr::new(std::ptr::null_mut()),
            pid: AtomicI32::new(0),
            machine: AtomicI64::new(-1),
            until_unix_ms: AtomicI64::new(0),
            renewals: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            source: SharedText::new(),
            problem: SharedText::new(),
        }
    }

    pub fn wake(&self) {
        let latch = self.latch.load(Ordering::Acquire);
        if !latch.is_null() {
            // SAFETY: a PGPROC latch in shared memory; setting the latch of
            // a process that just exited is harmless.
            unsafe { pg_sys::SetLatch(latch) };
        }
    }

    pub fn problem(&self) -> String {
        match self.problem.get() {
            p if p.is_empty() => "the lease keeper has not claimed one yet".into(),
            p => p,
        }
    }

    /// The last problem, if any.
    pub fn last_problem(&self) -> Option<String> {
        Some(self.problem.get()).filter(|p| !p.is_empty())
    }
}

impl Default for LeaseShared {
    fn default() -> Self {
        Self::new()
    }
}

fn text_setting(setting: &pgrx::guc::GucSetting<Option<std::ffi::CString>>) -> String {
    setting
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn settings() -> Result<LeaseSettings, LeaseError> {
    LeaseSettings::new(
        i64::from(gucs::LEASE_DURATION_MS.get()),
        i64::from(gucs::LEASE_MARGIN_MS.get()),
        i64::from(gucs::SNOWFLAKE_MAX_LEAD_MS.get()),
    )
}

/// This server's name in the lease table.
fn holder() -> String {
    let configured = text_setting(&gucs::LEASE_HOLDER);
    if !configured.trim().is_empty() {
        return configured;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    // SAFETY: plain reads of globals set at postmaster start.
    let (port, data_dir) = unsafe {
        (
            pg_sys::PostPortNumber,
            std::ffi::CStr::from_ptr(pg_sys::DataDir)
                .to_string_lossy()
                .into_owned(),
        )
    };
    format!("{host}:{port}:{data_dir}")
}

/// Checks the lease settings at server start (raises: the start fails).
pub fn check_settings() {
    if let Err(e) = settings() {
        IdgenError::BadSetting {
            name: "pg_idgen.lease_duration",
            value: format!(
                "{} ms (margin {} ms)",
                gucs::LEASE_DURATION_MS.get(),
                gucs::LEASE_MARGIN_MS.get()
            ),
            problem: e.to_string(),
            hint: "The default is 20 s with a margin of 1 s.".into(),
        }
        .raise();
    }
    let configured = text_setting(&gucs::LEASE_HOLDER);
    if !configured.is_empty() {
        if let Err(e) = check_holder(&configured) {
            IdgenError::BadSetting {
                name: "pg_idgen.lease_holder",
                value: configured,
                problem: e.to_string(),
                hint: "Use 1 to 200 printable characters, unique among the servers.".into(),
            }
            .raise();
        }
    }
}

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
    /// The row was not as read: someone else wrote it (or 40001).
    Lost,
    Failed(StoredError),
}

fn run<T>(body: impl FnOnce() -> Result<Option<T>, pgrx::spi::Error>) -> Outcome<T> {
    match crate::segment::worker::in_transaction(body) {
        Ok(Ok(Some(value))) => Outcome::Done(value),
        Ok(Ok(None)) => Outcome::Lost,
        Ok(Err(e)) => Outcome::Failed(StoredError {
            sqlstate: PgSqlErrorCode::ERRCODE_INTERNAL_ERROR as i32,
            message: e.to_string(),
            hint: String::new(),
        }),
        Err(e) if e.sqlstate == PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE as i32 => {
            Outcome::Lost
        }
        Err(e) => Outcome::Failed(e),
    }
}

/// Entry point, named in `bgw_function_name`.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_idgen_lease_keeper_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let Some(state) = snowflake() else { return };
    let database = text_setting(&gucs::LEASE_DATABASE);
    // Left in place if connecting fails (a FATAL in the log).
    state.lease.problem.set(&format!(
        "the lease keeper could not connect to pg_idgen.lease_database \"{database}\" (the server log says why)"
    ));
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    state.lease.problem.set("");
    // SAFETY: MyLatch and MyProcPid are set in every started process.
    unsafe {
        state.lease.latch.store(pg_sys::MyLatch, Ordering::Release);
        state.lease.pid.store(pg_sys::MyProcPid, Ordering::Release);
    }
    let settings = match settings() {
        Ok(s) => s,
        Err(e) => {
            state.lease.problem.set(&e.to_string());
            return;
        }
    };
    let mut keeper = Keeper {
        state,
        settings,
        holder: holder(),
        layout_text: {
            let l = state.main.layout();
            format!(
                "epoch_ms {} bits {}/{}/{}",
                l.epoch_ms, l.time_bits, l.machine_bits, l.sequence_bits
            )
        },
        max_machine: state.main.layout().max_machine().min(i64::from(i32::MAX)) as i32,
        table: None,
        watch: LeaseWatch::new(),
        held: None,
        previous: None,
        seeded: false,
    };
    loop {
        let sleep_ms = keeper.step().clamp(10, 1000);
        if BackgroundWorker::sigterm_received()
            || !BackgroundWorker::wait_latch(Some(Duration::from_millis(sleep_ms as u64)))
        {
            keeper.give_up();
            // Exit code 1: the postmaster starts the keeper again (after
            // pg_terminate_backend, say) unless the server is shutting down.
            // SAFETY: ends this process the way PostgreSQL's own code does.
            unsafe { pg_sys::proc_exit(1) };
        }
    }
}

struct Keeper {
    state: &'static Snowflake,
    settings: LeaseSettings,
    holder: String,
    layout_text: String,
    max_machine: i32,
    /// The lease table's quoted name, once found.
    table: Option<String>,
    watch: LeaseWatch,
    held: Option<Held>,
    previous: Option<i32>,
    seeded: bool,
}

impl Keeper {
    /// One step; returns how long to sleep (ms).
    fn step(&mut self) -> i64 {
        let Some(table) = self.find_table() else {
            return 1000;
        };
        match self.held.clone() {
            Some(held) if held.renew_due(mono_now_ms()) => self.renew(&table, &held),
            Some(held) => held.renew_at_mono_ms - mono_now_ms(),
            None => self.claim(&table),
        }
    }

    fn problem(&self, text: &str) {
        self.state.lease.failures.fetch_add(1, Ordering::Relaxed);
        if self.state.lease.problem.get() != text {
            pgrx::log!("pg_idgen lease keeper: {text}");
        }
        self.state.lease.problem.set(text);
    }

    fn find_table(&mut self) -> Option<String> {
        if self.table.is_some() {
            return self.table.clone();
        }
        let name = text_setting(&gucs::LEASE_TABLE);
        let found = run(|| {
            Spi::connect(|client| {
                let rows = client.select(
                    "SELECT c.oid::pg_catalog.regclass::pg_catalog.text, s.srvname::pg_catalog.text \
                       FROM pg_catalog.pg_class c \
                       LEFT JOIN pg_catalog.pg_foreign_table f ON f.ftrelid OPERATOR(pg_catalog.=) c.oid \
                       LEFT JOIN pg_catalog.pg_foreign_server s ON s.oid OPERATOR(pg_catalog.=) f.ftserver \
                      WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)",
                    Some(1),
                    &[name.as_str().into()],
                )?;
                if rows.is_empty() {
                    return Ok(None);
                }
                let row = rows.first();
                Ok(Some((
                    row.get::<String>(1)?.unwrap_or_default(),
                    row.get::<String>(2)?,
                )))
            })
        });
        match found {
            Outcome::Done((qualified, server)) => {
                let database = text_setting(&gucs::LEASE_DATABASE);
                self.state.lease.source.set(&format!(
                    "{} ({database}.{qualified})",
                    server.as_deref().unwrap_or("local table")
                ));
                self.table = Some(qualified.clone());
                Some(qualified)
            }
            Outcome::Lost => {
                self.problem(&format!(
                    "pg_idgen.lease_table \"{name}\" does not exist in database \"{}\" (create the foreign table over the central idgen_machine_lease)",
                    text_setting(&gucs::LEASE_DATABASE)
                ));
                None
            }
            Outcome::Failed(e) => {
                self.problem(&e.message);
                None
            }
        }
    }

    fn read_rows(&mut self, table: &str) -> Outcome<Vec<LeaseRow>> {
        let max = self.max_machine;
        let seed = !self.seeded;
        run(|| {
            Spi::connect_mut(|client| {
                if seed {
                    client.update(&seed_sql(table), None, &[max.into()])?;
                }
                let rows = client.select(&read_sql(table), None, &[max.into()])?;
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

    /// Runs a claim or renewal statement; `None` from the body: no row.
    fn write(&self, sql: &str, machine: i32, version: i64) -> Outcome<Written> {
        let sent_mono = mono_now_ms();
        let sent_wall = now_unix_ms();
        let ceiling = self.settings.ceiling_unix_ms(sent_wall);
        let until = self.settings.stops_by_unix_ms(sent_wall);
        let outcome = run(|| {
            Spi::connect_mut(|client| {
                let rows = client.update(
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
                )?;
                if rows.is_empty() {
                    return Ok(None);
                }
                rows.first().get::<i64>(1)
            })
        });
        match outcome {
            Outcome::Done(new_version) => {
                self.state
                    .lease
                    .until_unix_ms
                    .store(until, Ordering::Relaxed);
                Outcome::Done(Written {
                    sent_mono_ms: sent_mono,
                    received_mono_ms: mono_now_ms(),
                    version: new_version,
                    ceiling_unix_ms: ceiling,
                })
            }
            Outcome::Lost => Outcome::Lost,
            Outcome::Failed(e) => Outcome::Failed(e),
        }
    }

    fn claim(&mut self, table: &str) -> i64 {
        let rows = match self.read_rows(table) {
            Outcome::Done(rows) => rows,
            Outcome::Lost => return 100,
            Outcome::Failed(e) => {
                self.problem(&e.message);
                return 1000;
            }
        };
        self.seeded = true;
        self.watch.observe(rows, mono_now_ms());
        let claimant = Claimant {
            holder: &self.holder,
            previous_machine_id: self.previous,
            layout: &self.layout_text,
            max_machine_id: self.max_machine,
        };
        let claim: Claim = match self.watch.choose(&claimant, mono_now_ms()) {
            Ok(ClaimChoice::Take(claim)) => claim,
            Ok(ClaimChoice::WaitUntil { mono_ms }) => {
                self.problem(&format!(
                    "every machine id 0 to {} is held by a live server; waiting for one to expire",
                    self.max_machine
                ));
                return mono_ms - mono_now_ms();
            }
            Err(e) => {
                // Rows deleted by hand: seed them again.
                self.seeded &= !matches!(e, LeaseError::NoRows { .. });
                self.problem(&e.to_string());
                return 1000;
            }
        };
        let sql = super::lease::claim_sql(table);
        match self.write(&sql, claim.machine_id, claim.version) {
            Outcome::Done(written) => {
                let held = Held::claimed(&self.settings, &claim, None, &written);
                self.apply(&held, true);
                self.previous = Some(held.machine_id);
                self.held = Some(held);
                self.state.lease.problem.set("");
                0
            }
            Outcome::Lost => 0, // someone else won: read again
            Outcome::Failed(e) => {
                self.problem(&e.message);
                1000
            }
        }
    }

    fn renew(&mut self, table: &str, held: &Held) -> i64 {
        let sql = super::lease::renew_sql(table);
        match self.write(&sql, held.machine_id, held.version) {
            Outcome::Done(written) => {
                let renewed = held.renewed(&self.settings, &written);
                self.apply(&renewed, false);
                self.held = Some(renewed);
                self.state.lease.renewals.fetch_add(1, Ordering::Relaxed);
                self.state.lease.problem.set("");
                0
            }
            Outcome::Lost => {
                self.stop();
                self.problem(&format!(
                    "the lease of machine id {} was lost (its row changed on the central server); claiming again",
                    held.machine_id
                ));
                self.held = None;
                0
            }
            Outcome::Failed(e) => {
                // Nothing changes: the generators stop by themselves at the
                // deadline if no renewal succeeds before it.
                self.problem(&format!("renewal failed: {}", e.message));
                (self.settings.renew_after_ms() / 10).max(50)
            }
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
    fn stop(&self) -> i64 {
        let last = [&self.state.main, &self.state.javascript]
            .map(|g| g.layout().epoch_ms + g.drop_lease())
            .into_iter()
            .max()
            .unwrap_or(i64::MIN);
        self.state.lease.machine.store(-1, Ordering::Release);
        last
    }

    /// At shutdown: stop issuing, then free the row with the exact floor:
    /// the higher of the floor it had when claimed (every earlier holder's
    /// IDs) and this server's last ID — never lower, and never above this
    /// server's ceiling — so a restart (or anyone) issues at once.
    fn give_up(&mut self) {
        let last_issued = self.stop();
        let (Some(held), Some(table)) = (self.held.take(), self.table.clone()) else {
            return;
        };
        let sql = super::lease::give_up_sql(&table);
        let floor = held
            .give_up_floor_unix_ms(Some(last_issued.min(held.ceiling_unix_ms)))
            .unwrap_or(held.ceiling_unix_ms);
        let _ = run(|| {
            Spi::connect_mut(|client| {
                let rows = client.update(
                    &sql,
                    None,
                    &[
                        held.machine_id.into(),
                        held.version.into(),
                        self.holder.as_str().into(),
                        floor.into(),
                    ],
                )?;
                Ok(Some(rows.len()))
            })
        });
    }
}
