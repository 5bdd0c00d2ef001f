//! Shared memory: the request and startup hooks (chained to any installed
//! before ours, as pg_stat_statements does) that size and lay out every
//! structure pg_idgen keeps there. What each structure holds, and its
//! locking protocol, is documented in its own module.

use crate::gucs;
use crate::segment::registry;
use crate::snowflake::shared as snowflake;
use pgrx::pg_sys;
use pgrx::prelude::*;

const TRANCHE: &std::ffi::CStr = c"pg_idgen";
const SEGMENT_REGISTRY: &std::ffi::CStr = c"pg_idgen segment registry";
const SNOWFLAKE_STATE: &std::ffi::CStr = c"pg_idgen snowflake state";

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
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    // SAFETY: called by the postmaster after shared memory is created (and
    // again after a crash re-initialises it); AddinShmemInitLock (slot 21
    // of the main LWLock array) serialises add-ins laying out memory.
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            prev();
        }
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let size = registry::shmem_size(max_tags());
        let base = pg_sys::ShmemInitStruct(SEGMENT_REGISTRY.as_ptr(), size, &mut found) as *mut u8;
        let lock = &raw mut (*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr())).lock;
        registry::attach(base, found, max_tags(), lock);
        let mut found = false;
        let base = pg_sys::ShmemInitStruct(
            SNOWFLAKE_STATE.as_ptr(),
            snowflake::shmem_size(),
            &mut found,
        ) as *mut u8;
        snowflake::attach(base, found);
        pg_sys::LWLockRelease(init_lock);
    }
}
