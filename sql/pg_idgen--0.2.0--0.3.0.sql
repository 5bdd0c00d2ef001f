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

-- Where the central server was at the last refill (see bootstrap.sql and
-- src/segment/fence.rs).
ALTER TABLE id_segment_remote
    ADD COLUMN origin_table regclass,
    ADD COLUMN central_system_identifier bigint,
    ADD COLUMN central_timeline bigint,
    ADD COLUMN central_wal_lsn pg_lsn,
    ADD COLUMN central_clock timestamptz,
    ADD COLUMN central_database_oid bigint,
    ADD COLUMN central_table_oid bigint;

-- Tags attached before 0.3.0: the foreign table over the central server's
-- id_segment_origin, as segment_attach makes it now (same server, same
-- remote schema, same owner as the tag's foreign table, the same name
-- rule as src/segment/ddl.rs: "<schema>.<table>@<server>", cut to 54
-- bytes and a 32-bit FNV-1a hash when longer than 63), so that they are
-- fenced from their next refill on. Like segment_attach's, it is not a
-- member of the extension (pg_dump dumps it, and the origin_table column
-- that names it). The central server must run 0.3.0 (or have
-- examples/sharding/central_by_hand.sql) by then: until it does, the
-- refills fail with 55000 naming the view.
DO $update$
DECLARE
    attached record;
    full_name text;
    origin_name text;
    hash bigint;
    byte int;
    origin regclass;
    usable bool;
BEGIN
    FOR attached IN
        SELECT r.biz_tag, n.nspname AS here, pg_catalog.pg_get_userbyid(c.relowner) AS owner,
               s.oid AS server_oid, s.srvname,
               -- postgres_fdw's default schema_name: the foreign table's own.
               COALESCE(
                   (SELECT o.option_value FROM pg_catalog.pg_options_to_table(ft.ftoptions) o
                     WHERE o.option_name OPERATOR(pg_catalog.=) 'schema_name'),
                   n.nspname::pg_catalog.text) AS remote_schema
          FROM @extschema@.id_segment_remote r
          JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) r.foreign_table
          JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
          JOIN pg_catalog.pg_foreign_table ft ON ft.ftrelid OPERATOR(pg_catalog.=) c.oid
          JOIN pg_catalog.pg_foreign_server s ON s.oid OPERATOR(pg_catalog.=) ft.ftserver
    LOOP
        full_name := pg_catalog.concat(attached.remote_schema, '.id_segment_origin@', attached.srvname);
        origin_name := full_name;
        IF pg_catalog.octet_length(full_name) > 63 THEN
            hash := 2166136261;
            FOREACH byte IN ARRAY (SELECT pg_catalog.array_agg(pg_catalog.get_byte(b.bytes, i) ORDER BY i)
                                     FROM (SELECT pg_catalog.convert_to(full_name, 'UTF8') AS bytes) b,
                                          pg_catalog.generate_series(0, pg_catalog.length(b.bytes) OPERATOR(pg_catalog.-) 1) i)
            LOOP
                hash := ((hash OPERATOR(pg_catalog.#) byte) OPERATOR(pg_catalog.*) 16777619)
                        OPERATOR(pg_catalog.%) 4294967296;
            END LOOP;
            origin_name := '';
            FOR i IN 1 .. pg_catalog.length(full_name) LOOP
                EXIT WHEN pg_catalog.octet_length(pg_catalog.left(full_name, i)) > 54;
                origin_name := pg_catalog.left(full_name, i);
            END LOOP;
            origin_name := pg_catalog.concat(origin_name, '~', pg_catalog.lpad(pg_catalog.to_hex(hash), 8, '0'));
        END IF;
        origin := pg_catalog.to_regclass(pg_catalog.format('%I.%I', attached.here, origin_name));
        IF origin IS NULL THEN
            EXECUTE pg_catalog.format(
                'CREATE FOREIGN TABLE %I.%I (system_identifier bigint, timeline bigint, wal_lsn pg_lsn, '
                'clock timestamptz, accepted_at timestamptz, accepted_system_identifier bigint, '
                'accepted_timeline bigint, database_oid bigint, table_oid bigint) SERVER %I OPTIONS (schema_name %L, table_name %L)',
                attached.here, origin_name, attached.srvname, attached.remote_schema, 'id_segment_origin');
            origin := pg_catalog.format('%I.%I', attached.here, origin_name)::pg_catalog.regclass;
            EXECUTE pg_catalog.format('ALTER EXTENSION pg_idgen DROP FOREIGN TABLE %s', origin);
            EXECUTE pg_catalog.format('ALTER FOREIGN TABLE %s OWNER TO %I', origin, attached.owner);
        ELSE
            SELECT ft.ftserver OPERATOR(pg_catalog.=) attached.server_oid
                   AND ft.ftoptions OPERATOR(pg_catalog.@>)
                       ARRAY[pg_catalog.concat('schema_name=', attached.remote_schema),
                             'table_name=id_segment_origin']
              INTO usable
              FROM pg_catalog.pg_foreign_table ft WHERE ft.ftrelid OPERATOR(pg_catalog.=) origin;
            IF usable IS NOT TRUE THEN
                RAISE EXCEPTION 'relation % already exists and is not a foreign table of server % over %.id_segment_origin',
                    origin, attached.srvname, attached.remote_schema
                    USING ERRCODE = 'duplicate_table',
                          HINT = 'Drop or rename that relation, then run ALTER EXTENSION pg_idgen UPDATE again.';
            END IF;
        END IF;
        UPDATE @extschema@.id_segment_remote SET origin_table = origin
         WHERE biz_tag OPERATOR(pg_catalog.=) attached.biz_tag;
    END LOOP;
END
$update$;

-- Attached tags dropped here, with their mark (see bootstrap.sql).
CREATE TABLE id_segment_detached (
    biz_tag     varchar(64) NOT NULL,
    server      name        NOT NULL,
    max_id_seen bigint      NOT NULL,
    detached_at timestamptz NOT NULL DEFAULT now(),
    -- Where the central server was at the tag's last refill here (as in
    -- id_segment_remote): a segment_attach, and every refill of a tag
    -- attached through the same server, is fenced by it too, so that a
    -- drop and an attach do not forget a central server that went back.
    central_system_identifier bigint,
    central_timeline bigint,
    central_wal_lsn pg_lsn,
    central_clock timestamptz,
    central_database_oid bigint,
    central_table_oid bigint,
    -- One row per tag and server: attaching the tag through another
    -- server (moving it to another central server) keeps the record of
    -- the old one, which still fences the old server's other tags.
    PRIMARY KEY (biz_tag, server)
);
COMMENT ON TABLE id_segment_detached IS 'pg_idgen: attached segment tags dropped here, with the largest central max_id taken below';
SELECT pg_catalog.pg_extension_config_dump('id_segment_detached', '');

-- Where this server is, for the servers attached to it (segment_attach
-- reads it through postgres_fdw; every refill checks it): which cluster,
-- which WAL timeline (the first 8 hex digits of the current WAL file's
-- name), the WAL insert position, this server's clock, which database and
-- id_segment table (their OIDs: a dump restored into the same cluster
-- makes new ones), and when the DBA last accepted where it is
-- (segment_central_accept) in this database and table — an acceptance
-- restored with a dump is about the table it was made in, not this one.
CREATE TABLE id_segment_origin_accepted (
    accepted_at       timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    system_identifier bigint      NOT NULL,
    timeline          bigint      NOT NULL,
    wal_lsn           pg_lsn      NOT NULL,
    database_oid      bigint      NOT NULL,
    table_oid         bigint      NOT NULL
);
COMMENT ON TABLE id_segment_origin_accepted IS 'pg_idgen: each time a DBA accepted where this central server is, after raising its rows (segment_central_accept)';
SELECT pg_catalog.pg_extension_config_dump('id_segment_origin_accepted', '');
CREATE VIEW id_segment_origin AS
SELECT here.system_identifier, here.timeline, here.wal_lsn, here.clock,
       -- The last acceptance in this database and table, and where the
       -- server was then: it counts only for that cluster and timeline.
       last.accepted_at, last.system_identifier AS accepted_system_identifier,
       last.timeline AS accepted_timeline,
       here.database_oid, here.table_oid
  FROM (SELECT (pg_catalog.pg_control_system()).system_identifier AS system_identifier,
               ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))::pg_catalog.bit(32)::pg_catalog.int4::pg_catalog.int8 AS timeline,
               pg_catalog.pg_current_wal_lsn() AS wal_lsn,
               pg_catalog.clock_timestamp() AS clock,
               (SELECT d.oid FROM pg_catalog.pg_database d
                 WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())::pg_catalog.int8 AS database_oid,
               '@extschema@.id_segment'::pg_catalog.regclass::pg_catalog.oid::pg_catalog.int8 AS table_oid) here
  LEFT JOIN LATERAL (
       SELECT a.accepted_at, a.system_identifier, a.timeline FROM id_segment_origin_accepted a
        WHERE a.database_oid OPERATOR(pg_catalog.=) here.database_oid
          AND a.table_oid OPERATOR(pg_catalog.=) here.table_oid
        ORDER BY a.accepted_at DESC LIMIT 1) last ON true;
COMMENT ON VIEW id_segment_origin IS 'pg_idgen: which cluster, database and id_segment table this is, its WAL timeline and position, checked by the servers attached to it before every refill';
GRANT SELECT ON id_segment_origin TO PUBLIC;
GRANT SELECT ON id_segment_origin_accepted TO PUBLIC;

-- The recovery step on a central server that failed over or was
-- restored, run after its rows are raised above what every attached
-- server took: the servers attached to it trust it again from here on.
CREATE FUNCTION segment_central_accept() RETURNS timestamptz
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
    INSERT INTO @extschema@.id_segment_origin_accepted (system_identifier, timeline, wal_lsn, database_oid, table_oid)
    SELECT system_identifier, timeline, wal_lsn, database_oid, table_oid FROM @extschema@.id_segment_origin
    RETURNING accepted_at
$$;
COMMENT ON FUNCTION segment_central_accept() IS 'pg_idgen: after raising this central server''s rows above what every attached server took, lets the attached servers refill from it again although it failed over or was restored';
REVOKE ALL ON FUNCTION segment_central_accept() FROM PUBLIC;

-- Scalar helpers (src/snowflake/sql.rs): the time, machine id and
-- sequence of a snowflake ID. The one-argument forms read the layout
-- settings (STABLE); the forms that take the layout are IMMUTABLE, for
-- generated columns and expression indexes.
CREATE FUNCTION snowflake_timestamp(id bigint) RETURNS timestamp with time zone
    STRICT STABLE PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_timestamp_wrapper';
CREATE FUNCTION snowflake_machine_id(id bigint) RETURNS bigint
    STRICT STABLE PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_machine_id_wrapper';
CREATE FUNCTION snowflake_sequence(id bigint) RETURNS bigint
    STRICT STABLE PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_wrapper';
CREATE FUNCTION snowflake_timestamp(id bigint, epoch timestamp with time zone, machine_bits int,
                                    sequence_bits int) RETURNS timestamp with time zone
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_timestamp_in_layout_wrapper';
CREATE FUNCTION snowflake_machine_id(id bigint, epoch timestamp with time zone, machine_bits int,
                                     sequence_bits int) RETURNS bigint
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_machine_id_in_layout_wrapper';
CREATE FUNCTION snowflake_sequence(id bigint, epoch timestamp with time zone, machine_bits int,
                                   sequence_bits int) RETURNS bigint
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_in_layout_wrapper';

-- segment_status lists every tag of the database: the idle ones too, with
-- what id_segment says (a view of its own columns can be made anew).
DROP VIEW segment_status;
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
       AND s.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
    UNION ALL
    -- The tags of this database with nothing in shared memory (not drawn
    -- since the server started, or their slot was freed): what the table
    -- says, nothing cached, as pg_sequences lists every sequence.
    SELECT pg_catalog.current_database()::text, t.tag, t.source,
           NULL, NULL, NULL, 0, 0, 0, 0, 0, t.step, NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0,
           NULL, NULL, NULL, NULL
      FROM (SELECT l.biz_tag::text AS tag, 'local'::text AS source, l.step::bigint AS step
              FROM id_segment l
            UNION ALL
            SELECT a.biz_tag::text, a.server::text, NULL::bigint FROM id_segment_remote a) t
     WHERE NOT EXISTS (SELECT FROM segment_status() c
                        WHERE c.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
                          AND c.tag OPERATOR(pg_catalog.=) t.tag);
COMMENT ON VIEW segment_status IS 'pg_idgen: one row per segment tag: each (database, tag) cached in shared memory, and the idle tags of this database';
REVOKE ALL ON segment_status FROM PUBLIC;
GRANT SELECT ON segment_status TO pg_monitor;

-- segment_setval and segment_currval, as setval and currval for a
-- sequence (src/segment/ddl.rs, src/segment/sql.rs). Setting needs the
-- grant segment_create needs; currval tells a session only its own.
CREATE FUNCTION segment_setval(tag text, value bigint) RETURNS bigint
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_setval_wrapper';
REVOKE ALL ON FUNCTION segment_setval(text, bigint) FROM PUBLIC;
CREATE FUNCTION segment_currval(tag text) RETURNS bigint
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_currval_wrapper';

-- segment_drop(tag, force => false): refused while a column default uses
-- the tag (src/segment/ddl.rs).
DROP FUNCTION segment_drop(text);
CREATE FUNCTION segment_drop(tag text, force boolean DEFAULT false) RETURNS void
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_drop_wrapper';
REVOKE ALL ON FUNCTION segment_drop(text, boolean) FROM PUBLIC;
CREATE FUNCTION segment_defaults_check(relid oid) RETURNS void
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_defaults_check_wrapper';

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
CREATE EVENT TRIGGER pg_idgen_segment_defaults ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE')
    EXECUTE FUNCTION segment_defaults_event();
COMMENT ON FUNCTION segment_defaults_event() IS 'pg_idgen: event trigger function: hands the tables a DDL command touched to segment_defaults_check';
COMMENT ON FUNCTION segment_defaults_check(oid) IS 'pg_idgen: as the transaction commits, warns about the table''s column defaults that name a segment tag that does not exist';
COMMENT ON EVENT TRIGGER pg_idgen_segment_defaults IS 'pg_idgen: warns about column defaults that name a segment tag that does not exist';

-- Descriptions of every function, table, view and column (as finalize.sql).
COMMENT ON FUNCTION segment_nextval(text, int) IS 'pg_idgen: n IDs of a segment tag, increasing, taken from shared memory a block at a time';
COMMENT ON FUNCTION segment_create(text, bigint, int) IS 'pg_idgen: adds a segment tag (its row in id_segment); the first ID handed out is start';
COMMENT ON FUNCTION segment_drop(text, boolean) IS 'pg_idgen: removes a segment tag (or its attachment) and the IDs cached for it; refused while a column default uses it, unless forced';
COMMENT ON FUNCTION segment_attach(text, text, text, text) IS 'pg_idgen: from now on the tag''s ranges come from a central server''s id_segment through postgres_fdw';
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
COMMENT ON COLUMN id_segment_remote.central_system_identifier IS 'the central server''s system identifier at the last refill';
COMMENT ON COLUMN id_segment_remote.central_timeline IS 'the central server''s WAL timeline at the last refill';
COMMENT ON COLUMN id_segment_remote.central_wal_lsn IS 'the central server''s WAL position at the last refill';
COMMENT ON COLUMN id_segment_remote.central_clock IS 'the central server''s clock at the last refill';
COMMENT ON COLUMN id_segment_remote.central_database_oid IS 'the OID of the central server''s database at the last refill';
COMMENT ON COLUMN id_segment_remote.central_table_oid IS 'the OID of the central server''s id_segment at the last refill';
COMMENT ON COLUMN id_segment_detached.biz_tag IS 'the segment tag that was attached';
COMMENT ON COLUMN id_segment_detached.server IS 'the postgres_fdw server it was attached to';
COMMENT ON COLUMN id_segment_detached.max_id_seen IS 'the largest central max_id this server took IDs below';
COMMENT ON COLUMN id_segment_detached.detached_at IS 'when segment_drop detached it';
COMMENT ON COLUMN id_segment_detached.central_system_identifier IS 'the central server''s system identifier at the tag''s last refill here';
COMMENT ON COLUMN id_segment_detached.central_timeline IS 'the central server''s WAL timeline then';
COMMENT ON COLUMN id_segment_detached.central_wal_lsn IS 'the central server''s WAL position then';
COMMENT ON COLUMN id_segment_detached.central_clock IS 'the central server''s clock then';
COMMENT ON COLUMN id_segment_detached.central_database_oid IS 'the OID of the central server''s database then';
COMMENT ON COLUMN id_segment_detached.central_table_oid IS 'the OID of the central server''s id_segment then';
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
COMMENT ON COLUMN snowflake_high_water.only_row IS 'true: the table has one row';
COMMENT ON COLUMN snowflake_high_water.epoch_ms IS 'the layout''s epoch, Unix ms';
COMMENT ON COLUMN snowflake_high_water.time_bits IS 'the layout''s time bits';
COMMENT ON COLUMN snowflake_high_water.machine_bits IS 'the layout''s machine bits';
COMMENT ON COLUMN snowflake_high_water.sequence_bits IS 'the layout''s sequence bits';
COMMENT ON COLUMN snowflake_high_water.default_high_id IS 'no snowflake_nextval ID of this cluster is above it (-1: none issued)';
COMMENT ON COLUMN snowflake_high_water.javascript_high_id IS 'no snowflake_js_nextval ID of this cluster is above it (-1: none issued)';
COMMENT ON COLUMN snowflake_high_water.updated_at IS 'when the keeper last raised it';
COMMENT ON COLUMN segment_status.database IS 'the database of the tag';
COMMENT ON COLUMN segment_status.tag IS 'the segment tag';
COMMENT ON COLUMN segment_status.source IS 'where the tag''s ranges come from: local, or the postgres_fdw server it is attached to (NULL for other databases'' tags)';
COMMENT ON COLUMN segment_status.range_first IS 'the first ID of the range handed out from now';
COMMENT ON COLUMN segment_status.range_last IS 'the last ID of that range';
COMMENT ON COLUMN segment_status.next_id IS 'the next ID of that range';
COMMENT ON COLUMN segment_status.remaining_in_range IS 'IDs left in that range';
COMMENT ON COLUMN segment_status.pct_used IS 'share of that range handed out, percent';
COMMENT ON COLUMN segment_status.ranges_ahead IS 'ranges fetched ahead';
COMMENT ON COLUMN segment_status.ids_ahead IS 'IDs those ranges hold';
COMMENT ON COLUMN segment_status.safe_distance IS 'IDs the refill worker tries to keep cached ahead of the callers';
COMMENT ON COLUMN segment_status.step IS 'id_segment.step as the last refill read it';
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
COMMENT ON COLUMN snowflake_status.generator IS 'default (snowflake_nextval) or javascript (snowflake_js_nextval)';
COMMENT ON COLUMN snowflake_status.machine_id IS 'this server''s machine id';
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
