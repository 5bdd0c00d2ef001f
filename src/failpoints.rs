//! Test-only failpoints: named places where a test can pause a process or
//! make it fail, so that an unlucky interleaving happens every run instead
//! of by luck.
//!
//! Built only with the cargo feature `failpoints` (the test suite installs
//! such a build); without it `failpoint()` is an empty inline function.
//!
//! A test arms point `name` by writing the file
//! `$PGDATA/pg_idgen_failpoints/<name>`:
//! * `pause`: the process writes its pid to `<name>.reached` and sleeps,
//!   in 10 ms naps, for as long as `<name>` exists;
//! * `error`: the process raises an `ERROR` there.
//!
//! Points: `worker-start` (a refill worker, before it connects to its
//! database), `worker-before-refill` (after the worker read a slot's
//! identity and decided to refill it, before its transaction),
//! `worker-remote-before-commit` (a remote refill's CAS done on the central
//! server, its row lock held, before the commit: from the central server's
//! side, a link that froze there), `worker-before-publish` (after the
//! refill committed, before the range is published to shared memory),
//! `refill-before-cas` (a refill's version-CAS on the local `id_segment`
//! has read the row and not yet sent its UPDATE),
//! `worker-before-give-back` (a worker told to stop has closed a tag's
//! chain and not yet given its untaken IDs back to the row),
//! `lease-before-renew` (the lease keeper, a renewal due, before it sends
//! it: its row's version stays as it is), `lease-before-cas` (the lease
//! keeper, in a claim's or renewal's transaction, has read the central
//! clock and not yet sent its CAS), `lease-after-read` (the lease
//! keeper, looking for an id to claim, has read the table and noted each
//! row's version, and decides nothing yet: it sees no later version).
//!
//! One more is read once per process, not at a point: `backend-block-size`
//! holds a number, the size of every block a backend takes of a hot tag
//! (`segment/backend_block.rs`) whatever the contention, so that a test
//! can make a backend hold a block of IDs and then end it.

#[cfg(feature = "failpoints")]
pub fn failpoint(name: &str) {
    use crate::errors::IdgenError;
    use pgrx::pg_sys;
    use std::path::PathBuf;
    // SAFETY: DataDir is set at start and never changes.
    let data_dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) };
    let dir = PathBuf::from(data_dir.to_string_lossy().as_ref()).join("pg_idgen_failpoints");
    let armed = dir.join(name);
    let Ok(action) = std::fs::read_to_string(&armed) else {
        return;
    };
    match action.trim() {
        "pause" => {
            // SAFETY: MyProcPid is set in every process.
            let pid = unsafe { pg_sys::MyProcPid };
            let _ = std::fs::write(dir.join(format!("{name}.reached")), pid.to_string());
            while armed.exists() {
                std::thread::sleep(std::time::Duration::from_millis(10));
                pgrx::check_for_interrupts!();
            }
        }
        "error" => IdgenError::Internal {
            context: "failpoint",
            message: format!("failpoint \"{name}\" raised an error"),
        }
        .raise(),
        _ => {}
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn failpoint(_name: &str) {}

/// The block size `backend-block-size` forces (read at the first call in
/// each process: armed before a session connects, it holds for it).
#[cfg(feature = "failpoints")]
pub fn forced_block_size() -> Option<u64> {
    use once_cell::sync::OnceCell;
    use pgrx::pg_sys;
    static FORCED: OnceCell<Option<u64>> = OnceCell::new();
    *FORCED.get_or_init(|| {
        // SAFETY: DataDir is set at start and never changes.
        let data_dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) };
        let file = std::path::PathBuf::from(data_dir.to_string_lossy().as_ref())
            .join("pg_idgen_failpoints")
            .join("backend-block-size");
        std::fs::read_to_string(file).ok()?.trim().parse().ok()
    })
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn forced_block_size() -> Option<u64> {
    None
}
