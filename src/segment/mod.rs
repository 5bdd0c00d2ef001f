//! Segment (号段) IDs: ranges taken from `id_segment` by a per-database
//! worker, cached in shared memory, handed out by `segment_nextval`.
//!
//! * `chain`: the lock-free range chain (pure).
//! * `policy`: when to refill, where the prefetch mark sits, what range a
//!   row grants (pure).
//! * `registry`: slots and worker entries in shared memory; the locking
//!   protocol.
//! * `distributor`: the version-CAS on `id_segment` (SPI).
//! * `worker`: the per-database refill worker.
//! * `created_here`: tags created by the calling transaction.
//! * `lifecycle`: frees cached ranges when DDL drops their table or database.
//! * `guard`: the trigger that keeps `id_segment.max_id` from moving back.
//! * `attach`: `segment_attach`, a tag whose ranges come from a central
//!   server through postgres_fdw.
//! * `sql`, `status`: the SQL functions and the status view.

pub mod attach;
pub mod chain;
pub mod created_here;
pub mod distributor;
pub mod guard;
pub mod lifecycle;
pub mod policy;
pub mod registry;
pub mod sql;
pub mod status;
pub mod worker;
