-- pg_idgen bootstrap: objects the generated SQL builds on.

-- The segment table, in the layout of Meituan Leaf's segment table. max_id is the largest ID already
-- handed to any allocator; the next range starts at max_id + 1. Allocators
-- (this extension's worker, or an application) take a range with a
-- version CAS:
--   UPDATE id_segment SET max_id = max_id + step, version = version + 1
--    WHERE biz_tag = $1 AND version = $2;
CREATE TABLE id_segment (
    biz_tag    varchar(64) PRIMARY KEY,
    max_id     bigint      NOT NULL,
    step       int         NOT NULL CONSTRAINT id_segment_step_positive CHECK (step > 0),
    version    bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz DEFAULT now()
);
COMMENT ON TABLE id_segment IS 'pg_idgen: one row per segment tag; max_id is the largest ID already handed out';

-- pg_dump carries the rows, so a restored database continues above them.
SELECT pg_catalog.pg_extension_config_dump('id_segment', '');

-- segment_nextval(text) is hand-written C-level glue (see src/segment/sql.rs):
-- it caches the tag's slot per call site. Not STRICT: a NULL tag is an error.
CREATE FUNCTION segment_nextval(tag text) RETURNS bigint
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_nextval_fast';
COMMENT ON FUNCTION segment_nextval(text) IS 'next ID of a segment tag, from ranges cached in shared memory';

-- segment_drop is hand-written C-level glue too (src/segment/ddl.rs), so
-- that its symbol also serves 0.1.0's one-argument declaration.
CREATE FUNCTION segment_drop(tag text, force boolean DEFAULT false) RETURNS void
    VOLATILE PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'segment_drop_wrapper';

-- Tags whose ranges come from another server's id_segment, through a
-- postgres_fdw foreign table (segment_attach). Such a tag has no row in
-- the local id_segment: its IDs come from one place only.
CREATE TABLE id_segment_remote (
    biz_tag       varchar(64) PRIMARY KEY,
    server        name        NOT NULL,
    foreign_table regclass    NOT NULL,
    attached_at   timestamptz NOT NULL DEFAULT now(),
    -- The largest central max_id this server has taken IDs below (set
    -- from the central row at segment_attach, raised by every refill in
    -- the transaction that publishes the range): a central row below it
    -- means the central server went back, and the refill is refused.
    max_id_seen   bigint,
    -- The foreign table over the central server's id_segment_origin, which
    -- every refill reads first (src/segment/fence.rs).
    origin_table  regclass,
    -- The central identity this tag last refilled from: the cluster, the
    -- OIDs of the database and of id_segment there, the WAL timeline (the
    -- key of its row in id_segment_central, which says where the central
    -- server was then).
    central_system_identifier bigint,
    central_timeline bigint,
    central_database_oid bigint,
    central_table_oid bigint
);
COMMENT ON TABLE id_segment_remote IS 'pg_idgen: segment tags whose ranges come from a central server through postgres_fdw';
SELECT pg_catalog.pg_extension_config_dump('id_segment_remote', '');

-- Attached tags dropped here (segment_drop), with the largest central
-- max_id this server had taken IDs below: attaching the tag again starts
-- its max_id_seen there, and refuses a central row below it (a central
-- server that went back, then a drop and an attach, would otherwise hand
-- out this database's own IDs again).
CREATE TABLE id_segment_detached (
    biz_tag     varchar(64) NOT NULL,
    server      name        NOT NULL,
    max_id_seen bigint      NOT NULL,
    detached_at timestamptz NOT NULL DEFAULT now(),
    -- The central identity the tag last refilled from here (as in
    -- id_segment_remote): a segment_attach of the tag, and every refill
    -- through a server of that name, is fenced by it too, so that a drop
    -- and an attach do not forget a central server that moved.
    central_system_identifier bigint,
    central_timeline bigint,
    central_database_oid bigint,
    central_table_oid bigint,
    -- One row per tag and server: attaching the tag through another
    -- server (moving it to another central server) keeps the record of
    -- the old one, which still fences the old server's other tags.
    PRIMARY KEY (biz_tag, server)
);
COMMENT ON TABLE id_segment_detached IS 'pg_idgen: attached segment tags dropped here, with the largest central max_id taken below';
SELECT pg_catalog.pg_extension_config_dump('id_segment_detached', '');

-- On a Citus worker: the tags whose ranges come from the coordinator's
-- id_segment (src/segment/citus_source.rs), with the largest coordinator
-- max_id this node took IDs below — a coordinator row below it went back,
-- and the coordinator refuses the refill. Empty on the coordinator.
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
-- Where each central server this database refilled from was, by its
-- identity: the cluster (system identifier), the OIDs of its database and
-- id_segment, the WAL timeline; with the WAL position and the central
-- clock the latest refill (or segment_attach) from it saw, through
-- whichever server and for whichever tag. A refill finding the central
-- cluster's WAL behind a row of its timeline, its table on another
-- timeline, or another table than its route's tags last refilled from is
-- refused until segment_central_accept() there after that row's clock
-- (src/segment/fence.rs).
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

-- The snowflake high-water mark, in the WAL (src/snowflake/wal_mark.rs):
-- in the database named by pg_idgen.snowflake_database, the snowflake
-- keeper commits here, before any snowflake ID up to it is issued, the
-- largest ID each generator may have handed out. A promoted standby, a
-- point-in-time restore, a pg_upgrade'd cluster or a restored dump starts
-- above it. Unused in the other databases.
CREATE TABLE snowflake_high_water (
    -- One row per cluster that issued snowflake IDs, by its system
    -- identifier: this cluster's own (written by its keeper, replayed by its
    -- standbys), and the rows a pg_upgrade, a dump or logical replication
    -- brought from other clusters (src/snowflake/wal_mark.rs).
    system_identifier  bigint      PRIMARY KEY
                                   DEFAULT (pg_catalog.pg_control_system()).system_identifier,
    -- The machine id its IDs carry (NULL: not known, for rows from before
    -- 0.4.0): another cluster's row counts for this cluster's floor when
    -- it has this cluster's machine id, or none.
    machine_id         bigint,
    -- The WAL timeline the row was last committed on (NULL: not known): a
    -- server on a later timeline (promoted, or restored to a point in
    -- time) cannot tell from it what the server before it issued last.
    timeline           bigint,
    epoch_ms           bigint      NOT NULL,
    time_bits          int         NOT NULL,
    machine_bits       int         NOT NULL,
    sequence_bits      int         NOT NULL,
    default_high_id    bigint      NOT NULL,
    javascript_high_id bigint      NOT NULL,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE snowflake_high_water IS 'pg_idgen: no snowflake ID of a cluster is above these, one row per cluster (in pg_idgen.snowflake_database; written by the snowflake keeper)';
SELECT pg_catalog.pg_extension_config_dump('snowflake_high_water', '');
