-- pg_idgen 0.2.0 -> 0.3.0: ALTER EXTENSION pg_idgen UPDATE TO '0.3.0'.
-- Every change to the SQL surface after release 0.2.0 goes here, in the
-- order it landed; tests/integration/test_upgrade.py updates a 0.1.0
-- database to 0.2.0 and then to 0.3.0 in place.
\echo Use "ALTER EXTENSION pg_idgen UPDATE TO '0.3.0'" to load this file. \quit

-- The snowflake high-water mark, in the WAL (src/snowflake/wal_mark.rs):
-- in the database named by pg_idgen.snowflake_database, the snowflake
-- keeper commits here, before any snowflake ID up to it is issued, the
-- largest ID each generator may have handed out. A promoted standby, a
-- point-in-time restore, a pg_upgrade'd cluster or a restored dump starts
-- above it. One row; unused in the other databases.
CREATE TABLE snowflake_high_water (
    only_row           bool        PRIMARY KEY DEFAULT true
                                   CONSTRAINT snowflake_high_water_one_row CHECK (only_row),
    epoch_ms           bigint      NOT NULL,
    time_bits          int         NOT NULL,
    machine_bits       int         NOT NULL,
    sequence_bits      int         NOT NULL,
    default_high_id    bigint      NOT NULL,
    javascript_high_id bigint      NOT NULL,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE snowflake_high_water IS 'pg_idgen: no snowflake ID of this cluster is above these (in pg_idgen.snowflake_database; written by the snowflake keeper)';
SELECT pg_catalog.pg_extension_config_dump('snowflake_high_water', '');

-- Never deleted or lowered (src/snowflake/guard.rs).
CREATE FUNCTION snowflake_high_water_guard() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_high_water_guard_wrapper';
CREATE TRIGGER snowflake_high_water_never_lost
    AFTER DELETE ON snowflake_high_water
    FOR EACH ROW EXECUTE FUNCTION snowflake_high_water_guard();
CREATE TRIGGER snowflake_high_water_never_truncated
    AFTER TRUNCATE ON snowflake_high_water
    FOR EACH STATEMENT EXECUTE FUNCTION snowflake_high_water_guard();
CREATE TRIGGER snowflake_high_water_never_decreases
    AFTER UPDATE ON snowflake_high_water
    FOR EACH ROW WHEN (NEW.default_high_id < OLD.default_high_id
                       OR NEW.javascript_high_id < OLD.javascript_high_id)
    EXECUTE FUNCTION snowflake_high_water_guard();

-- snowflake_status shows the WAL-logged mark and why it cannot be written;
-- a return type cannot be changed in place, so the function (and the view
-- over it) are made anew.
DROP VIEW snowflake_status;
DROP FUNCTION snowflake_status();
CREATE FUNCTION snowflake_status() RETURNS TABLE (
    generator text, machine_id bigint, time_bits int, machine_bits int, sequence_bits int,
    epoch timestamp with time zone, last_issued timestamp with time zone, lead_ms bigint,
    persisted_until timestamp with time zone, restarted_above timestamp with time zone,
    clock_backwards bigint, lead_waits bigint, persist_waits bigint, ids_issued bigint,
    keeper_pid int, lease_machine_id bigint, lease_until timestamp with time zone,
    lease_server text, lease_problem text, wal_mark timestamp with time zone,
    wal_mark_problem text)
    STRICT VOLATILE
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_status_rows_wrapper';

CREATE VIEW snowflake_status AS SELECT * FROM snowflake_status();
COMMENT ON VIEW snowflake_status IS 'pg_idgen: the cluster''s snowflake generators';
REVOKE ALL ON snowflake_status FROM PUBLIC;
REVOKE ALL ON FUNCTION snowflake_status() FROM PUBLIC;
GRANT SELECT ON snowflake_status TO pg_monitor;
GRANT EXECUTE ON FUNCTION snowflake_status() TO pg_monitor;

-- A shard's durable floor for each attached tag: the largest central
-- max_id it has taken IDs below (src/segment/distributor.rs). A central
-- row below it means the central server went back (a restore, a failover
-- to a standby that missed refills, a row lowered or made anew), and the
-- refill is refused. Attachments made before 0.3.0 start with none; their
-- first refill sets it.
ALTER TABLE id_segment_remote ADD COLUMN max_id_seen bigint;

-- Attached tags dropped here, with their mark (see bootstrap.sql).
CREATE TABLE id_segment_detached (
    biz_tag     varchar(64) PRIMARY KEY,
    server      name        NOT NULL,
    max_id_seen bigint      NOT NULL,
    detached_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE id_segment_detached IS 'pg_idgen: attached segment tags dropped here, with the largest central max_id taken below';
SELECT pg_catalog.pg_extension_config_dump('id_segment_detached', '');
