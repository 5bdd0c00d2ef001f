//! Segment IDs and logical replication. Logical replication carries
//! `id_segment` (native sequences it does not), so a subscriber's rows
//! follow its publisher's `max_id` — which makes a switchover continue
//! above the publisher with no step, if two rules hold:
//!
//! * **A node hands out no range of a row a subscription still writes.**
//!   While an enabled subscription of this database writes `id_segment`,
//!   its rows are the publisher's: a range taken here can overlap the ones
//!   the publisher takes next (a smoke test on a blue/green target, or both
//!   nodes of a two-way replication drawing one tag). The refill is refused
//!   (`RefillProblem::RowReplicated`, 55000) with the way out: disable the
//!   subscription at the switchover, or attach the tag to one central
//!   server. Checked at every refill (a catalog read; refills are rare).
//! * **A replicated change never lowers `max_id`.** The guard triggers
//!   fire in the apply worker too (`ENABLE ALWAYS`, `sql/finalize.sql`): a
//!   lowering is refused with an ERROR in the subscriber's log, never
//!   applied. And a clean stop gives nothing back to a published
//!   `id_segment` (`distributor::give_back`): the give-back lowers the row
//!   on purpose, which would reach the subscribers.
//!
//! Both read PostgreSQL's catalogs by OID, in the caller's transaction.

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// The name of an enabled subscription of this database that writes table
/// `table_oid` (`id_segment`), if there is one.
pub fn subscription_writing(
    client: &SpiClient<'_>,
    table_oid: u32,
) -> Result<Option<String>, pgrx::spi::Error> {
    let rows = client.select(
        "SELECT s.subname::pg_catalog.text FROM pg_catalog.pg_subscription_rel r \
           JOIN pg_catalog.pg_subscription s ON s.oid OPERATOR(pg_catalog.=) r.srsubid \
          WHERE r.srrelid OPERATOR(pg_catalog.=) $1 AND s.subenabled \
          ORDER BY 1 LIMIT 1",
        Some(1),
        &[pg_sys::Oid::from(table_oid).into()],
    )?;
    match rows.is_empty() {
        true => Ok(None),
        false => rows.first().get::<String>(1),
    }
}

/// Whether table `table_oid` is in a publication of this database: by
/// name, through its schema, or `FOR ALL TABLES`.
pub fn is_published(client: &SpiClient<'_>, table_oid: u32) -> Result<bool, pgrx::spi::Error> {
    let published = client.select(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_publication WHERE puballtables) \
             OR EXISTS (SELECT FROM pg_catalog.pg_publication_rel \
                         WHERE prrelid OPERATOR(pg_catalog.=) $1) \
             OR EXISTS (SELECT FROM pg_catalog.pg_publication_namespace n \
                          JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.pnnspid \
                         WHERE c.oid OPERATOR(pg_catalog.=) $1)",
        Some(1),
        &[pg_sys::Oid::from(table_oid).into()],
    )?;
    Ok(published.first().get::<bool>(1)?.unwrap_or(false))
}
