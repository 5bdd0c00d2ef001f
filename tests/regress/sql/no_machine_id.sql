-- A server whose pg_idgen.machine_id is not set (tests/regress/run.sh runs
-- this file on a cluster of its own): no snowflake ID, and the fallback
-- cannot be turned on; segment IDs and the stateless helpers work.
\set SHOW_CONTEXT never
CREATE EXTENSION pg_idgen;
SHOW pg_idgen.machine_id;
SELECT snowflake_nextval();
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_js_nextval();
\echo :LAST_ERROR_SQLSTATE
SET pg_idgen.snowflake_fallback = on;
\echo :LAST_ERROR_SQLSTATE
SELECT segment_create('plain', step => 10);
SELECT array_agg(segment_nextval('plain')) FROM generate_series(1, 3);
SELECT snowflake_machine_id((5 << 12) | 7, '2025-01-01 00:00:00+00', 10, 12) AS machine;

-- Leave the database as it was found.
DROP EXTENSION pg_idgen CASCADE;
