-- On a central server without pg_idgen (an id_segment that Meituan Leaf or
-- your own code made, in the schema public): what shards attached to it
-- check before every refill. pg_idgen on the central server creates the
-- same objects itself (central.sql); run this only where it is not
-- installed. Needs no superuser; the role that shards map to needs SELECT
-- on the view and the table, as it needs SELECT and UPDATE on id_segment.
--
-- Which cluster, database and id_segment table this is, its WAL timeline
-- and its WAL position: a shard refuses to refill once the central server
-- is another cluster, another database or table (a dump restored, even
-- into the same cluster), on another timeline (a failover or point-in-time
-- recovery) or back at an earlier WAL position (a restored copy) than at
-- its last refill, until the rows were raised and segment_central_accept()
-- ran here (README, "Running the central server").
CREATE TABLE public.id_segment_origin_accepted (
    accepted_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    system_identifier bigint      NOT NULL,
    timeline          bigint      NOT NULL,
    wal_lsn           pg_lsn      NOT NULL,
    database_oid      bigint      NOT NULL,
    table_oid         bigint      NOT NULL
);

CREATE VIEW public.id_segment_origin AS
SELECT here.system_identifier, here.timeline, here.wal_lsn, here.clock,
       last.accepted_at, last.system_identifier AS accepted_system_identifier,
       last.timeline AS accepted_timeline,
       here.database_oid, here.table_oid
  FROM (SELECT (pg_catalog.pg_control_system()).system_identifier AS system_identifier,
               ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))
                   ::pg_catalog.bit(32)::pg_catalog.int4::pg_catalog.int8 AS timeline,
               pg_catalog.pg_current_wal_lsn() AS wal_lsn,
               pg_catalog.clock_timestamp() AS clock,
               (SELECT d.oid FROM pg_catalog.pg_database d
                 WHERE d.datname = pg_catalog.current_database())::pg_catalog.int8 AS database_oid,
               'public.id_segment'::pg_catalog.regclass::pg_catalog.oid::pg_catalog.int8 AS table_oid) here
  -- The last acceptance made in this database for this table.
  LEFT JOIN LATERAL (
       SELECT a.accepted_at, a.system_identifier, a.timeline FROM public.id_segment_origin_accepted a
        WHERE a.database_oid = here.database_oid AND a.table_oid = here.table_oid
        ORDER BY a.accepted_at DESC LIMIT 1) last ON true;

GRANT SELECT ON public.id_segment_origin, public.id_segment_origin_accepted TO PUBLIC;

CREATE FUNCTION public.segment_central_accept() RETURNS timestamptz
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
    INSERT INTO public.id_segment_origin_accepted (system_identifier, timeline, wal_lsn, database_oid, table_oid)
    SELECT system_identifier, timeline, wal_lsn, database_oid, table_oid FROM public.id_segment_origin
    RETURNING accepted_at
$$;
REVOKE ALL ON FUNCTION public.segment_central_accept() FROM PUBLIC;
