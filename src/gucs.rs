//! Every `pg_idgen.*` setting: its variable, its bounds and its context.
//!
//! Sizes of shared memory are fixed at server start (`Postmaster`); times
//! are read on every use, so a reload (SIGHUP) or `SET` takes effect at once
//! where the context allows it. The README's settings table mirrors this file.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use std::ffi::CString;

/// How many (database, tag) pairs shared memory holds.
pub static MAX_TAGS: GucSetting<i32> = GucSetting::<i32>::new(1024);

/// How long a call waits for a refill before it fails, in milliseconds.
/// -1: half of `pg_idgen.max_tags` (`slot_share::quota`).
pub static MAX_TAGS_PER_DATABASE: GucSetting<i32> = GucSetting::<i32>::new(-1);
pub static REFILL_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(10_000);

/// Share of a range used before the next one is fetched, in percent.
pub static PREFETCH_PERCENT: GucSetting<i32> = GucSetting::<i32>::new(80);

/// The most IDs the worker keeps cached ahead of one tag's callers.
pub static MAX_IDS_AHEAD: GucSetting<i32> = GucSetting::<i32>::new(10_000_000);

/// How long a database's refill worker stays without work before it leaves.
pub static WORKER_IDLE_TIMEOUT_S: GucSetting<i32> = GucSetting::<i32>::new(60);

/// How long, in seconds, of a remote tag's demand the worker keeps cached.
pub static REMOTE_CACHE_AHEAD_S: GucSetting<i32> = GucSetting::<i32>::new(60);

/// The longest one transaction of a pg_idgen worker may take, commit
/// included, in milliseconds: each refill, and each statement of the lease
/// keeper (both pass it to `bgworker::in_transaction`).
pub static REMOTE_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(5_000);

/// `segment_nextval` returns a snowflake ID instead of failing when no
/// range comes within `refill_timeout`.
pub static SNOWFLAKE_FALLBACK: GucSetting<bool> = GucSetting::<bool>::new(false);

/// Lets a superuser's transaction lower `id_segment.max_id` on purpose.
pub static ALLOW_MAX_ID_DECREASE: GucSetting<bool> = GucSetting::<bool>::new(false);

/// The check hooks of settings whose rules live with the code that reads
/// them (`snowflake::config`): `lib.rs` passes them in, so that this module
/// imports none of that code.
pub struct CheckHooks {
    pub machine_id: pg_sys::GucStringCheckHook,
    pub epoch: pg_sys::GucStringCheckHook,
    pub fallback: pg_sys::GucBoolCheckHook,
}

pub fn register(hooks: &CheckHooks) {
    GucRegistry::define_int_guc(
        c"pg_idgen.max_tags",
        c"Maximum number of (database, segment tag) pairs of the whole cluster kept in shared memory.",
        c"Each (database, tag) pair that segment_nextval() has used holds one slot of about 2.7 kB of shared memory until segment_drop(), a restart, or a new tag takes the slot of a tag idle for a minute (see pg_idgen.max_tags_per_database).",
        &MAX_TAGS,
        16,
        1_000_000,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_idgen.max_tags_per_database",
        c"Maximum number of pg_idgen.max_tags slots one database may hold; -1 or 0: half of pg_idgen.max_tags.",
        c"So that one database cannot take the slots the others need. At its quota a new tag of the database takes the slot of one of its own tags no session drew from for a minute, or is refused; below it, a new tag may take the slot of any database's tag idle that long.",
        &MAX_TAGS_PER_DATABASE,
        -1,
        1_000_000,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_idgen.refill_timeout",
        c"How long segment_nextval() waits for the refill worker before it raises an error.",
        c"A call waits only when every cached ID of its tag is used up; the wait also ends at once on cancel, terminate or statement_timeout.",
        &REFILL_TIMEOUT_MS,
        1,
        3_600_000,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_idgen.prefetch_percent",
        c"Share of a cached range, in percent, handed out before the worker fetches the next range.",
        c"Lower values fetch earlier and make waits rarer; higher values keep fewer IDs cached (and lost on a crash).",
        &PREFETCH_PERCENT,
        1,
        100,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_idgen.max_ids_ahead",
        c"The most IDs the refill worker keeps cached ahead of one tag's callers.",
        c"The worker caches what the tag's callers take in 250 ms, doubled each time a caller had to wait, up to this cap. It also bounds the IDs a crash skips per tag.",
        &MAX_IDS_AHEAD,
        1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_idgen.worker_idle_timeout",
        c"How long a database's refill worker waits without work before it exits.",
        c"The next call that needs a range starts it again. The worker also leaves at once when DROP DATABASE or CREATE DATABASE ... TEMPLATE needs its database.",
        &WORKER_IDLE_TIMEOUT_S,
        1,
        86_400,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_bool_guc(
        c"pg_idgen.allow_max_id_decrease",
        c"Lets an UPDATE lower id_segment.max_id, which is otherwise refused because IDs up to it may have been handed out.",
        c"Superusers only; set it with SET LOCAL in the transaction that lowers max_id on purpose, knowing that IDs above the new value can be handed out again.",
        &ALLOW_MAX_ID_DECREASE,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_idgen.remote_cache_ahead",
        c"How much demand, in time, the refill worker keeps cached for a tag whose ranges come from a central server.",
        c"While the central server is unreachable the tag's callers go on with these IDs; pg_idgen.max_ids_ahead caps them.",
        &REMOTE_CACHE_AHEAD_S,
        0,
        86_400,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"pg_idgen.remote_timeout",
        c"The longest one transaction of a pg_idgen worker (a refill, a lease claim or renewal) may take, commit included, before it is cancelled.",
        c"Through postgres_fdw the cancel reaches the central server; a refill is retried with back-off, a lease statement at the lease keeper's next step.",
        &REMOTE_TIMEOUT_MS,
        100,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    // SAFETY: the check hook is a #[pg_guard] function of this library
    // (`CheckHooks`).
    unsafe {
        GucRegistry::define_bool_guc_with_hooks(
            c"pg_idgen.snowflake_fallback",
            c"Return a snowflake ID from segment_nextval() when no range comes within pg_idgen.refill_timeout.",
            c"Off by default: fallback IDs are far larger than the tag's own, so the column stops being short and trend-increasing while it lasts. Superusers and roles granted SET on it may change it; it cannot be on while pg_idgen.machine_id is not set.",
            &SNOWFLAKE_FALLBACK,
            GucContext::Suset,
            GucFlags::default(),
            hooks.fallback,
            None,
            None,
        );
    }
}

/// This server's snowflake machine id: a number, `hostname` or `lease`;
/// unset by default (no snowflake ID is issued until it is set).
pub static MACHINE_ID: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// The snowflake epoch, UTC.
pub static SNOWFLAKE_EPOCH: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"2025-01-01 00:00:00+00"));

pub static SNOWFLAKE_TIME_BITS: GucSetting<i32> = GucSetting::<i32>::new(41);
pub static SNOWFLAKE_MACHINE_BITS: GucSetting<i32> = GucSetting::<i32>::new(10);
pub static SNOWFLAKE_SEQUENCE_BITS: GucSetting<i32> = GucSetting::<i32>::new(12);

/// How far snowflake time may run ahead of the wall clock, in ms.
pub static SNOWFLAKE_MAX_LEAD_MS: GucSetting<i32> = GucSetting::<i32>::new(5_000);
/// How far apart the clocks of a primary and its standbys (or the server
/// a restore replaces) may be: see its description in `register_snowflake`.
pub static SNOWFLAKE_CLOCK_SKEW_MS: GucSetting<i32> = GucSetting::<i32>::new(1_000);

/// How long a snowflake call waits for the clock before it fails, in ms.
pub static SNOWFLAKE_MAX_WAIT_MS: GucSetting<i32> = GucSetting::<i32>::new(10_000);

/// How far ahead of the clock the snowflake keeper persists the high-water
/// mark while IDs are issued, in ms.
pub static SNOWFLAKE_PERSIST_AHEAD_MS: GucSetting<i32> = GucSetting::<i32>::new(2_000);

/// The database whose `snowflake_high_water` table carries the snowflake
/// high-water mark in the WAL (the snowflake keeper connects to it).
pub static SNOWFLAKE_DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));

/// `pg_idgen.machine_id = 'lease'`: where the lease table is, and the lease.
pub static LEASE_DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));
pub static LEASE_TABLE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"public.idgen_machine_lease"));
pub static LEASE_CLOCK_TABLE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"public.idgen_lease_clock"));
pub static LEASE_HOLDER: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static LEASE_DURATION_MS: GucSetting<i32> = GucSetting::<i32>::new(20_000);
pub static LEASE_MARGIN_MS: GucSetting<i32> = GucSetting::<i32>::new(1_000);

/// The lease keeper's settings (`pg_idgen.machine_id = 'lease'`).
fn register_lease() {
    GucRegistry::define_string_guc(
        c"pg_idgen.lease_database",
        c"With pg_idgen.machine_id = 'lease': the database whose foreign table pg_idgen.lease_table reaches the central lease table.",
        c"The lease keeper connects to it and reads and writes the two foreign tables as their owner, a superuser or the owner of pg_idgen, whose postgres_fdw user mapping is used.",
        &LEASE_DATABASE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"pg_idgen.lease_table",
        c"With pg_idgen.machine_id = 'lease': the foreign table (in pg_idgen.lease_database) over the central idgen_machine_lease table.",
        c"A schema-qualified name (schema.table), never looked up on a search path; a relation that is not a foreign table owned by a superuser or the owner of pg_idgen is refused.",
        &LEASE_TABLE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"pg_idgen.lease_clock_table",
        c"With pg_idgen.machine_id = 'lease': the foreign table (in pg_idgen.lease_database, on the lease table's foreign server) over the central view idgen_lease_clock.",
        c"Each claim and renewal reads the central server's clock through it, so that a lease table restored to an earlier state can never let a server start among the IDs of a holder the table forgot.",
        &LEASE_CLOCK_TABLE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"pg_idgen.lease_holder",
        c"With pg_idgen.machine_id = 'lease': this server's name in the lease table.",
        c"Unique among live servers and the same across restarts. Empty: the host name, port and data directory.",
        &LEASE_HOLDER,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_idgen.lease_duration",
        c"With pg_idgen.machine_id = 'lease': how long a lease lasts without renewal.",
        c"Renewed every third of it; a dead server's machine id is free again this long after its last renewal.",
        &LEASE_DURATION_MS,
        1_000,
        600_000,
        GucContext::Postmaster,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_idgen.lease_margin",
        c"With pg_idgen.machine_id = 'lease': how long before its lease could expire a server that cannot renew stops issuing.",
        c"At least 100 ms and 0.2% of pg_idgen.lease_duration (clock-rate error), at most half of it.",
        &LEASE_MARGIN_MS,
        100,
        300_000,
        GucContext::Postmaster,
        GucFlags::UNIT_MS,
    );
}

pub fn register_snowflake(hooks: &CheckHooks) {
    GucRegistry::define_string_guc(
        c"pg_idgen.snowflake_database",
        c"The database whose pg_idgen table snowflake_high_water holds the snowflake high-water mark.",
        c"The snowflake keeper connects to it and commits the mark there before IDs up to it are issued, so the mark travels in the WAL to standbys, point-in-time restores and pg_upgrade. pg_idgen must be installed (CREATE EXTENSION pg_idgen) in that database.",
        &SNOWFLAKE_DATABASE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    register_lease();
    // SAFETY: the check hooks are #[pg_guard] functions of this library
    // (`CheckHooks`).
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"pg_idgen.machine_id",
            c"Machine id in snowflake IDs: a number, 'hostname' for the trailing number of the host name, 'lease', or 'citus'.",
            c"Every server handing out snowflake IDs must have its own; unset (the default), snowflake_nextval() refuses. 'hostname' suits Kubernetes StatefulSets: pod pg-3 gets 3. 'lease' takes one from a table on a central server. 'citus' uses the node's Citus group id (the coordinator's is 0).",
            &MACHINE_ID,
            GucContext::Postmaster,
            GucFlags::default(),
            hooks.machine_id,
            None,
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"pg_idgen.snowflake_epoch",
            c"Start of snowflake time, in UTC (YYYY-MM-DD HH:MM:SS+00).",
            c"Snowflake IDs count milliseconds from this moment; changing it changes the meaning of every ID already issued.",
            &SNOWFLAKE_EPOCH,
            GucContext::Postmaster,
            GucFlags::default(),
            hooks.epoch,
            None,
            None,
        );
    }
    // Each width alone is refused at once outside its range (time and
    // sequence need at least 1 bit, so none may take more than 62); the
    // sum is a rule between the three, which a start refuses and the
    // keeper warns about after a reload (`config::next_start_problem`).
    for (name, short, setting, (min, max)) in [
        (
            c"pg_idgen.snowflake_time_bits",
            c"Bits of milliseconds in a snowflake ID.",
            &SNOWFLAKE_TIME_BITS,
            (1, 62),
        ),
        (
            c"pg_idgen.snowflake_machine_bits",
            c"Bits of machine id in a snowflake ID.",
            &SNOWFLAKE_MACHINE_BITS,
            (0, 61),
        ),
        (
            c"pg_idgen.snowflake_sequence_bits",
            c"Bits of sequence in a snowflake ID.",
            &SNOWFLAKE_SEQUENCE_BITS,
            (1, 62),
        ),
    ] {
        GucRegistry::define_int_guc(
            name,
            short,
            c"The time, machine and sequence bits must add up to 63: a server start refuses another sum, and after a reload the server log warns when the configuration files hold one.",
            setting,
            min,
            max,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    GucRegistry::define_int_guc(
        c"pg_idgen.snowflake_max_lead",
        c"How far snowflake time may run ahead of the wall clock before calls wait for it.",
        c"Time runs ahead when the clock steps back or more IDs are asked for in a millisecond than the sequence holds.",
        &SNOWFLAKE_MAX_LEAD_MS,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_idgen.snowflake_clock_skew",
        c"How far this server's clock may be behind the clock of a server it replaces (the primary it was a standby of, the server a restore replaces).",
        c"A server that cannot prove its high-water mark is current (promoted, restored to a point in time, started without its state file) starts above its clock plus pg_idgen.snowflake_max_lead plus this: the most the server before it could have issued. Its first snowflake ID then waits about this long. NTP keeps servers within milliseconds; the default leaves room for a clock that NTP has not yet stepped.",
        &SNOWFLAKE_CLOCK_SKEW_MS,
        0,
        600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_idgen.snowflake_max_wait",
        c"How long snowflake_nextval() waits for the clock before it raises an error.",
        c"The wait also ends at once on cancel, terminate or statement_timeout.",
        &SNOWFLAKE_MAX_WAIT_MS,
        0,
        3_600_000,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_idgen.snowflake_persist_ahead",
        c"How far ahead of the clock the snowflake keeper writes the high-water mark while IDs are issued.",
        c"The keeper rewrites the state file when less than half of this is left, so a write (with its fsync) may take up to half of it before calls wait. After a crash, IDs resume up to this far ahead of the clock: keep it below pg_idgen.snowflake_max_lead.",
        &SNOWFLAKE_PERSIST_AHEAD_MS,
        100,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
}
