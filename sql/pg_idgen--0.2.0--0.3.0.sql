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
    ADD COLUMN central_clock timestamptz;

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
                'accepted_timeline bigint) SERVER %I OPTIONS (schema_name %L, table_name %L)',
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
    biz_tag     varchar(64) PRIMARY KEY,
    server      name        NOT NULL,
    max_id_seen bigint      NOT NULL,
    detached_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE id_segment_detached IS 'pg_idgen: attached segment tags dropped here, with the largest central max_id taken below';
SELECT pg_catalog.pg_extension_config_dump('id_segment_detached', '');

-- Where this server is, for the servers attached to it (segment_attach
-- reads it through postgres_fdw; every refill checks it): which cluster,
-- which WAL timeline (the first 8 hex digits of the current WAL file's
-- name), the WAL insert position, this server's clock, and when the DBA
-- last accepted where it is (segment_central_accept).
CREATE TABLE id_segment_origin_accepted (
    accepted_at       timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    system_identifier bigint      NOT NULL,
    timeline          bigint      NOT NULL,
    wal_lsn           pg_lsn      NOT NULL
);
COMMENT ON TABLE id_segment_origin_accepted IS 'pg_idgen: each time a DBA accepted where this central server is, after raising its rows (segment_central_accept)';
SELECT pg_catalog.pg_extension_config_dump('id_segment_origin_accepted', '');
CREATE VIEW id_segment_origin AS
SELECT (pg_catalog.pg_control_system()).system_identifier AS system_identifier,
       ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))::pg_catalog.bit(32)::pg_catalog.int4::pg_catalog.int8 AS timeline,
       pg_catalog.pg_current_wal_lsn() AS wal_lsn,
       pg_catalog.clock_timestamp() AS clock,
       -- The last acceptance, and where the server was then: it counts
       -- only for that cluster and timeline.
       (SELECT a.accepted_at FROM id_segment_origin_accepted a
         ORDER BY a.accepted_at DESC LIMIT 1) AS accepted_at,
       (SELECT a.system_identifier FROM id_segment_origin_accepted a
         ORDER BY a.accepted_at DESC LIMIT 1) AS accepted_system_identifier,
       (SELECT a.timeline FROM id_segment_origin_accepted a
         ORDER BY a.accepted_at DESC LIMIT 1) AS accepted_timeline;
COMMENT ON VIEW id_segment_origin IS 'pg_idgen: which cluster this is, its WAL timeline and position, checked by the servers attached to it before every refill';
GRANT SELECT ON id_segment_origin TO PUBLIC;
GRANT SELECT ON id_segment_origin_accepted TO PUBLIC;

-- The recovery step on a central server that failed over or was
-- restored, run after its rows are raised above what every attached
-- server took: the servers attached to it trust it again from here on.
CREATE FUNCTION segment_central_accept() RETURNS timestamptz
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
    INSERT INTO @extschema@.id_segment_origin_accepted (system_identifier, timeline, wal_lsn)
    SELECT system_identifier, timeline, wal_lsn FROM @extschema@.id_segment_origin
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
