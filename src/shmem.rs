//! Shared memory: the request and startup hooks (chained to any installed
//! before ours, as pg_stat_statements does) that size and lay out every
//! structure pg_idgen keeps there, and the LWLocks of the extension's
//! tranche, `pg_idgen` (`RequestNamedLWLockTranche` in the request hook,
//! `GetNamedLWLockTranche` after): one guards the segment registry, one
//! the laying out. What each structure holds, and its locking protocol, is
//! documented in its own module.

use crate::gucs;
use crate::segment::registry;
use crate::snowflake::shared as snowflake;
use pgrx::pg_sys;
use pgrx::prelude::*;

const TRANCHE: &std::ffi::CStr = c"pg_idgen";
const SEGMENT_REGISTRY: &std::ffi::CStr = c"pg_idgen segment registry";
const SNOWFLAKE_STATE: &std::ffi::CStr = c"pg_idgen snowflake state";

/// The locks of the `pg_idgen` tranche, by what each one guards.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lock {
    /// The segment registry (`segment/registry.rs`).
    Registry = 0,
    /// Laying out pg_idgen's structures in `shmem_startup`.
    Layout = 1,
}

/// Every lock of the tranche, as many as are requested.
pub(crate) const LOCKS: [Lock; 2] = [Lock::Registry, Lock::Layout];

/// Lock `which` of the `pg_idgen` tranche.
///
/// # Safety
/// Shared memory exists (from the startup hook on) and the library was
/// preloaded, so the tranche was requested; otherwise
/// `GetNamedLWLockTranche` raises an ERROR.
pub(crate) unsafe fn lock(which: Lock) -> *mut pg_sys::LWLock {
    // SAFETY: the caller's promise; the tranche has `LOCKS.len()` locks.
    unsafe { &raw mut (*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr()).add(which as usize)).lock }
}

static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

fn max_tags() -> usize {
    gucs::MAX_TAGS.get() as usize
}

/// Installs the hooks; called from `_PG_init` while preloading.
pub fn install_hooks() {
    // SAFETY: `_PG_init` runs once in the postmaster, single-threaded,
    // before any hook is called.
    unsafe {
        PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(shmem_request);
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(shmem_startup);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    // SAFETY: called by the postmaster once, at the point where add-ins may
    // request shared memory and LWLocks.
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST_HOOK {
            prev();
        }
        pg_sys::RequestAddinShmemSpace(registry::shmem_size(max_tags()));
        pg_sys::RequestAddinShmemSpace(snowflake::shmem_size());
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), LOCKS.len() as i32);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    // SAFETY: called by the postmaster after shared memory is created (and
    // again after a crash re-initialises it), when the tranche's locks
    // exist. The layout lock serialises laying out pg_idgen's structures
    // (only an EXEC_BACKEND build runs this hook in more processes than
    // the postmaster, to attach). PostgreSQL's documentation has add-ins
    // take AddinShmemInitLock here, but that lock is a C macro
    // (`&MainLWLockArray[21].lock`) pgrx does not bind, and a lock of our
    // own serves as well: only pg_idgen's code lays out or attaches these
    // structures, and ShmemInitStruct takes ShmemIndexLock itself for the
    // shared index of names.
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            prev();
        }
        let layout_lock = lock(Lock::Layout);
        pg_sys::LWLockAcquire(layout_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let size = registry::shmem_size(max_tags());
        let base = pg_sys::ShmemInitStruct(SEGMENT_REGISTRY.as_ptr(), size, &mut found) as *mut u8;
        registry::attach(base, found, max_tags(), lock(Lock::Registry));
        let mut found = false;
        let base = pg_sys::ShmemInitStruct(
            SNOWFLAKE_STATE.as_ptr(),
            snowflake::shmem_size(),
            &mut found,
        ) as *mut u8;
        snowflake::attach(base, found);
        pg_sys::LWLockRelease(layout_lock);
    }
}
