-- pg_idgen 0.3.0 -> 0.4.0: ALTER EXTENSION pg_idgen UPDATE TO '0.4.0'.
-- Every change to the SQL surface after release 0.3.0 goes here, in the
-- order it landed; tests/integration/test_upgrade.py updates a 0.1.0
-- database to 0.2.0, 0.3.0 and then 0.4.0 in place.
\echo Use "ALTER EXTENSION pg_idgen UPDATE TO '0.4.0'" to load this file. \quit

-- segment_create and the two status functions (with their views) are made
-- anew below: an object of the database's own built on them (a view over
-- segment_status, say) would stop the update halfway with a hint that
-- cannot be followed inside it; this says which, and what to do, first.
DO $$
DECLARE
    views oid[] := ARRAY['segment_status'::pg_catalog.regclass, 'snowflake_status'::pg_catalog.regclass]::oid[];
    -- The views, the functions, and the views' row types and their array
    -- types (a function returning SETOF segment_status, a column of type
    -- snowflake_status).
    remade oid[] := views
        || ARRAY['segment_status()'::pg_catalog.regprocedure, 'snowflake_status()'::pg_catalog.regprocedure,
                 'segment_create(text, bigint, int)'::pg_catalog.regprocedure]::oid[]
        || ARRAY(SELECT t.oid FROM pg_catalog.pg_type t WHERE t.typrelid = ANY (views)
                 UNION ALL
                 SELECT t.typarray FROM pg_catalog.pg_type t WHERE t.typrelid = ANY (views));
    dependents text;
BEGIN
    SELECT pg_catalog.string_agg(DISTINCT pg_catalog.pg_describe_object(
               coalesce(r.classid, d.classid), coalesce(r.objid, d.objid), 0), ', ')
      INTO dependents
      FROM pg_catalog.pg_depend d
      LEFT JOIN LATERAL (SELECT 'pg_catalog.pg_class'::pg_catalog.regclass::oid AS classid, w.ev_class AS objid
                           FROM pg_catalog.pg_rewrite w
                          WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND w.oid = d.objid) r ON true
     WHERE d.refobjid = ANY (remade) AND d.deptype = 'n'
       AND NOT coalesce(r.objid, d.objid) = ANY (remade);
    IF dependents IS NOT NULL THEN
        RAISE EXCEPTION 'pg_idgen 0.4.0 makes segment_status, snowflake_status and segment_create anew, and % depends on them', dependents
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'Keep each one''s definition (a view''s from pg_get_viewdef, a function''s from pg_get_functiondef, a policy''s from pg_policies, a column default''s from pg_get_expr of pg_attrdef), drop it, run ALTER EXTENSION pg_idgen UPDATE again and create it from the definition; the update changed nothing.';
    END IF;
END
$$;

-- segment_create and the two status functions (with their views) change
-- shape below and are made anew; the grants a DBA gave on them are kept
-- here and given again at the end of the update, which must not take away
-- what was granted.
CREATE TEMPORARY TABLE pg_idgen_update_grants AS
SELECT kept.kind, kept.target, kept.column_name, kept.owner, acl.grantor, acl.grantee,
       acl.privilege_type, acl.is_grantable, false AS done
FROM (SELECT 'FUNCTION' AS kind, 'segment_create(text, bigint, int, boolean)' AS target,
             NULL::pg_catalog.name AS column_name, p.proowner AS owner, p.proacl AS acl
        FROM pg_catalog.pg_proc p
       WHERE p.oid = 'segment_create(text, bigint, int)'::pg_catalog.regprocedure
      UNION ALL
      SELECT 'FUNCTION', p.proname || '()', NULL, p.proowner, p.proacl
        FROM pg_catalog.pg_proc p
       WHERE p.oid IN ('snowflake_status()'::pg_catalog.regprocedure,
                       'segment_status()'::pg_catalog.regprocedure)
      UNION ALL
      SELECT 'TABLE', c.relname, NULL, c.relowner, c.relacl
        FROM pg_catalog.pg_class c
       WHERE c.oid IN ('snowflake_status'::pg_catalog.regclass,
                       'segment_status'::pg_catalog.regclass)
      UNION ALL
      -- Grants on single columns of the views.
      SELECT 'TABLE', c.relname, a.attname, c.relowner, a.attacl
        FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND a.attacl IS NOT NULL
       WHERE c.oid IN ('snowflake_status'::pg_catalog.regclass,
                       'segment_status'::pg_catalog.regclass)) AS kept,
     pg_catalog.aclexplode(kept.acl) AS acl
WHERE acl.grantee <> kept.owner;

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
-- On the Citus coordinator: each system identifier and WAL timeline on
-- which it raised its rows above what every worker took, before its first
-- refill there (src/segment/citus_catch_up.rs): a failover or a
-- point-in-time recovery starts a timeline without a row. Not dumped: a
-- restored cluster catches up again.
CREATE TABLE id_segment_citus_caught_up (
    system_identifier bigint      NOT NULL,
    timeline          bigint      NOT NULL,
    caught_up_at      timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    raised            int         NOT NULL,
    PRIMARY KEY (system_identifier, timeline)
);
COMMENT ON TABLE id_segment_citus_caught_up IS 'pg_idgen: on the Citus coordinator, each timeline on which its rows were raised above what every worker took';
COMMENT ON COLUMN id_segment_citus_caught_up.system_identifier IS 'this cluster''s system identifier then';
COMMENT ON COLUMN id_segment_citus_caught_up.timeline IS 'its WAL timeline then';
COMMENT ON COLUMN id_segment_citus_caught_up.caught_up_at IS 'when the catch-up ran (the latest, if segment_citus_catch_up() ran again)';
COMMENT ON COLUMN id_segment_citus_caught_up.raised IS 'how many tags'' rows it raised, over every run on this timeline';
CREATE FUNCTION segment_citus_range(tag text, steps bigint, floor bigint) RETURNS TABLE (
    first bigint, len bigint, asked bigint, step bigint, cas_conflicts bigint,
    sqlstate int, message text, hint text)
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_citus_range_wrapper';
REVOKE ALL ON FUNCTION segment_citus_range(text, bigint, bigint) FROM PUBLIC;
COMMENT ON FUNCTION segment_citus_range(text, bigint, bigint) IS 'pg_idgen: on the Citus coordinator, a range of a tag for a worker''s refill';
CREATE FUNCTION segment_citus_catch_up() RETURNS TABLE (biz_tag text, raised_from bigint, raised_to bigint)
    STRICT
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_citus_catch_up_wrapper';
REVOKE ALL ON FUNCTION segment_citus_catch_up() FROM PUBLIC;
COMMENT ON FUNCTION segment_citus_catch_up() IS 'pg_idgen: on the Citus coordinator, raises every tag above what every worker took (after a failover or restore)';
DROP FUNCTION segment_create(text, bigint, int);
CREATE FUNCTION segment_create(tag text, start bigint DEFAULT 1, step int DEFAULT 1000,
                               force boolean DEFAULT false) RETURNS void
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'create_tag_wrapper';
REVOKE ALL ON FUNCTION segment_create(text, bigint, int, boolean) FROM PUBLIC;
COMMENT ON FUNCTION segment_create(text, bigint, int, boolean) IS 'pg_idgen: adds a segment tag (its row in id_segment); the first ID handed out is start; refused on a Citus worker unless forced';

-- snowflake_status: machine_id is NULL while there is none, and
-- machine_problem says why, or that another Citus node has it; a return
-- type cannot be changed in place, so the function (and the view over it)
-- are made anew.
DROP VIEW snowflake_status;
DROP FUNCTION snowflake_status();
CREATE FUNCTION snowflake_status() RETURNS TABLE (
    generator text, machine_id bigint, time_bits int, machine_bits int, sequence_bits int,
    epoch timestamp with time zone, last_issued timestamp with time zone, lead_ms bigint,
    persisted_until timestamp with time zone, restarted_above timestamp with time zone,
    clock_backwards bigint, lead_waits bigint, persist_waits bigint, ids_issued bigint,
    keeper_pid int, lease_machine_id bigint, lease_until timestamp with time zone,
    lease_server text, lease_problem text, wal_mark timestamp with time zone,
    wal_mark_problem text, machine_problem text)
    STRICT VOLATILE
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_status_rows_wrapper';
CREATE VIEW snowflake_status AS SELECT * FROM snowflake_status();
COMMENT ON VIEW snowflake_status IS 'pg_idgen: the cluster''s snowflake generators';
REVOKE ALL ON snowflake_status FROM PUBLIC;
REVOKE ALL ON FUNCTION snowflake_status() FROM PUBLIC;
GRANT SELECT ON snowflake_status TO pg_monitor;
GRANT EXECUTE ON FUNCTION snowflake_status() TO pg_monitor;
COMMENT ON FUNCTION snowflake_status() IS 'pg_idgen: the rows of the snowflake_status view';
COMMENT ON COLUMN snowflake_status.generator IS 'default (snowflake_nextval) or javascript (snowflake_js_nextval)';
COMMENT ON COLUMN snowflake_status.machine_id IS 'this server''s machine id (NULL: none yet, see machine_problem)';
COMMENT ON COLUMN snowflake_status.time_bits IS 'the layout''s time bits';
COMMENT ON COLUMN snowflake_status.machine_bits IS 'the layout''s machine bits';
COMMENT ON COLUMN snowflake_status.sequence_bits IS 'the layout''s sequence bits';
COMMENT ON COLUMN snowflake_status.epoch IS 'the layout''s epoch';
COMMENT ON COLUMN snowflake_status.last_issued IS 'time of the last ID issued';
COMMENT ON COLUMN snowflake_status.lead_ms IS 'how far that is ahead of the wall clock, ms';
COMMENT ON COLUMN snowflake_status.persisted_until IS 'the high-water mark recorded: no ID is issued beyond it';
COMMENT ON COLUMN snowflake_status.restarted_above IS 'the high-water time this run started above (NULL on a first start)';
COMMENT ON COLUMN snowflake_status.clock_backwards IS 'calls that saw the wall clock behind a time seen before';
COMMENT ON COLUMN snowflake_status.lead_waits IS 'calls that waited for the wall clock';
COMMENT ON COLUMN snowflake_status.persist_waits IS 'calls that waited for the keeper to record a new mark';
COMMENT ON COLUMN snowflake_status.ids_issued IS 'IDs issued since start';
COMMENT ON COLUMN snowflake_status.keeper_pid IS 'the snowflake keeper, while it runs';
COMMENT ON COLUMN snowflake_status.lease_machine_id IS 'with machine_id = lease: the id held';
COMMENT ON COLUMN snowflake_status.lease_until IS 'when this server stops issuing unless it renews';
COMMENT ON COLUMN snowflake_status.lease_server IS 'where the lease comes from';
COMMENT ON COLUMN snowflake_status.lease_problem IS 'why there is no lease, or the last renewal problem';
COMMENT ON COLUMN snowflake_status.wal_mark IS 'the mark committed in snowflake_high_water, as the keeper last read or wrote it';
COMMENT ON COLUMN snowflake_status.wal_mark_problem IS 'why the mark cannot be read or committed (NULL when it can)';
COMMENT ON COLUMN snowflake_status.machine_problem IS 'why there is no machine id, or why it cannot be trusted (another Citus node has it); NULL when fine';

-- segment_status: a Citus worker's tags drawn from the coordinator show
-- source 'citus coordinator', step is the configured step, and block_size
-- what a backend takes at once (src/segment/backend_block.rs); a return
-- type cannot be changed in place, so the function and the view are made
-- anew.
DROP VIEW segment_status;
DROP FUNCTION segment_status();
CREATE FUNCTION segment_status() RETURNS TABLE (
    database text, tag text, range_first bigint, range_last bigint, next_id bigint,
    remaining_in_range bigint, pct_used double precision, ranges_ahead bigint, ids_ahead bigint,
    safe_distance bigint, step bigint, steps_per_refill bigint, ids_per_refill bigint, refills bigint,
    cas_conflicts bigint, refill_failures bigint, waits bigint, wait_ms double precision,
    fallback_ids bigint, ids_taken bigint, ids_per_second bigint,
    last_refill timestamp with time zone, last_refill_ms double precision, last_error text,
    worker_pid int, block_size bigint)
    STRICT VOLATILE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_status_rows_wrapper';
COMMENT ON FUNCTION segment_status() IS 'pg_idgen: the rows of the segment_status view that come from shared memory';
-- source: where the tag's ranges come from, 'local', the postgres_fdw
-- server, or 'citus coordinator' (known for the tags of the database the
-- view is read in).
CREATE VIEW segment_status AS
    SELECT s.database, s.tag,
           CASE WHEN s.database OPERATOR(pg_catalog.<>) pg_catalog.current_database() THEN NULL
                WHEN r.server IS NOT NULL THEN r.server::text
                WHEN ct.biz_tag IS NOT NULL AND l.biz_tag IS NULL THEN 'citus coordinator'
                ELSE 'local' END AS source,
           s.range_first, s.range_last, s.next_id, s.remaining_in_range, s.pct_used,
           s.ranges_ahead, s.ids_ahead, s.safe_distance, coalesce(l.step::bigint, s.step) AS step, s.steps_per_refill,
           s.ids_per_refill, s.refills, s.cas_conflicts, s.refill_failures, s.waits, s.wait_ms,
           s.fallback_ids, s.ids_taken, s.ids_per_second, s.last_refill, s.last_refill_ms,
           s.last_error, s.worker_pid, s.block_size
      FROM segment_status() s
      LEFT JOIN id_segment_remote r
        ON r.biz_tag::text OPERATOR(pg_catalog.=) s.tag
       AND s.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
      LEFT JOIN id_segment_citus ct
        ON ct.biz_tag::text OPERATOR(pg_catalog.=) s.tag
       AND s.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
      LEFT JOIN id_segment l
        ON l.biz_tag::text OPERATOR(pg_catalog.=) s.tag
       AND s.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
    UNION ALL
    -- The tags of this database with nothing in shared memory (not drawn
    -- since the server started, or their slot was freed): what the table
    -- says, nothing cached, as pg_sequences lists every sequence.
    SELECT pg_catalog.current_database()::text, t.tag, t.source,
           NULL, NULL, NULL, 0, 0, 0, 0, 0, t.step, NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0,
           NULL, NULL, NULL, NULL, 1
      FROM (SELECT l.biz_tag::text AS tag, 'local'::text AS source, l.step::bigint AS step
              FROM id_segment l
            UNION ALL
            SELECT a.biz_tag::text, a.server::text, NULL::bigint FROM id_segment_remote a
            UNION ALL
            SELECT c.biz_tag::text, 'citus coordinator', NULL::bigint FROM id_segment_citus c
             WHERE NOT EXISTS (SELECT FROM id_segment l2
                                WHERE l2.biz_tag OPERATOR(pg_catalog.=) c.biz_tag)) t
     WHERE NOT EXISTS (SELECT FROM segment_status() c
                        WHERE c.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
                          AND c.tag OPERATOR(pg_catalog.=) t.tag);
COMMENT ON VIEW segment_status IS 'pg_idgen: one row per segment tag: each (database, tag) cached in shared memory, and the idle tags of this database';

REVOKE ALL ON segment_status FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_status() FROM PUBLIC;
GRANT SELECT ON segment_status TO pg_monitor;
GRANT EXECUTE ON FUNCTION segment_status() TO pg_monitor;
COMMENT ON COLUMN segment_status.database IS 'the database of the tag';
COMMENT ON COLUMN segment_status.tag IS 'the segment tag';
COMMENT ON COLUMN segment_status.source IS 'where the tag''s ranges come from: local, the postgres_fdw server it is attached to, or citus coordinator (NULL for other databases'' tags)';
COMMENT ON COLUMN segment_status.range_first IS 'the first ID of the range handed out from now';
COMMENT ON COLUMN segment_status.range_last IS 'the last ID of that range';
COMMENT ON COLUMN segment_status.next_id IS 'the next ID of that range';
COMMENT ON COLUMN segment_status.remaining_in_range IS 'IDs left in that range';
COMMENT ON COLUMN segment_status.pct_used IS 'share of that range handed out, percent';
COMMENT ON COLUMN segment_status.ranges_ahead IS 'ranges fetched ahead';
COMMENT ON COLUMN segment_status.ids_ahead IS 'IDs those ranges hold';
COMMENT ON COLUMN segment_status.safe_distance IS 'IDs the refill worker tries to keep cached ahead of the callers';
COMMENT ON COLUMN segment_status.step IS 'the tag''s step: id_segment.step (for a tag whose ranges come from another server, as its last refill read it)';
COMMENT ON COLUMN segment_status.steps_per_refill IS 'steps the last refill took';
COMMENT ON COLUMN segment_status.ids_per_refill IS 'IDs the last refill took';
COMMENT ON COLUMN segment_status.refills IS 'ranges taken';
COMMENT ON COLUMN segment_status.cas_conflicts IS 'version checks lost to other allocators';
COMMENT ON COLUMN segment_status.refill_failures IS 'failed refills';
COMMENT ON COLUMN segment_status.waits IS 'calls that waited for a refill';
COMMENT ON COLUMN segment_status.wait_ms IS 'their total wait, ms';
COMMENT ON COLUMN segment_status.fallback_ids IS 'snowflake IDs handed out instead (pg_idgen.snowflake_fallback)';
COMMENT ON COLUMN segment_status.ids_taken IS 'IDs handed out (or skipped as a gap) since the slot got the tag';
COMMENT ON COLUMN segment_status.ids_per_second IS 'the refill worker''s estimate of the demand';
COMMENT ON COLUMN segment_status.last_refill IS 'when the last range arrived';
COMMENT ON COLUMN segment_status.last_refill_ms IS 'how long the last refill took, ms';
COMMENT ON COLUMN segment_status.last_error IS 'the last refill error, if a refill failed';
COMMENT ON COLUMN segment_status.worker_pid IS 'the refill worker serving the tag, if running';
COMMENT ON COLUMN segment_status.block_size IS 'IDs a backend took at once last: 1 while no backends contend for the tag, up to 256 while they do (what a backend''s exit can lose is one less)';

-- The guards hold in logical replication's apply workers too: a
-- replicated change never lowers max_id or the snowflake mark
-- (src/segment/replication.rs).
ALTER TABLE id_segment ENABLE ALWAYS TRIGGER id_segment_max_id_never_decreases;
ALTER TABLE snowflake_high_water ENABLE ALWAYS TRIGGER snowflake_high_water_never_lost;
ALTER TABLE snowflake_high_water ENABLE ALWAYS TRIGGER snowflake_high_water_never_truncated;
ALTER TABLE snowflake_high_water ENABLE ALWAYS TRIGGER snowflake_high_water_never_decreases;

-- snowflake_high_water: one row per cluster that issued snowflake IDs, by
-- its system identifier, with the machine id its IDs carry, so that a row
-- that logical replication brings from a publisher is a row of its own,
-- never the subscriber's mark (src/snowflake/wal_mark.rs). The row there is
-- this cluster's; its machine id is not known (NULL counts as any).
ALTER TABLE snowflake_high_water
    ADD COLUMN system_identifier bigint
        DEFAULT (pg_catalog.pg_control_system()).system_identifier,
    ADD COLUMN machine_id bigint,
    ADD COLUMN timeline bigint;
UPDATE snowflake_high_water SET system_identifier = (pg_catalog.pg_control_system()).system_identifier;
ALTER TABLE snowflake_high_water DROP COLUMN only_row;
ALTER TABLE snowflake_high_water ALTER COLUMN system_identifier SET NOT NULL,
    ADD PRIMARY KEY (system_identifier);
COMMENT ON TABLE snowflake_high_water IS 'pg_idgen: no snowflake ID of a cluster is above these, one row per cluster (in pg_idgen.snowflake_database; written by the snowflake keeper)';
COMMENT ON COLUMN snowflake_high_water.system_identifier IS 'the cluster whose IDs the row bounds (its system identifier)';
COMMENT ON COLUMN snowflake_high_water.machine_id IS 'the machine id its IDs carry (NULL: not known)';
COMMENT ON COLUMN snowflake_high_water.timeline IS 'the WAL timeline the row was last committed on (NULL: not known)';
COMMENT ON COLUMN snowflake_high_water.default_high_id IS 'no snowflake_nextval ID of that cluster is above it (-1: none issued)';
COMMENT ON COLUMN snowflake_high_water.javascript_high_id IS 'no snowflake_js_nextval ID of that cluster is above it (-1: none issued)';
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

CREATE FUNCTION segment_adopt_column(tbl oid, col text, tag text DEFAULT NULL, step int DEFAULT 1000)
    RETURNS text
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_adopt_column_wrapper';

-- segment_adopt(tbl, col, tag, step): a live column switched to a tag
-- (src/segment/adopt.rs), with the argument types of the design (regclass,
-- name); the work is segment_adopt_column's.
CREATE FUNCTION segment_adopt(tbl regclass, col name, tag text DEFAULT NULL, step int DEFAULT 1000)
    RETURNS text
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$ SELECT @extschema@.segment_adopt_column(tbl::pg_catalog.oid, col::pg_catalog.text, tag, step) $$;
REVOKE ALL ON FUNCTION segment_adopt(regclass, name, text, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_adopt_column(oid, text, text, int) FROM PUBLIC;
COMMENT ON FUNCTION segment_adopt(regclass, name, text, int) IS 'pg_idgen: switches a live column (serial, identity, a default) to a segment tag above every value it holds, without a failed write';
COMMENT ON FUNCTION segment_adopt_column(oid, text, text, int) IS 'pg_idgen: the work of segment_adopt(regclass, name, text, int)';

-- segment_rename(old, new): a tag renamed with its position and its
-- defaults (src/segment/rename.rs).
CREATE FUNCTION segment_rename(old text, new text) RETURNS void
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_rename_wrapper';
REVOKE ALL ON FUNCTION segment_rename(text, text) FROM PUBLIC;
COMMENT ON FUNCTION segment_rename(text, text) IS 'pg_idgen: renames a segment tag, keeping its position, and makes the defaults that draw from it draw from the new name';

-- The grants kept at the top, given again on the objects made anew, each
-- by its grantor: the owner's first, then a role's that held the grant
-- option WITH GRANT OPTION once that grant is back (as the role, so that
-- REVOKE ... CASCADE of its option still takes them away). One whose
-- grantor has no option left to give it (none expected) is given by the
-- owner: no grant is lost.
DO $$
DECLARE
    g record;
    progress boolean;
    can_give boolean;
    updater text := pg_catalog.quote_ident(current_user);
BEGIN
    FOR last_resort IN 0..1 LOOP
        IF last_resort = 1 THEN
            UPDATE pg_idgen_update_grants SET grantor = owner WHERE NOT done;
        END IF;
        progress := true;
        WHILE progress LOOP
            progress := false;
            FOR g IN SELECT ctid AS row_id, * FROM pg_idgen_update_grants WHERE NOT done LOOP
                IF g.grantor <> g.owner THEN
                    can_give := CASE
                        WHEN g.column_name IS NOT NULL THEN pg_catalog.has_column_privilege(g.grantor, g.target, g.column_name, g.privilege_type || ' WITH GRANT OPTION')
                        WHEN g.kind = 'FUNCTION' THEN pg_catalog.has_function_privilege(g.grantor, g.target, g.privilege_type || ' WITH GRANT OPTION')
                        ELSE pg_catalog.has_table_privilege(g.grantor, g.target, g.privilege_type || ' WITH GRANT OPTION') END;
                    CONTINUE WHEN NOT can_give;
                    EXECUTE 'SET ROLE ' || g.grantor::pg_catalog.regrole::pg_catalog.text;
                END IF;
                EXECUTE pg_catalog.format('GRANT %s%s ON %s %s TO %s%s', g.privilege_type,
                    CASE WHEN g.column_name IS NULL THEN '' ELSE pg_catalog.format(' (%I)', g.column_name) END,
                    g.kind, g.target,
                    CASE g.grantee WHEN 0 THEN 'PUBLIC' ELSE g.grantee::pg_catalog.regrole::pg_catalog.text END,
                    CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
                EXECUTE 'SET ROLE ' || updater;
                UPDATE pg_idgen_update_grants SET done = true WHERE ctid = g.row_id;
                progress := true;
            END LOOP;
        END LOOP;
    END LOOP;
END
$$;
DROP TABLE pg_idgen_update_grants;
