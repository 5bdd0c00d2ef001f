-- On a central server without pg_idgen (an id_segment that Meituan Leaf or
-- your own code made, in the schema public): what shards attached to it
-- check before every refill. pg_idgen on the central server creates the
-- same objects itself (central.sql); run this only where it is not
-- installed. Needs no superuser; the role that shards map to needs SELECT
-- on the view and the table, as it needs SELECT and UPDATE on id_segment.
--
-- Which cluster this is, its WAL timeline and its WAL position: a shard
-- refuses to refill once the central server is another cluster, on
-- another timeline (a failover or point-in-time recovery) or back at an
-- earlier WAL position (a restored copy) than at its last refill, until
-- the rows were raised and segment_central_accept() ran here (README,
-- "Running the central server").
CREATE TABLE public.id_segment_origin_accepted (
    accepted_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    system_identifier bigint      NOT NULL,
    timeline          bigint      NOT NULL,
    wal_lsn           pg_lsn      NOT NULL
);

CREATE VIEW public.id_segment_origin AS
SELECT (pg_catalog.pg_control_system()).system_identifier AS system_identifier,
       ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))
           ::pg_catalog.bit(32)::pg_catalog.int4::pg_catalog.int8 AS timeline,
       pg_catalog.pg_current_wal_lsn() AS wal_lsn,
       pg_catalog.clock_timestamp() AS clock,
       (SELECT a.accepted_at FROM public.id_segment_origin_accepted a
         ORDER BY a.accepted_at DESC LIMIT 1) AS accepted_at,
       (SELECT a.system_identifier FROM public.id_segment_origin_accepted a
         ORDER BY a.accepted_at DESC LIMIT 1) AS accepted_system_identifier,
       (SELECT a.timeline FROM public.id_segment_origin_accepted a
         ORDER BY a.accepted_at DESC LIMIT 1) AS accepted_timeline;

GRANT SELECT ON public.id_segment_origin, public.id_segment_origin_accepted TO PUBLIC;

CREATE FUNCTION public.segment_central_accept() RETURNS timestamptz
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
    INSERT INTO public.id_segment_origin_accepted (system_identifier, timeline, wal_lsn)
    SELECT system_identifier, timeline, wal_lsn FROM public.id_segment_origin
    RETURNING accepted_at
$$;
REVOKE ALL ON FUNCTION public.segment_central_accept() FROM PUBLIC;
