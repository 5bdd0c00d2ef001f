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
    keeper_pid int, lease_machine_id bigint, lease_until timestamp with time zone,
    lease_server text, lease_problem text)
    STRICT VOLATILE
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_status_rows_wrapper';

CREATE VIEW snowflake_status AS SELECT * FROM snowflake_status();
COMMENT ON VIEW snowflake_status IS 'pg_idgen: the cluster''s snowflake generators';
REVOKE ALL ON snowflake_status FROM PUBLIC;
REVOKE ALL ON FUNCTION snowflake_status() FROM PUBLIC;
GRANT SELECT ON snowflake_status TO pg_monitor;
GRANT EXECUTE ON FUNCTION snowflake_status() TO pg_monitor;

-- Many servers, one ID space: a tag's ranges can come from a central
-- server's id_segment through postgres_fdw (segment_attach, src/segment/attach.rs).
CREATE TABLE id_segment_remote (
    biz_tag       varchar(64) PRIMARY KEY,
    server        name        NOT NULL,
    foreign_table regclass    NOT NULL,
    attached_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE id_segment_remote IS 'pg_idgen: segment tags whose ranges come from a central server through postgres_fdw';
SELECT pg_catalog.pg_extension_config_dump('id_segment_remote', '');

CREATE FUNCTION segment_attach(tag text, server text, remote_schema text DEFAULT 'public',
                               remote_table text DEFAULT 'id_segment') RETURNS void
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_attach_wrapper';
REVOKE ALL ON FUNCTION segment_attach(text, text, text, text) FROM PUBLIC;

-- segment_status gains the source of each tag and the fallback count: the
-- function's result type changes, so it and the view are made anew.
DROP VIEW segment_status;
DROP FUNCTION segment_status();
CREATE FUNCTION segment_status() RETURNS TABLE (
    database text, tag text, range_first bigint, range_last bigint, next_id bigint,
    remaining_in_range bigint, pct_used double precision, ranges_ahead bigint, ids_ahead bigint,
    safe_distance bigint, step bigint, steps_per_refill bigint, ids_per_refill bigint,
    refills bigint, cas_conflicts bigint, refill_failures bigint, waits bigint,
    wait_ms double precision, fallback_ids bigint, ids_taken bigint, ids_per_second bigint,
    last_refill timestamp with time zone, last_refill_ms double precision, last_error text,
    worker_pid int)
    STRICT VOLATILE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_status_rows_wrapper';
CREATE VIEW segment_status AS
    SELECT s.database, s.tag,
           CASE WHEN s.database OPERATOR(pg_catalog.<>) pg_catalog.current_database() THEN NULL
                ELSE coalesce(r.server::text, 'local') END AS source,
           s.range_first, s.range_last, s.next_id, s.remaining_in_range, s.pct_used,
           s.ranges_ahead, s.ids_ahead, s.safe_distance, s.step, s.steps_per_refill,
           s.ids_per_refill, s.refills, s.cas_conflicts, s.refill_failures, s.waits, s.wait_ms,
           s.fallback_ids, s.ids_taken, s.ids_per_second, s.last_refill, s.last_refill_ms,
           s.last_error, s.worker_pid
      FROM segment_status() s
      LEFT JOIN id_segment_remote r
        ON r.biz_tag::text OPERATOR(pg_catalog.=) s.tag
       AND s.database OPERATOR(pg_catalog.=) pg_catalog.current_database();
COMMENT ON VIEW segment_status IS 'pg_idgen: one row per (database, tag) cached in shared memory';
REVOKE ALL ON segment_status FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_status() FROM PUBLIC;
GRANT SELECT ON segment_status TO pg_monitor;
GRANT EXECUTE ON FUNCTION segment_status() TO pg_monitor;

-- Applications as clients: contiguous blocks of IDs in one round trip
-- (src/segment/sql.rs), and base62 short codes (src/base62.rs).
CREATE FUNCTION segment_reserve(tag text, n int) RETURNS TABLE (first bigint, last bigint)
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_reserve_wrapper';
REVOKE ALL ON FUNCTION segment_reserve(text, int) FROM PUBLIC;
CREATE FUNCTION idgen_base62(id bigint) RETURNS text
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'idgen_base62_wrapper';
CREATE FUNCTION idgen_base62_decode(code text) RETURNS bigint
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'idgen_base62_decode_wrapper';
