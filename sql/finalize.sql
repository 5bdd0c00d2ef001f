-- pg_idgen finalize: views over the generated functions, and privileges.

-- Drawing segment IDs advances id_segment: like nextval() on a sequence, it
-- needs a grant (GRANT EXECUTE ON FUNCTION segment_nextval(text) TO app).
-- Creating and dropping tags also needs write access to id_segment itself.
REVOKE ALL ON FUNCTION segment_nextval(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_nextval(text, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_create(text, bigint, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_drop(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_setval(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_attach(text, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_reserve(text, int) FROM PUBLIC;

-- source: where the tag's ranges come from, 'local' or the postgres_fdw
-- server (known for the tags of the database the view is read in).
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
