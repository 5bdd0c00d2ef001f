//! Every `pg_idgen.*` setting: its variable, its bounds and its context.
//!
//! Sizes of shared memory are fixed at server start (`Postmaster`); times
//! are read on every use, so a reload (SIGHUP) or `SET` takes effect at once
//! where the context allows it. The README's settings table mirrors this file.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};

/// How many (database, tag) pairs shared memory holds.
pub static MAX_TAGS: GucSetting<i32> = GucSetting::<i32>::new(1024);

/// How long a call waits for a refill before it fails, in milliseconds.
pub static REFILL_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(10_000);

/// Share of a range used before the next one is fetched, in percent.
pub static PREFETCH_PERCENT: GucSetting<i32> = GucSetting::<i32>::new(80);

/// How long a database's refill worker stays without work before it leaves.
pub static WORKER_IDLE_TIMEOUT_S: GucSetting<i32> = GucSetting::<i32>::new(60);

pub fn register() {
    GucRegistry::define_int_guc(
        c"pg_idgen.max_tags",
        c"Maximum number of segment tags (per database) kept in shared memory.",
        c"Each (database, tag) pair that segment_nextval() has used holds one slot of about 600 bytes until segment_drop() or a restart.",
        &MAX_TAGS,
        16,
        1_000_000,
        GucContext::Postmaster,
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
        c"pg_idgen.worker_idle_timeout",
        c"How long a database's refill worker waits without work before it exits.",
        c"The next call that needs a range starts it again. The worker also leaves at once when DROP DATABASE or CREATE DATABASE ... TEMPLATE needs its database.",
        &WORKER_IDLE_TIMEOUT_S,
        1,
        86_400,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
}
