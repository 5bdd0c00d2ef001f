//! The wait events a call shows in `pg_stat_activity` while it waits.
//!
//! From PostgreSQL 17 an extension can name its own (`WaitEventExtensionNew`,
//! registered once per process and remembered in a `OnceCell`); before 17
//! every extension wait shows as the generic `Extension`.

#[cfg(any(feature = "pg17", feature = "pg18"))]
pub fn refill_wait() -> u32 {
    static REFILL: once_cell::sync::OnceCell<u32> = once_cell::sync::OnceCell::new();
    // SAFETY: registers (or finds) the named event in shared memory; called
    // from a backend, where shared memory is attached.
    *REFILL
        .get_or_init(|| unsafe { pgrx::pg_sys::WaitEventExtensionNew(c"PgIdgenRefill".as_ptr()) })
}

#[cfg(not(any(feature = "pg17", feature = "pg18")))]
pub fn refill_wait() -> u32 {
    pgrx::pg_sys::PG_WAIT_EXTENSION
}
