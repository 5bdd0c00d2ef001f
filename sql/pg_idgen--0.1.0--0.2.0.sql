-- pg_idgen 0.1.0 -> 0.2.0: ALTER EXTENSION pg_idgen UPDATE TO '0.2.0'.
-- Every change to the SQL surface after release 0.1.0 goes here, in the
-- order it landed; tests/integration/test_upgrade.py updates a 0.1.0
-- database in place.
\echo Use "ALTER EXTENSION pg_idgen UPDATE TO '0.2.0'" to load this file. \quit

-- max_id never moves back and a row never moves to another tag
-- (src/segment/guard.rs): the refusal that 0.1.0 kept in shared memory
-- only, now durable.
CREATE FUNCTION id_segment_guard() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'id_segment_guard_wrapper';
CREATE TRIGGER id_segment_max_id_never_decreases
    AFTER UPDATE ON id_segment
    FOR EACH ROW WHEN (NEW.max_id < OLD.max_id OR NEW.biz_tag <> OLD.biz_tag)
    EXECUTE FUNCTION id_segment_guard();

-- Machine ids and sequences can exceed int in wide layouts: parse results
-- and snowflake_status report them as bigint. A return type cannot be
-- changed in place, so the functions (and the view over one) are made anew.
DROP VIEW snowflake_status;
DROP FUNCTION snowflake_status();
DROP FUNCTION snowflake_parse(bigint);
DROP FUNCTION snowflake_js_parse(bigint);

CREATE FUNCTION snowflake_parse(id bigint)
    RETURNS TABLE (ts timestamp with time zone, machine_id bigint, sequence bigint)
    STRICT STABLE PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_parse_wrapper';
CREATE FUNCTION snowflake_js_parse(id bigint)
    RETURNS TABLE (ts timestamp with time zone, machine_id bigint, sequence bigint)
    STRICT STABLE PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_js_parse_wrapper';
CREATE FUNCTION snowflake_status() RETURNS TABLE (
    generator text, machine_id bigint, time_bits int, machine_bits int, sequence_bits int,
    epoch timestamp with time zone, last_issued timestamp with time zone, lead_ms bigint,
    persisted_until timestamp with time zone, restarted_above timestamp with time zone,
    clock_backwards bigint, lead_waits bigint, persist_waits bigint, ids_issued bigint,
    keeper_pid int)
    STRICT VOLATILE
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_status_rows_wrapper';

CREATE VIEW snowflake_status AS SELECT * FROM snowflake_status();
COMMENT ON VIEW snowflake_status IS 'pg_idgen: the cluster''s snowflake generators';
REVOKE ALL ON snowflake_status FROM PUBLIC;
REVOKE ALL ON FUNCTION snowflake_status() FROM PUBLIC;
GRANT SELECT ON snowflake_status TO pg_monitor;
GRANT EXECUTE ON FUNCTION snowflake_status() TO pg_monitor;
