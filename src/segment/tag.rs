//! A segment tag as a backend sees it, outside the refill: its name
//! checked, the `id_segment` its SQL function belongs to, whether its row
//! is there (in `id_segment`, or attached through `id_segment_remote`) and
//! whether the calling transaction holds it, and the lock that serialises
//! a tag's DDL.
//!
//! The look-ups read the table's primary-key index directly with the
//! caller's snapshot (or the latest one), as `nextval()` reads a
//! sequence: no privilege on the table is needed, and no lock on it
//! outlives the call.

use crate::catalog::table_name_and_owner;
use crate::errors::{IdgenError, TAG_MAX_BYTES};
use pgrx::pg_sys;

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

/// `row_state` of a tag checked first (`check_tag`) in table `table_oid`
/// (0: the extension is gone, `RowState::NoTable`).
pub fn checked_row_state(table_oid: u32, tag: &[u8]) -> RowState {
    check_tag(tag);
    if table_oid == 0 {
        return RowState::NoTable;
    }
    row_state(table_oid, tag)
}

/// The OID of the `id_segment` table beside the function `fn_oid` (0 if it
/// is gone: the extension was dropped).
fn table_of_function(fn_oid: pg_sys::Oid) -> u32 {
    // SAFETY: both look-ups read the syscache inside the caller's
    // transaction; a dropped function has no namespace (InvalidOid).
    unsafe {
        let namespace = pg_sys::get_func_namespace(fn_oid);
        if namespace == pg_sys::InvalidOid {
            return 0;
        }
        pg_sys::get_relname_relid(c"id_segment".as_ptr(), namespace).to_u32()
    }
}

/// The OID of the `id_segment` beside the SQL function being called.
pub(super) fn current_table_oid(fcinfo: pg_sys::FunctionCallInfo) -> u32 {
    // SAFETY: fcinfo is the current call's.
    table_of_function(unsafe { (*(*fcinfo).flinfo).fn_oid })
}

/// The schema-qualified name of table `table_oid`.
pub fn table_name(table_oid: u32) -> String {
    table_name_and_owner(table_oid)
        .map(|(name, _)| name)
        .unwrap_or_else(|| IdgenError::ExtensionDropped.raise())
}

/// The owner of table `table_oid` (the extension's owner, for
/// `id_segment`): what statements on its side tables run as.
pub fn table_owner(table_oid: u32) -> pg_sys::Oid {
    table_name_and_owner(table_oid)
        .map(|(_, owner)| owner)
        .unwrap_or_else(|| IdgenError::ExtensionDropped.raise())
}

/// Whether the calling transaction can see `tag`'s row, and whether it has
/// written or locked that row itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowState {
    /// The table itself is gone (the extension was dropped).
    NoTable,
    /// No row visible to the caller (never created, dropped, or created by
    /// a transaction that has not committed).
    Missing,
    /// The row is there and the caller's transaction has not touched it.
    Free,
    /// The caller's transaction inserted, updated, deleted or locked the
    /// row: the refill worker would wait for it to end.
    HeldByCaller,
    /// A remote tag whose `id_segment_remote` row the caller's transaction
    /// wrote: it attached the tag (or changed the row) and has not
    /// committed, so the refill worker cannot see where to take ranges.
    AttachedByCaller,
}

/// Looks `tag`'s row up in table `table_oid` with the caller's snapshot,
/// reading the tuple header for who wrote or locked it. A direct index
/// scan: it needs no privilege on the table (like `nextval()`, which needs
/// none on the sequence's heap), and its lock on the table is released at
/// once, so the caller's transaction keeps no lock on `id_segment`.
///
/// A tag with no row in `id_segment` may be a remote one: its registration
/// in `id_segment_remote` (same schema) answers then.
pub fn row_state(table_oid: u32, tag: &[u8]) -> RowState {
    match row_state_in(table_oid, tag, false) {
        RowState::Missing => match remote_table_oid(table_oid) {
            0 => RowState::Missing,
            remote => match row_state_in(remote, tag, false) {
                RowState::NoTable => RowState::Missing,
                RowState::HeldByCaller => RowState::AttachedByCaller,
                state => state,
            },
        },
        state => state,
    }
}

/// The schema-qualified name of `id_segment_remote` beside table
/// `table_oid`, if it is there.
pub fn remote_table_name(table_oid: u32) -> Option<String> {
    match remote_table_oid(table_oid) {
        0 => None,
        oid => table_name_and_owner(oid).map(|(name, _)| name),
    }
}

/// The schema-qualified name of `id_segment_detached` beside table
/// `table_oid`, if it is there (0.3.0's SQL).
pub fn detached_table_name(table_oid: u32) -> Option<String> {
    match sibling_table_oid(table_oid, c"id_segment_detached") {
        0 => None,
        oid => table_name_and_owner(oid).map(|(name, _)| name),
    }
}

/// The schema-qualified name of `id_segment_central` beside table
/// `table_oid`, if it is there (0.4.0's SQL).
pub fn central_table_name(table_oid: u32) -> Option<String> {
    match sibling_table_oid(table_oid, c"id_segment_central") {
        0 => None,
        oid => table_name_and_owner(oid).map(|(name, _)| name),
    }
}

/// The OID of `id_segment_remote` beside table `table_oid` (0: none).
pub(super) fn remote_table_oid(table_oid: u32) -> u32 {
    sibling_table_oid(table_oid, c"id_segment_remote")
}

/// The OID of table `name` in the schema of table `table_oid` (0: none).
fn sibling_table_oid(table_oid: u32, name: &std::ffi::CStr) -> u32 {
    // SAFETY: syscache look-ups inside the caller's transaction; `name` is
    // a NUL-terminated string that outlives the call.
    unsafe {
        let namespace = pg_sys::get_rel_namespace(pg_sys::Oid::from(table_oid));
        if namespace == pg_sys::InvalidOid {
            return 0;
        }
        pg_sys::get_relname_relid(name.as_ptr(), namespace).to_u32()
    }
}

/// Whether `tag` has a row in `id_segment_remote` (`remote = true`) or in
/// `id_segment` beside table `table_oid`, committed by anyone or written by
/// the calling transaction: read with the latest snapshot, not the
/// transaction's, so that after `lock_tag` the row of a transaction that
/// committed meanwhile counts too, at any isolation level.
pub fn tag_exists_latest(table_oid: u32, tag: &[u8], remote: bool) -> bool {
    let relid = match remote {
        true => remote_table_oid(table_oid),
        false => table_oid,
    };
    relid != 0
        && matches!(
            row_state_in(relid, tag, true),
            RowState::Free | RowState::HeldByCaller
        )
}

/// Serialises `segment_create`, `segment_setval` and `segment_attach` of
/// one tag in one database until the end of the calling transaction, so
/// that a tag never gets both a local row and a remote source.
///
/// The lock is an object lock (`LockDatabaseObject`) whose class is
/// `id_segment`'s OID and whose object is a hash of the tag: no SQL
/// statement can take it (advisory locks, which any LOGIN role can hold,
/// have a lock tag of their own), so nobody without the right to run
/// these functions can make them wait. Two tags that hash alike only
/// wait for each other. The wait obeys `lock_timeout`.
pub fn lock_tag(table_oid: u32, tag: &str) {
    // SAFETY: inside the calling transaction, which releases the lock at
    // its end; hash_bytes reads `tag.len()` bytes of `tag`.
    unsafe {
        let hash = hash_bytes(tag.as_ptr(), tag.len() as std::ffi::c_int);
        pg_sys::LockDatabaseObject(
            pg_sys::Oid::from(table_oid),
            pg_sys::Oid::from(hash),
            0,
            pg_sys::ExclusiveLock as pg_sys::LOCKMODE,
        );
    }
}

// common/hashfn.h, which pgrx does not bind: PostgreSQL's own hash of a
// byte string (hashtext's, without the collation).
unsafe extern "C" {
    fn hash_bytes(k: *const u8, keylen: std::ffi::c_int) -> u32;
}

/// `row_state` in one table whose first column (and primary key) is the
/// tag, with the caller's snapshot (or the latest one).
fn row_state_in(table_oid: u32, tag: &[u8], latest: bool) -> RowState {
    // SAFETY: inside a transaction with an active snapshot (a SQL function
    // call), or the latest one taken here.
    let snapshot = unsafe {
        if latest {
            pg_sys::GetLatestSnapshot()
        } else if pg_sys::ActiveSnapshotSet() {
            pg_sys::GetActiveSnapshot()
        } else {
            pg_sys::GetTransactionSnapshot()
        }
    };
    scan_tag(table_oid, tag, snapshot, |next| match next() {
        None => RowState::Missing,
        Some(version) if version.made_by_caller || version.xmax_by_caller => RowState::HeldByCaller,
        Some(_) => RowState::Free,
    })
    .unwrap_or(RowState::NoTable)
}

/// Whether the calling transaction (in a subtransaction still alive) has
/// deleted a row of `tag` in table `table_oid` that another transaction
/// committed: `segment_drop`, `segment_rename` away, or a plain `DELETE`.
/// Read from the row versions themselves (`SnapshotAny`): until the
/// transaction ends, the versions it deleted stay in the table.
///
/// A table whose storage this transaction replaced (`TRUNCATE`, or a
/// rewrite: the versions it deleted are not in the new storage) counts as
/// every committed row removed.
pub fn committed_row_removed_here(table_oid: u32, tag: &[u8]) -> bool {
    if storage_replaced_here(table_oid) {
        return true;
    }
    // PostgreSQL's static snapshot that sees every version; scans only
    // read it.
    let any = &raw mut pg_sys::SnapshotAnyData;
    scan_tag(table_oid, tag, any, |next| {
        // A version another transaction made is committed: the caller
        // could not have deleted it otherwise.
        std::iter::from_fn(next).any(|v| !v.made_by_caller && v.deleted_by_caller)
    })
    .unwrap_or(false)
}

/// Whether the calling transaction moved pg_idgen's committed tables out
/// of the way of table `table_oid` (in a subtransaction still alive): a
/// committed `id_segment` or `id_segment_remote` of its schema renamed,
/// moved (`SET SCHEMA`) or dropped, or `table_oid` itself made by this
/// transaction while pg_idgen is older than it (the extension's functions
/// moved to another schema beside a new table, say). A rollback would
/// bring the committed tables back, with every tag in them.
pub fn tables_replaced_here(table_oid: u32) -> bool {
    // SAFETY: a syscache look-up inside the caller's transaction.
    let namespace = unsafe { pg_sys::get_rel_namespace(pg_sys::Oid::from(table_oid)) };
    if namespace == pg_sys::InvalidOid {
        return false;
    }
    committed_relation_elsewhere(namespace, c"id_segment", table_oid)
        || committed_relation_elsewhere(
            namespace,
            c"id_segment_remote",
            remote_table_oid(table_oid),
        )
        || (created_in_this_transaction(table_oid) && extension_predates_transaction())
}

/// Whether a relation `name` of schema `namespace`, committed before the
/// calling transaction, is not relation `current` (0: none) now.
fn committed_relation_elsewhere(
    namespace: pg_sys::Oid,
    name: &std::ffi::CStr,
    current: u32,
) -> bool {
    let keys = [
        (
            pg_sys::Anum_pg_class_relname,
            pg_sys::F_NAMEEQ,
            pg_sys::Datum::from(name.as_ptr()),
        ),
        (
            pg_sys::Anum_pg_class_relnamespace,
            pg_sys::F_OIDEQ,
            pg_sys::Datum::from(namespace),
        ),
    ];
    let mut elsewhere = false;
    before_this_transaction(
        pg_sys::RelationRelationId,
        pg_sys::ClassNameNspIndexId,
        &keys,
        |tuple| {
            // SAFETY: a pg_class tuple of the scan, pinned for the call.
            let class =
                unsafe { &*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_class>(tuple) };
            elsewhere |= class.oid.to_u32() != current;
        },
    );
    elsewhere
}

/// Whether pg_idgen was created before the calling transaction (and not
/// by it, nor dropped and created again in it).
fn extension_predates_transaction() -> bool {
    let keys = [(
        pg_sys::Anum_pg_extension_extname,
        pg_sys::F_NAMEEQ,
        pg_sys::Datum::from(c"pg_idgen".as_ptr()),
    )];
    let mut found = false;
    before_this_transaction(
        pg_sys::ExtensionRelationId,
        pg_sys::ExtensionNameIndexId,
        &keys,
        |_| found = true,
    );
    found
}

/// Whether the calling transaction created table `table_oid` (in a
/// subtransaction still alive).
fn created_in_this_transaction(table_oid: u32) -> bool {
    // 0: InvalidSubTransactionId (not bound by pgrx).
    with_relcache_entry(table_oid, |entry| entry.rd_createSubid != 0).unwrap_or(false)
}

/// `read` of table `table_oid`'s relcache entry, opened for the call
/// (`None`: no such table).
fn with_relcache_entry<R>(
    table_oid: u32,
    read: impl FnOnce(&pg_sys::RelationData) -> R,
) -> Option<R> {
    // SAFETY: inside a transaction; the relation opened here is closed
    // below, and its relcache entry is only read in between.
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let relation = pg_sys::try_table_open(pg_sys::Oid::from(table_oid), lock);
        if relation.is_null() {
            return None;
        }
        let result = read(&*relation);
        pg_sys::table_close(relation, lock);
        Some(result)
    }
}

/// Scans catalog `catalog` by its index `index` with `keys` (column,
/// equality function, value), as of command 0 of the calling transaction:
/// none of its own changes are seen (rows it made are not there, rows it
/// deleted or updated still are), and what other transactions committed
/// is seen as of now. `each` gets every row found.
fn before_this_transaction(
    catalog: pg_sys::Oid,
    index: u32,
    keys: &[(u32, u32, pg_sys::Datum)],
    mut each: impl FnMut(pg_sys::HeapTuple),
) {
    // SAFETY: inside a transaction. The snapshot is a registered copy of
    // the latest one, private to this function, so setting its command ID
    // touches nobody else's; it is unregistered below, and the catalog is
    // closed after its scan ends. An ERROR in between is cleaned up by the
    // transaction's abort.
    unsafe {
        let before_us = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        (*before_us).curcid = pg_sys::FirstCommandId;
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let relation = pg_sys::table_open(catalog, lock);
        let mut scan_keys: Vec<pg_sys::ScanKeyData> = Vec::with_capacity(keys.len());
        for &(column, function, value) in keys {
            let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
            pg_sys::ScanKeyInit(
                &mut key,
                column as pg_sys::AttrNumber,
                pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
                pg_sys::Oid::from(function),
                value,
            );
            scan_keys.push(key);
        }
        let scan = pg_sys::systable_beginscan(
            relation,
            pg_sys::Oid::from(index),
            true,
            before_us,
            scan_keys.len() as i32,
            scan_keys.as_mut_ptr(),
        );
        loop {
            let tuple = pg_sys::systable_getnext(scan);
            if tuple.is_null() {
                break;
            }
            each(tuple);
        }
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(relation, lock);
        pg_sys::UnregisterSnapshot(before_us);
    }
}

/// Whether table `table_oid`, which the calling transaction did not
/// create, got new storage in it (in a subtransaction still alive):
/// `TRUNCATE`, or a rewrite.
fn storage_replaced_here(table_oid: u32) -> bool {
    with_relcache_entry(table_oid, |entry| {
        #[cfg(feature = "pg15")]
        let first_new_storage = entry.rd_firstRelfilenodeSubid;
        #[cfg(not(feature = "pg15"))]
        let first_new_storage = entry.rd_firstRelfilelocatorSubid;
        // 0: InvalidSubTransactionId (not bound by pgrx).
        entry.rd_createSubid == 0 && first_new_storage != 0
    })
    .unwrap_or(false)
}

/// What `scan_tag` tells of a row version: whether the calling
/// transaction (in a subtransaction still alive) made it, whether it
/// deleted, updated or locked it (a plain xmax, not a MultiXact's), and
/// whether it deleted or updated it.
struct Version {
    made_by_caller: bool,
    xmax_by_caller: bool,
    deleted_by_caller: bool,
}

/// `Version` of a row version's header.
///
/// # Safety
/// `header` is a valid tuple's, pinned for the call.
unsafe fn version_of(header: &pg_sys::HeapTupleHeaderData) -> Version {
    // SAFETY: plain queries of the backend's transaction state; the
    // header is valid (the caller's promise).
    unsafe {
        let infomask = u32::from(header.t_infomask);
        Version {
            made_by_caller: pg_sys::TransactionIdIsCurrentTransactionId(
                header.t_choice.t_heap.t_xmin,
            ),
            xmax_by_caller: infomask & pg_sys::HEAP_XMAX_INVALID == 0
                && infomask & pg_sys::HEAP_XMAX_IS_MULTI == 0
                && pg_sys::TransactionIdIsCurrentTransactionId(header.t_choice.t_heap.t_xmax),
            deleted_by_caller: deleted_by_caller(header),
        }
    }
}

/// Whether the calling transaction (in a subtransaction still alive)
/// deleted or updated this row version, rather than only locked it.
fn deleted_by_caller(header: &pg_sys::HeapTupleHeaderData) -> bool {
    let infomask = u32::from(header.t_infomask);
    let lock_only = infomask & pg_sys::HEAP_XMAX_LOCK_ONLY != 0
        || infomask & (pg_sys::HEAP_XMAX_IS_MULTI | pg_sys::HEAP_LOCK_MASK)
            == pg_sys::HEAP_XMAX_EXCL_LOCK;
    if infomask & pg_sys::HEAP_XMAX_INVALID != 0 || lock_only {
        return false;
    }
    // SAFETY: the header is a valid tuple's, pinned by the scan; for a
    // MultiXact, HeapTupleGetUpdateXid reads its updating member.
    unsafe {
        let xmax = if infomask & pg_sys::HEAP_XMAX_IS_MULTI != 0 {
            pg_sys::HeapTupleGetUpdateXid((header as *const pg_sys::HeapTupleHeaderData).cast_mut())
        } else {
            header.t_choice.t_heap.t_xmax
        };
        pg_sys::TransactionIdIsCurrentTransactionId(xmax)
    }
}

/// Scans the primary key of table `table_oid` (first column the tag) for
/// `tag` with `snapshot`; `body` gets a function that returns the next
/// row version's `Version`. `None`: no such table.
fn scan_tag<R>(
    table_oid: u32,
    tag: &[u8],
    snapshot: pg_sys::Snapshot,
    body: impl FnOnce(&mut dyn FnMut() -> Option<Version>) -> R,
) -> Option<R> {
    let tag = std::ffi::CString::new(tag).unwrap_or_default();
    // SAFETY: inside a transaction; every open/begin is matched by its
    // close/end below, and an ERROR in between is cleaned up by the
    // transaction's abort. The scan keeps the buffer of the tuple it
    // returned pinned until its next call, and `body` ends before the scan
    // does.
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let relation = pg_sys::try_table_open(pg_sys::Oid::from(table_oid), lock);
        if relation.is_null() {
            return None;
        }
        #[cfg(not(feature = "pg18"))]
        let index = pg_sys::RelationGetPrimaryKeyIndex(relation);
        #[cfg(feature = "pg18")]
        let index = pg_sys::RelationGetPrimaryKeyIndex(relation, false);
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(
            &mut key,
            1, // biz_tag
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::Oid::from(pg_sys::F_TEXTEQ),
            pg_sys::Datum::from(pg_sys::cstring_to_text(tag.as_ptr())),
        );
        let scan = pg_sys::systable_beginscan(
            relation,
            index,
            index != pg_sys::InvalidOid,
            snapshot,
            1,
            &mut key,
        );
        let mut next = || {
            pg_sys::systable_getnext(scan)
                .as_ref()
                .map(|tuple| version_of(&*tuple.t_data))
        };
        let result = body(&mut next);
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(relation, lock);
        Some(result)
    }
}
