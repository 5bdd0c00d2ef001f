-- pg_idgen finalize: views over the generated functions, and privileges.

-- Drawing segment IDs advances id_segment: like nextval() on a sequence, it
-- needs a grant (GRANT EXECUTE ON FUNCTION segment_nextval(text) TO app).
-- Creating and dropping tags also needs write access to id_segment itself.
REVOKE ALL ON FUNCTION segment_nextval(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_nextval(text, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_create(text, bigint, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION segment_drop(text) FROM PUBLIC;

CREATE VIEW segment_status AS SELECT * FROM segment_status();
COMMENT ON VIEW segment_status IS 'pg_idgen: one row per (database, tag) cached in shared memory';

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
