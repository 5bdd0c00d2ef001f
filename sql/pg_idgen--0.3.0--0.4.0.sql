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

-- Citus (src/segment/citus_source.rs): a worker takes the ranges of a tag
-- without a row of its own from the coordinator, whose answer is
-- segment_citus_range; segment_create is refused on a worker unless forced.
CREATE TABLE id_segment_citus (
    biz_tag     varchar(64) PRIMARY KEY,
    max_id_seen bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE id_segment_citus IS 'pg_idgen: on a Citus worker, the tags drawn from the coordinator, with the largest coordinator max_id taken below';
COMMENT ON COLUMN id_segment_citus.biz_tag IS 'the segment tag';
COMMENT ON COLUMN id_segment_citus.max_id_seen IS 'the largest coordinator max_id this node took IDs below: a coordinator row below it went back';
COMMENT ON COLUMN id_segment_citus.updated_at IS 'when the last refill from the coordinator raised it';
SELECT pg_catalog.pg_extension_config_dump('id_segment_citus', '');
CREATE FUNCTION segment_citus_range(tag text, steps bigint, floor bigint) RETURNS TABLE (
    first bigint, len bigint, asked bigint, step bigint, cas_conflicts bigint,
    sqlstate int, message text, hint text)
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_citus_range_wrapper';
REVOKE ALL ON FUNCTION segment_citus_range(text, bigint, bigint) FROM PUBLIC;
COMMENT ON FUNCTION segment_citus_range(text, bigint, bigint) IS 'pg_idgen: on the Citus coordinator, a range of a tag for a worker''s refill';
DROP FUNCTION segment_create(text, bigint, int);
CREATE FUNCTION segment_create(tag text, start bigint DEFAULT 1, step int DEFAULT 1000,
                               force boolean DEFAULT false) RETURNS void
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_create_wrapper';
REVOKE ALL ON FUNCTION segment_create(text, bigint, int, boolean) FROM PUBLIC;
COMMENT ON FUNCTION segment_create(text, bigint, int, boolean) IS 'pg_idgen: adds a segment tag (its row in id_segment); the first ID handed out is start; refused on a Citus worker unless forced';
