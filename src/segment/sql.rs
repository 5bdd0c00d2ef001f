//! The SQL functions of segment IDs: `segment_nextval` (the fast path),
//! `segment_create` and `segment_drop`.
//!
//! `segment_nextval(text)` is a hand-written V1 C function rather than a
//! `#[pg_extern]`, because its speed is the product: it keeps the resolved
//! slot in `flinfo->fn_extra`, so when the tag argument is a constant (or a
//! parameter) the text is never looked at again for the rest of the query;
//! a varying argument costs one `memcmp` against the previous tag. A backend
//! also remembers every tag it has resolved, so shared memory is searched
//! (under the registry lock) once per tag per backend.
//!
//! The fast path is: the registry pointer, `XactReadOnly`, one `fetch_add`
//! on the tag's chain and a generation check. Everything else — resolving,
//! waking or starting the worker, waiting for a refill — is the slow path.

use super::chain::Taken;
use super::registry::{registry, Lookup, Registry};
use super::worker;
use crate::errors::{IdgenError, TAG_MAX_BYTES};
use crate::gucs;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long one sleep of a waiting caller lasts before it looks again (and
/// asks the worker again, in case the wake-up was lost).
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// What a call site remembers across calls, in `fn_extra`.
#[repr(C)]
struct CallSite {
    index: usize,
    generation: u64,
    /// The argument is a constant or parameter: it cannot change within the
    /// query, so it need not be compared.
    arg_stable: bool,
    /// The `id_segment` the function belongs to, looked up once per query.
    table_oid: u32,
    tag_len: usize,
    tag: [u8; TAG_MAX_BYTES],
}

thread_local! {
    /// Tags this backend has resolved: `tag → (slot index, generation)`.
    /// PostgreSQL backends are single-threaded, so this is per backend.
    static RESOLVED: RefCell<HashMap<Vec<u8>, (usize, u64)>> = RefCell::new(HashMap::new());
}

pub fn registry_or_raise() -> &'static Registry {
    registry().unwrap_or_else(|| IdgenError::NotPreloaded.raise())
}

fn database() -> u32 {
    // SAFETY: MyDatabaseId is set once the backend connects.
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

/// Refuses to hand out IDs where `nextval` would refuse too.
#[inline]
fn check_writable(function: &'static str) {
    // SAFETY: plain read of a backend-local global.
    if unsafe { pg_sys::XactReadOnly } {
        IdgenError::ReadOnly { function }.raise();
    }
}

/// Validates a tag's bytes (NULL is handled by the callers).
pub fn check_tag(tag: &[u8]) {
    if tag.is_empty() {
        IdgenError::EmptyTag.raise();
    }
    if tag.len() > TAG_MAX_BYTES {
        IdgenError::TagTooLong {
            tag: String::from_utf8_lossy(tag).into_owned(),
        }
        .raise();
    }
}

/// The OID of the `id_segment` table beside the called function (0 if it
/// is gone). Ranges cached from another table (an extension dropped and
/// created again) must not be handed out for this one.
fn current_table_oid(fcinfo: pg_sys::FunctionCallInfo) -> u32 {
    // SAFETY: fcinfo is the current call's; both look-ups read the syscache.
    unsafe {
        let namespace = pg_sys::get_func_namespace((*(*fcinfo).flinfo).fn_oid);
        pg_sys::get_relname_relid(c"id_segment".as_ptr(), namespace).to_u32()
    }
}

/// Frees the slots of databases that were dropped; returns whether there
/// were any. Only run when shared memory is full: it reads the catalog.
fn reclaim_dropped_databases(registry: &Registry) -> bool {
    let dropped: Vec<u32> = registry
        .databases_in_use()
        .into_iter()
        // SAFETY: a syscache look-up inside the caller's transaction; NULL
        // means no such database.
        .filter(|&oid| unsafe { pg_sys::get_database_name(pg_sys::Oid::from(oid)) }.is_null())
        .collect();
    for &database in &dropped {
        registry.free_database(database);
    }
    !dropped.is_empty()
}

/// The slot of `tag` in this database: from the backend's memory, or from
/// shared memory (assigning a slot if the tag has none), bound to the
/// current `id_segment` table.
fn resolve(registry: &Registry, tag: &[u8], table_oid: u32) -> (usize, u64) {
    check_tag(tag);
    let cached =
        RESOLVED
            .with(|map| map.borrow().get(tag).copied())
            .filter(|&(index, generation)| {
                registry.slot(index).generation.load(Ordering::Acquire) == generation
            });
    let (index, generation) = match cached {
        Some(found) => found,
        None => match registry.lookup_or_assign(database(), tag) {
            Lookup::Found { index, generation } => {
                RESOLVED.with(|map| map.borrow_mut().insert(tag.to_vec(), (index, generation)));
                (index, generation)
            }
            Lookup::Full => match reclaim_dropped_databases(registry) {
                true => return resolve(registry, tag, table_oid),
                false => IdgenError::TooManyTags {
                    max_tags: registry.max_tags() as i32,
                }
                .raise(),
            },
        },
    };
    let slot = registry.slot(index);
    if table_oid != 0 && slot.table_oid() != table_oid {
        let exclusive = registry.lock(true);
        slot.bind_table(&exclusive, table_oid);
    }
    (index, generation)
}

/// Asks the database's worker for the next range of a slot.
fn request_refill(registry: &Registry, index: usize) -> Result<(), IdgenError> {
    registry
        .slot(index)
        .refill_requested
        .store(true, Ordering::SeqCst);
    worker::ensure_running(database())
}

/// After a take: a taker that crossed the prefetch mark wakes the worker.
#[inline]
fn after_take(registry: &Registry, index: usize, taken: Taken) -> i64 {
    if taken.hit_mark {
        // Not waiting: if the worker cannot start, the caller that runs
        // out of IDs will report it.
        let _ = request_refill(registry, index);
    }
    taken.id
}

/// The next ID of `tag`'s slot, waiting for a refill if none is cached.
/// Returns `None` when the slot was freed or reassigned meanwhile (the
/// caller resolves the tag again).
fn next_id_slow(registry: &Registry, index: usize, generation: u64, tag: &[u8]) -> Option<i64> {
    let slot = registry.slot(index);
    if let Some(taken) = slot.take_for(generation) {
        return Some(after_take(registry, index, taken));
    }
    // SAFETY: plain query of the backend's recovery state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        IdgenError::DuringRecovery {
            function: "segment_nextval()",
        }
        .raise();
    }
    let timeout = Duration::from_millis(gucs::REFILL_TIMEOUT_MS.get() as u64);
    let errors_before = slot.error_seq.load(Ordering::Acquire);
    let started = Instant::now();
    slot.stats.waits.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the CV lives in shared memory; a sleep prepared here is
    // cancelled below, or by AbortTransaction if an error escapes.
    unsafe { pg_sys::ConditionVariablePrepareToSleep(slot.cv()) };
    let finish = |started: Instant| {
        // SAFETY: matches the prepare above.
        unsafe { pg_sys::ConditionVariableCancelSleep() };
        slot.stats
            .wait_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    };
    loop {
        if let Some(taken) = slot.take_for(generation) {
            finish(started);
            return Some(after_take(registry, index, taken));
        }
        if slot.generation.load(Ordering::Acquire) != generation {
            finish(started);
            return None;
        }
        if slot.error_seq.load(Ordering::Acquire) != errors_before {
            finish(started);
            let stored = {
                let shared = registry.lock(false);
                slot.last_error(&shared)
            };
            if let Some(e) = stored {
                IdgenError::RefillFailed {
                    tag: String::from_utf8_lossy(tag).into_owned(),
                    sqlstate: e.sqlstate,
                    message: e.message,
                    hint: e.hint,
                }
                .raise();
            }
            return None;
        }
        if let Err(e) = request_refill(registry, index) {
            finish(started);
            e.raise();
        }
        let waited = started.elapsed();
        if waited >= timeout {
            finish(started);
            IdgenError::RefillTimeout {
                tag: String::from_utf8_lossy(tag).into_owned(),
                waited_ms: waited.as_millis() as i64,
            }
            .raise();
        }
        let sleep = WAIT_SLICE.min(timeout - waited);
        // SAFETY: prepared above; CHECK_FOR_INTERRUPTS inside makes cancel,
        // terminate and statement_timeout end the wait with their ERROR.
        unsafe {
            pg_sys::ConditionVariableTimedSleep(
                slot.cv(),
                sleep.as_millis().max(1) as _,
                pg_sys::PG_WAIT_EXTENSION,
            );
        }
    }
}

/// The next ID of `tag`, resolving it as needed; also returns the slot
/// `(index, generation)` it came from.
fn next_id(registry: &Registry, tag: &[u8], table_oid: u32) -> (i64, usize, u64) {
    loop {
        let (index, generation) = resolve(registry, tag, table_oid);
        if let Some(id) = next_id_slow(registry, index, generation, tag) {
            return (id, index, generation);
        }
    }
}

/// The bytes of a `text` datum, detoasted if need be.
///
/// # Safety
/// `datum` is a non-NULL `text` datum valid for the current call.
unsafe fn text_bytes<'a>(datum: pg_sys::Datum) -> &'a [u8] {
    // SAFETY (whole body): `datum` is a valid text datum; a packed short
    // varlena is returned as is, a toasted one is copied into the current
    // memory context, which outlives the call.
    let varlena = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
    let len = pgrx::varlena::varsize_any_exhdr(varlena);
    std::slice::from_raw_parts(pgrx::varlena::vardata_any(varlena) as *const u8, len)
}

#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_segment_nextval_fast() -> &'static pg_sys::Pg_finfo_record {
    const V1_API: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1_API
}

/// `segment_nextval(tag text) → bigint`, declared in `sql/bootstrap.sql`.
///
/// # Safety
/// Called by the function manager with a valid `fcinfo` for a function of
/// one `text` argument.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn segment_nextval_fast(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let registry = registry_or_raise();
    check_writable("segment_nextval()");
    // SAFETY: the function manager passes a valid fcinfo with one argument
    // and a valid flinfo; fn_extra is ours (NULL or a CallSite we put there).
    let call = &mut *fcinfo;
    let arg = call.args.as_slice(1)[0];
    if arg.isnull {
        IdgenError::NullArgument {
            what: "segment tag",
        }
        .raise();
    }
    let flinfo = &mut *call.flinfo;
    let site = flinfo.fn_extra as *mut CallSite;
    if let Some(site) = site.as_mut() {
        if site.arg_stable || text_bytes(arg.value) == &site.tag[..site.tag_len] {
            if let Some(taken) = registry.slot(site.index).take_for(site.generation) {
                return pg_sys::Datum::from(after_take(registry, site.index, taken));
            }
        }
    }
    let site = match site.as_mut() {
        Some(site) => site,
        None => {
            // SAFETY: fn_mcxt lives as long as the flinfo, i.e. the whole
            // query; the zeroed allocation is a valid CallSite.
            let site = &mut *(pg_sys::MemoryContextAllocZero(
                flinfo.fn_mcxt,
                std::mem::size_of::<CallSite>(),
            ) as *mut CallSite);
            site.arg_stable = pg_sys::get_fn_expr_arg_stable(flinfo, 0);
            site.table_oid = current_table_oid(fcinfo);
            flinfo.fn_extra = (site as *mut CallSite).cast();
            site
        }
    };
    let tag = text_bytes(arg.value);
    let (id, index, generation) = next_id(registry, tag, site.table_oid);
    // Remember the slot for the next call of this call site.
    site.index = index;
    site.generation = generation;
    site.tag_len = tag.len();
    site.tag[..tag.len()].copy_from_slice(tag);
    pg_sys::Datum::from(id)
}

/// `segment_nextval(tag, n)`: `n` IDs of `tag`, increasing.
#[pg_extern(name = "segment_nextval", volatile, parallel_unsafe)]
fn segment_nextval_many(
    tag: Option<&str>,
    n: Option<i32>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> SetOfIterator<'static, i64> {
    let registry = registry_or_raise();
    check_writable("segment_nextval()");
    let tag = tag.unwrap_or_else(|| {
        IdgenError::NullArgument {
            what: "segment tag",
        }
        .raise()
    });
    let n = n.unwrap_or_else(|| {
        IdgenError::NullArgument {
            what: "number of IDs",
        }
        .raise()
    });
    if n < 0 {
        IdgenError::BadCount { n }.raise();
    }
    check_tag(tag.as_bytes());
    let table_oid = current_table_oid(fcinfo);
    // Drawn one per row as the executor asks, not collected first: n may
    // be two billion.
    let tag = tag.as_bytes().to_vec();
    SetOfIterator::new((0..n).map(move |_| next_id(registry, &tag, table_oid).0))
}

/// The schema-qualified name of `id_segment` beside the calling function.
fn table_name(fcinfo: pg_sys::FunctionCallInfo) -> String {
    // SAFETY: fcinfo is the current call's; the lookups read the catalog.
    unsafe {
        let namespace = pg_sys::get_func_namespace((*(*fcinfo).flinfo).fn_oid);
        let name = pg_sys::get_namespace_name(namespace);
        let quoted = pg_sys::quote_identifier(name);
        format!(
            "{}.id_segment",
            std::ffi::CStr::from_ptr(quoted).to_string_lossy()
        )
    }
}

/// `segment_create(tag, start => 1, step => 1000)`: adds the tag's row to
/// `id_segment`, so that its first ID is `start`.
#[pg_extern(volatile, parallel_unsafe)]
fn segment_create(
    tag: Option<&str>,
    start: default!(Option<i64>, 1),
    step: default!(Option<i32>, 1000),
    fcinfo: pg_sys::FunctionCallInfo,
) {
    registry_or_raise();
    let tag = tag.unwrap_or_else(|| {
        IdgenError::NullArgument {
            what: "segment tag",
        }
        .raise()
    });
    let start = start.unwrap_or_else(|| IdgenError::NullArgument { what: "start" }.raise());
    let step = step.unwrap_or_else(|| IdgenError::NullArgument { what: "step" }.raise());
    check_tag(tag.as_bytes());
    if start < 1 {
        IdgenError::BadStart { start }.raise();
    }
    if step <= 0 {
        IdgenError::BadStep {
            step: i64::from(step),
        }
        .raise();
    }
    let insert = format!(
        "INSERT INTO {} (biz_tag, max_id, step, version, updated_at) \
         VALUES ($1, $2, $3, 0, pg_catalog.now()) ON CONFLICT (biz_tag) DO NOTHING",
        table_name(fcinfo)
    );
    let inserted = Spi::connect_mut(|client| {
        client
            .update(
                insert.as_str(),
                None,
                &[tag.into(), (start - 1).into(), step.into()],
            )
            .map(|t| t.len())
    })
    .unwrap_or_else(|e| {
        IdgenError::Internal {
            context: "segment_create",
            message: e.to_string(),
        }
        .raise()
    });
    if inserted == 0 {
        IdgenError::TagExists {
            tag: tag.to_string(),
        }
        .raise();
    }
}

/// `segment_drop(tag)`: removes the tag's row and drops its cached ranges.
/// Its IDs handed out so far stay handed out; a tag created again later
/// starts wherever `segment_create` says.
#[pg_extern(volatile, parallel_unsafe)]
fn segment_drop(tag: Option<&str>, fcinfo: pg_sys::FunctionCallInfo) {
    let registry = registry_or_raise();
    let tag = tag.unwrap_or_else(|| {
        IdgenError::NullArgument {
            what: "segment tag",
        }
        .raise()
    });
    check_tag(tag.as_bytes());
    let delete = format!("DELETE FROM {} WHERE biz_tag = $1", table_name(fcinfo));
    let deleted = Spi::connect_mut(|client| {
        client
            .update(delete.as_str(), None, &[tag.into()])
            .map(|t| t.len())
    })
    .unwrap_or_else(|e| {
        IdgenError::Internal {
            context: "segment_drop",
            message: e.to_string(),
        }
        .raise()
    });
    if deleted == 0 {
        IdgenError::UnknownTag {
            tag: tag.to_string(),
        }
        .raise();
    }
    registry.free(database(), tag.as_bytes());
    RESOLVED.with(|map| map.borrow_mut().remove(tag.as_bytes()));
}
