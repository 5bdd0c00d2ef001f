-- pg_idgen finalize: views over the generated functions, and privileges.

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
