-- pg_idgen finalize: views over the generated functions, and privileges.

-- Created in a server that did not preload the library: every function
-- would fail at its first call; say so now, with the fix.
DO $$
BEGIN
    IF pg_catalog.current_setting('shared_preload_libraries') !~ '(^|[\s,"])pg_idgen([\s,"]|$)' THEN
        RAISE WARNING 'pg_idgen is not in shared_preload_libraries: its functions fail until it is'
            USING HINT = 'Add pg_idgen to shared_preload_libraries in postgresql.conf (e.g. shared_preload_libraries = ''pg_idgen'', keeping the libraries already there) and restart the server; the extension created now needs nothing more.',
                  ERRCODE = '55000';
    END IF;
END
$$;

-- Drawing segment IDs advances id_segment: like nextval() on a sequence, it
-- needs a grant (GRANT EXECUTE ON FUNCTION segment_nextval(text) TO app).
-- Creating and dropping tags also needs write access to id_segment itself.
REVOKE ALL ON FUNCTION segment_nextval(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_nextval(text, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_create(text, bigint, int, boolean) FROM PUBLIC;
-- Citus: what a worker's refill asks the coordinator (src/segment/citus_source.rs).
REVOKE ALL ON FUNCTION segment_citus_range(text, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_citus_catch_up() FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_drop(text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_setval(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_attach(text, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_reserve(text, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_rename(text, text) FROM PUBLIC;
-- Snowflake IDs come from one generator per cluster with a fixed rate
-- (4,096 IDs per ms by default, 256 for the JavaScript-safe one): as
-- nextval() on a sequence, drawing needs a grant, so that a role nobody
-- gave it cannot hold the generator at its lead and make others wait
-- (GRANT EXECUTE ON FUNCTION snowflake_nextval() TO app).
REVOKE ALL ON FUNCTION snowflake_nextval() FROM PUBLIC;
REVOKE ALL ON FUNCTION snowflake_js_nextval() FROM PUBLIC;

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

CREATE VIEW snowflake_status AS SELECT * FROM snowflake_status();
COMMENT ON VIEW snowflake_status IS 'pg_idgen: the cluster''s snowflake generators';
REVOKE ALL ON snowflake_status FROM PUBLIC;
REVOKE ALL ON FUNCTION snowflake_status() FROM PUBLIC;
GRANT SELECT ON snowflake_status TO pg_monitor;
GRANT EXECUTE ON FUNCTION snowflake_status() TO pg_monitor;

-- max_id never moves back and a row never moves to another tag (see
-- src/segment/guard.rs). An AFTER trigger sees the row as it was stored,
-- whatever other triggers did to it; the WHEN clause keeps it off every
-- refill, which only adds.
CREATE TRIGGER id_segment_max_id_never_decreases
    AFTER UPDATE ON id_segment
    FOR EACH ROW WHEN (NEW.max_id < OLD.max_id OR NEW.biz_tag <> OLD.biz_tag)
    EXECUTE FUNCTION id_segment_guard();

-- The WAL-logged snowflake mark is never deleted or lowered (see
-- src/snowflake/guard.rs); the keeper's commits only raise it, so the
-- WHEN clause keeps the UPDATE trigger off them.
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
-- The guards hold in logical replication's apply workers too (which run
-- with session_replication_role = replica): a replicated change never
-- lowers max_id or the mark (src/segment/replication.rs).
ALTER TABLE id_segment ENABLE ALWAYS TRIGGER id_segment_max_id_never_decreases;
ALTER TABLE snowflake_high_water ENABLE ALWAYS TRIGGER snowflake_high_water_never_lost;
ALTER TABLE snowflake_high_water ENABLE ALWAYS TRIGGER snowflake_high_water_never_truncated;
ALTER TABLE snowflake_high_water ENABLE ALWAYS TRIGGER snowflake_high_water_never_decreases;

-- What every function, table, view and column is, for \df+, \d+ and
-- tools that read pg_description (tests/integration/test_segment.py checks
-- that none is missing).
COMMENT ON FUNCTION segment_nextval(text, int) IS 'pg_idgen: n IDs of a segment tag, increasing, taken from shared memory a block at a time';
COMMENT ON FUNCTION segment_create(text, bigint, int, boolean) IS 'pg_idgen: adds a segment tag (its row in id_segment); the first ID handed out is start; refused on a Citus worker unless forced';
COMMENT ON FUNCTION segment_citus_range(text, bigint, bigint) IS 'pg_idgen: on the Citus coordinator, a range of a tag for a worker''s refill';
COMMENT ON FUNCTION segment_citus_catch_up() IS 'pg_idgen: on the Citus coordinator, raises every tag above what every worker took (after a failover or restore)';
COMMENT ON FUNCTION segment_drop(text, boolean) IS 'pg_idgen: removes a segment tag (or its attachment) and the IDs cached for it; refused while a column default uses it, unless forced';
COMMENT ON FUNCTION segment_attach(text, text, text, text) IS 'pg_idgen: from now on the tag''s ranges come from a central server''s id_segment through postgres_fdw';
COMMENT ON FUNCTION segment_rename(text, text) IS 'pg_idgen: renames a segment tag, keeping its position, and makes the defaults that draw from it draw from the new name';
COMMENT ON FUNCTION segment_reserve(text, int) IS 'pg_idgen: n IDs of a segment tag at once, as blocks (first, last), for a cache in the application';
COMMENT ON FUNCTION segment_setval(text, bigint) IS 'pg_idgen: the next ID of a segment tag is above the value, in every session at once (as setval)';
COMMENT ON FUNCTION segment_currval(text) IS 'pg_idgen: the last ID segment_nextval gave this session for the tag (as currval)';
COMMENT ON FUNCTION segment_status() IS 'pg_idgen: the rows of the segment_status view that come from shared memory';
COMMENT ON FUNCTION id_segment_guard() IS 'pg_idgen: trigger function keeping id_segment.max_id from moving back';
COMMENT ON FUNCTION idgen_base62(bigint) IS 'pg_idgen: a non-negative bigint as a base62 code (0-9, A-Z, a-z)';
COMMENT ON FUNCTION idgen_base62_decode(text) IS 'pg_idgen: the bigint of a base62 code';
COMMENT ON FUNCTION snowflake_nextval() IS 'pg_idgen: the next time-ordered 64-bit snowflake ID of this server';
COMMENT ON FUNCTION snowflake_js_nextval() IS 'pg_idgen: the next snowflake ID below 2^53, exact in JavaScript numbers';
COMMENT ON FUNCTION snowflake_parse(bigint) IS 'pg_idgen: a snowflake ID taken apart: time, machine id, sequence';
COMMENT ON FUNCTION snowflake_js_parse(bigint) IS 'pg_idgen: a JavaScript-safe snowflake ID taken apart';
COMMENT ON FUNCTION snowflake_format(bigint) IS 'pg_idgen: a snowflake ID as yyyyMMddHHmmssSSS-machine-sequence, in UTC';
COMMENT ON FUNCTION snowflake_from_format(text) IS 'pg_idgen: the snowflake ID of a snowflake_format text';
COMMENT ON FUNCTION snowflake_from_timestamp(timestamp with time zone) IS 'pg_idgen: the smallest snowflake ID at a time, for range scans and partition bounds';
COMMENT ON FUNCTION snowflake_timestamp(bigint) IS 'pg_idgen: when a snowflake ID was made, under this server''s layout settings';
COMMENT ON FUNCTION snowflake_machine_id(bigint) IS 'pg_idgen: the machine id of a snowflake ID, under this server''s layout settings';
COMMENT ON FUNCTION snowflake_sequence(bigint) IS 'pg_idgen: the sequence of a snowflake ID, under this server''s layout settings';
COMMENT ON FUNCTION snowflake_timestamp(bigint, timestamp with time zone, int, int) IS 'pg_idgen: when a snowflake ID was made, under the layout given (immutable)';
COMMENT ON FUNCTION snowflake_machine_id(bigint, timestamp with time zone, int, int) IS 'pg_idgen: the machine id of a snowflake ID, under the layout given (immutable)';
COMMENT ON FUNCTION snowflake_sequence(bigint, timestamp with time zone, int, int) IS 'pg_idgen: the sequence of a snowflake ID, under the layout given (immutable)';
COMMENT ON FUNCTION snowflake_status() IS 'pg_idgen: the rows of the snowflake_status view';
COMMENT ON FUNCTION snowflake_high_water_guard() IS 'pg_idgen: trigger function keeping snowflake_high_water from being lowered or lost';

COMMENT ON COLUMN id_segment.biz_tag IS 'the segment tag';
COMMENT ON COLUMN id_segment.max_id IS 'the largest ID already handed to any allocator; the next range starts above it';
COMMENT ON COLUMN id_segment.step IS 'IDs per step: a refill takes a whole number of steps';
COMMENT ON COLUMN id_segment.version IS 'raised by every update: the version check of the CAS';
COMMENT ON COLUMN id_segment.updated_at IS 'when the row last changed';
COMMENT ON COLUMN id_segment_remote.biz_tag IS 'the attached segment tag';
COMMENT ON COLUMN id_segment_remote.server IS 'the postgres_fdw server of the central server';
COMMENT ON COLUMN id_segment_remote.foreign_table IS 'the foreign table over the central id_segment';
COMMENT ON COLUMN id_segment_remote.attached_at IS 'when segment_attach ran';
COMMENT ON COLUMN id_segment_remote.max_id_seen IS 'the largest central max_id this server took IDs below: a central row below it went back';
COMMENT ON COLUMN id_segment_remote.origin_table IS 'the foreign table over the central server''s id_segment_origin';
COMMENT ON COLUMN id_segment_remote.central_system_identifier IS 'the central server''s system identifier at the last refill (with the three central_ columns after it: the id_segment_central row of that refill)';
COMMENT ON COLUMN id_segment_remote.central_timeline IS 'the central server''s WAL timeline at the last refill';
COMMENT ON COLUMN id_segment_remote.central_database_oid IS 'the OID of the central server''s database at the last refill';
COMMENT ON COLUMN id_segment_remote.central_table_oid IS 'the OID of the central server''s id_segment at the last refill';
COMMENT ON COLUMN id_segment_detached.biz_tag IS 'the segment tag that was attached';
COMMENT ON COLUMN id_segment_detached.server IS 'the postgres_fdw server it was attached to';
COMMENT ON COLUMN id_segment_detached.max_id_seen IS 'the largest central max_id this server took IDs below';
COMMENT ON COLUMN id_segment_detached.detached_at IS 'when segment_drop detached it';
COMMENT ON COLUMN id_segment_detached.central_system_identifier IS 'the central server''s system identifier at the tag''s last refill here (with the three central_ columns after it: the id_segment_central row of that refill)';
COMMENT ON COLUMN id_segment_detached.central_timeline IS 'the central server''s WAL timeline then';
COMMENT ON COLUMN id_segment_detached.central_database_oid IS 'the OID of the central server''s database then';
COMMENT ON COLUMN id_segment_detached.central_table_oid IS 'the OID of the central server''s id_segment then';
COMMENT ON COLUMN id_segment_central.system_identifier IS 'the central server''s system identifier';
COMMENT ON COLUMN id_segment_central.database_oid IS 'the OID of its database';
COMMENT ON COLUMN id_segment_central.table_oid IS 'the OID of its id_segment';
COMMENT ON COLUMN id_segment_central.timeline IS 'its WAL timeline';
COMMENT ON COLUMN id_segment_central.wal_lsn IS 'its WAL position at the latest refill from it: its cluster''s WAL on this timeline never goes back below it';
COMMENT ON COLUMN id_segment_central.clock IS 'its clock then: a segment_central_accept() there after it lifts a refusal this row shows';
COMMENT ON COLUMN id_segment_origin_accepted.accepted_at IS 'when segment_central_accept ran (this server''s clock)';
COMMENT ON COLUMN id_segment_origin_accepted.system_identifier IS 'this server''s system identifier then';
COMMENT ON COLUMN id_segment_origin_accepted.timeline IS 'its WAL timeline then';
COMMENT ON COLUMN id_segment_origin_accepted.wal_lsn IS 'its WAL position then';
COMMENT ON COLUMN id_segment_origin_accepted.database_oid IS 'the OID of this database then: an acceptance counts only in the database it was made in';
COMMENT ON COLUMN id_segment_origin_accepted.table_oid IS 'the OID of id_segment then: an acceptance counts only for the table it was made for';
COMMENT ON COLUMN id_segment_origin.system_identifier IS 'this server''s system identifier';
COMMENT ON COLUMN id_segment_origin.timeline IS 'its WAL timeline';
COMMENT ON COLUMN id_segment_origin.wal_lsn IS 'its WAL insert position';
COMMENT ON COLUMN id_segment_origin.clock IS 'its clock';
COMMENT ON COLUMN id_segment_origin.accepted_at IS 'the last segment_central_accept in this database and table';
COMMENT ON COLUMN id_segment_origin.accepted_system_identifier IS 'the system identifier at the last segment_central_accept';
COMMENT ON COLUMN id_segment_origin.accepted_timeline IS 'the WAL timeline at the last segment_central_accept';
COMMENT ON COLUMN id_segment_origin.database_oid IS 'the OID of this database';
COMMENT ON COLUMN id_segment_origin.table_oid IS 'the OID of id_segment';
COMMENT ON COLUMN snowflake_high_water.system_identifier IS 'the cluster whose IDs the row bounds (its system identifier)';
COMMENT ON COLUMN snowflake_high_water.machine_id IS 'the machine id its IDs carry (NULL: not known)';
COMMENT ON COLUMN snowflake_high_water.timeline IS 'the WAL timeline the row was last committed on (NULL: not known)';
COMMENT ON COLUMN snowflake_high_water.epoch_ms IS 'the layout''s epoch, Unix ms';
COMMENT ON COLUMN snowflake_high_water.time_bits IS 'the layout''s time bits';
COMMENT ON COLUMN snowflake_high_water.machine_bits IS 'the layout''s machine bits';
COMMENT ON COLUMN snowflake_high_water.sequence_bits IS 'the layout''s sequence bits';
COMMENT ON COLUMN snowflake_high_water.default_high_id IS 'no snowflake_nextval ID of that cluster is above it (-1: none issued)';
COMMENT ON COLUMN snowflake_high_water.javascript_high_id IS 'no snowflake_js_nextval ID of that cluster is above it (-1: none issued)';
COMMENT ON COLUMN snowflake_high_water.updated_at IS 'when the keeper last raised it';
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

-- Column defaults that draw from a segment tag (src/segment/default_check.rs):
-- after CREATE TABLE or ALTER TABLE, a default naming a tag that does not
-- exist when the transaction commits gets a WARNING, as a typo in a
-- sequence's name would be an error at once. segment_drop refuses to drop
-- a tag a default still uses.
-- SECURITY DEFINER: the DDL of a role that cannot reach the extension's
-- schema or function (revoked grants, a schema of its own) must not fail
-- because of a check that only warns; nor must anything else go wrong in
-- it make the DDL fail.
CREATE FUNCTION segment_defaults_event() RETURNS event_trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@.segment_defaults_check(c.objid)
       FROM pg_catalog.pg_event_trigger_ddl_commands() c
      WHERE c.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
        AND c.objsubid OPERATOR(pg_catalog.=) 0;
EXCEPTION WHEN OTHERS THEN
    NULL;
END
$$;
REVOKE ALL ON FUNCTION segment_defaults_event() FROM PUBLIC;
-- Only the event trigger's function (SECURITY DEFINER) calls it.
REVOKE ALL ON FUNCTION segment_defaults_check(oid) FROM PUBLIC;
CREATE EVENT TRIGGER pg_idgen_segment_defaults ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE')
    EXECUTE FUNCTION segment_defaults_event();
COMMENT ON FUNCTION segment_defaults_event() IS 'pg_idgen: event trigger function: hands the tables a DDL command touched to segment_defaults_check';
COMMENT ON FUNCTION segment_defaults_check(oid) IS 'pg_idgen: as the transaction commits, warns about the table''s column defaults that name a segment tag that does not exist';
COMMENT ON EVENT TRIGGER pg_idgen_segment_defaults IS 'pg_idgen: warns about column defaults that name a segment tag that does not exist';

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
