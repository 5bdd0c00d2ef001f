-- pg_idgen 0.3.0 -> 0.4.0: ALTER EXTENSION pg_idgen UPDATE TO '0.4.0'.
-- Every change to the SQL surface after release 0.3.0 goes here, in the
-- order it landed; tests/integration/test_upgrade.py updates a 0.1.0
-- database to 0.2.0, 0.3.0 and then 0.4.0 in place.
\echo Use "ALTER EXTENSION pg_idgen UPDATE TO '0.4.0'" to load this file. \quit

-- Drawing snowflake IDs needs a grant, as nextval() on a sequence does: a
-- role nobody gave it can no longer hold the cluster's generator at its
-- lead (finalize.sql says more). The roles that drew them through PUBLIC
-- need GRANT EXECUTE; the update says so.
REVOKE ALL ON FUNCTION snowflake_nextval() FROM PUBLIC;
REVOKE ALL ON FUNCTION snowflake_js_nextval() FROM PUBLIC;
DO $$
BEGIN
    RAISE WARNING 'pg_idgen 0.4.0: snowflake_nextval() and snowflake_js_nextval() now need EXECUTE, as nextval() needs USAGE on its sequence'
        USING HINT = 'Grant it to the roles that draw snowflake IDs: GRANT EXECUTE ON FUNCTION snowflake_nextval(), snowflake_js_nextval() TO <role>;';
END
$$;
-- Only the event trigger's function (SECURITY DEFINER) calls it.
REVOKE ALL ON FUNCTION segment_defaults_check(oid) FROM PUBLIC;

-- The fence keeps what it records by the central server's identity (issue
-- 35; src/segment/fence.rs): a row per central table and WAL timeline in
-- id_segment_central, with the WAL position and the central clock of the
-- latest refill from it; a tag keeps only which one it last refilled from.
-- 0.3.0 kept a copy of the position in every tag's row: each identity's
-- latest one (by the central clock) becomes its row, every tag keeps its
-- identity, and the copies go. A record without OIDs (a central view that
-- answered none) reads as OID 0, as the shards read such a view now; one
-- without a position is no record, as before.
CREATE TABLE id_segment_central (
    system_identifier bigint      NOT NULL,
    database_oid      bigint      NOT NULL,
    table_oid         bigint      NOT NULL,
    timeline          bigint      NOT NULL,
    wal_lsn           pg_lsn      NOT NULL,
    clock             timestamptz NOT NULL,
    PRIMARY KEY (system_identifier, database_oid, table_oid, timeline)
);
COMMENT ON TABLE id_segment_central IS 'pg_idgen: each central id_segment and WAL timeline this database refilled from, and where the central server was at the latest refill';
SELECT pg_catalog.pg_extension_config_dump('id_segment_central', '');
INSERT INTO id_segment_central (system_identifier, database_oid, table_oid, timeline, wal_lsn, clock)
SELECT DISTINCT ON (1, 2, 3, 4)
       r.central_system_identifier, coalesce(r.central_database_oid, 0), coalesce(r.central_table_oid, 0),
       r.central_timeline, r.central_wal_lsn, r.central_clock
  FROM (SELECT central_system_identifier, central_database_oid, central_table_oid, central_timeline,
               central_wal_lsn, central_clock FROM id_segment_remote
        UNION ALL
        SELECT central_system_identifier, central_database_oid, central_table_oid, central_timeline,
               central_wal_lsn, central_clock FROM id_segment_detached) r
 WHERE r.central_system_identifier IS NOT NULL AND r.central_timeline IS NOT NULL
   AND r.central_wal_lsn IS NOT NULL AND r.central_clock IS NOT NULL
 ORDER BY 1, 2, 3, 4, r.central_clock DESC, r.central_wal_lsn DESC;
UPDATE id_segment_remote
   SET (central_system_identifier, central_database_oid, central_table_oid, central_timeline) =
       (SELECT central_system_identifier, coalesce(central_database_oid, 0), coalesce(central_table_oid, 0),
               central_timeline
         WHERE central_system_identifier IS NOT NULL AND central_timeline IS NOT NULL
           AND central_wal_lsn IS NOT NULL AND central_clock IS NOT NULL);
UPDATE id_segment_detached
   SET (central_system_identifier, central_database_oid, central_table_oid, central_timeline) =
       (SELECT central_system_identifier, coalesce(central_database_oid, 0), coalesce(central_table_oid, 0),
               central_timeline
         WHERE central_system_identifier IS NOT NULL AND central_timeline IS NOT NULL
           AND central_wal_lsn IS NOT NULL AND central_clock IS NOT NULL);
ALTER TABLE id_segment_remote DROP COLUMN central_wal_lsn, DROP COLUMN central_clock;
ALTER TABLE id_segment_detached DROP COLUMN central_wal_lsn, DROP COLUMN central_clock;
COMMENT ON COLUMN id_segment_remote.central_system_identifier IS 'the central server''s system identifier at the last refill (with the three central_ columns after it: the id_segment_central row of that refill)';
COMMENT ON COLUMN id_segment_detached.central_system_identifier IS 'the central server''s system identifier at the tag''s last refill here (with the three central_ columns after it: the id_segment_central row of that refill)';
COMMENT ON COLUMN id_segment_central.system_identifier IS 'the central server''s system identifier';
COMMENT ON COLUMN id_segment_central.database_oid IS 'the OID of its database';
COMMENT ON COLUMN id_segment_central.table_oid IS 'the OID of its id_segment';
COMMENT ON COLUMN id_segment_central.timeline IS 'its WAL timeline';
COMMENT ON COLUMN id_segment_central.wal_lsn IS 'its WAL position at the latest refill from it: its cluster''s WAL on this timeline never goes back below it';
COMMENT ON COLUMN id_segment_central.clock IS 'its clock then: a segment_central_accept() there after it lifts a refusal this row shows';
