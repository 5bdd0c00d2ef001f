//! Segment (号段) IDs: ranges taken from `id_segment` by a per-database
//! worker, cached in shared memory, handed out by `segment_nextval`.
//!
//! Pure (no PostgreSQL):
//! * `chain`: the lock-free range chain.
//! * `backend_block`: a backend's own block of a hot tag's IDs, sized by
//!   contention.
//! * `policy`: when to refill, where the prefetch mark sits, what range a
//!   row grants.
//! * `fence`: whether a central server is still where a shard left it.
//! * `slot_share`: which slot a new tag gets: the databases' fair share.
//!
//! PostgreSQL glue:
//! * `registry`: slots and worker entries in shared memory; the locking
//!   protocol.
//! * `distributor`: the version-CAS on `id_segment` (SPI) — the refill.
//! * `worker`: the per-database refill worker.
//! * `tag`: a tag as a backend sees it: its row, its table, its DDL lock.
//! * `citus_source`: on a Citus worker, ranges from the coordinator's
//!   `id_segment`; on the coordinator, the answer to such a refill.
//! * `citus_catch_up`: on the coordinator, its rows raised above what the
//!   cluster holds before the first refill on a new timeline.
//! * `adopt`: `segment_adopt`, a live column switched to a tag;
//!   `rename`: `segment_rename`, a tag and its defaults renamed.
//! * `ddl`: `segment_create`, `segment_drop`, `segment_attach` (a tag
//!   whose ranges come from a central server through postgres_fdw).
//! * `created_here`: tags created by the calling transaction.
//! * `default_expr`: the constant tags a column default passes to
//!   `segment_nextval`, read from its stored expression tree.
//! * `default_check`: the columns whose defaults use a tag (`segment_drop`
//!   refuses to drop it), and the WARNING for a default naming a tag that
//!   does not exist.
//! * `replication`: what logical replication of `id_segment` allows: no
//!   range of a row a subscription writes, no give-back to a published
//!   table.
//! * `lifecycle`: frees cached ranges when DDL drops their table or database.
//! * `guard`: the trigger that keeps `id_segment.max_id` from moving back.
//! * `sql`, `status`: the SQL functions that hand out IDs, and the status
//!   view.

pub mod adopt;
pub mod backend_block;
pub mod chain;
pub mod citus_catch_up;
pub mod citus_source;
pub mod created_here;
pub mod ddl;
pub mod default_check;
pub mod default_expr;
pub mod distributor;
pub mod fence;
pub mod guard;
pub mod lifecycle;
pub mod policy;
pub mod registry;
pub mod rename;
pub mod replication;
pub mod slot_share;
pub mod sql;
pub mod status;
pub mod tag;
pub mod worker;
