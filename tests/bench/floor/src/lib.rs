//! The benchmark floor: `idgen_floor()` does one relaxed atomic add on a
//! process-local counter — the least a generator can do — so the
//! difference between it and a bare query is what calling any pgrx
//! function costs.

use pgrx::prelude::*;
use std::sync::atomic::{AtomicI64, Ordering};

::pgrx::pg_module_magic!(name, version);

static CALLS: AtomicI64 = AtomicI64::new(0);

#[pg_extern(volatile, parallel_unsafe)]
fn idgen_floor() -> i64 {
    CALLS.fetch_add(1, Ordering::Relaxed)
}
