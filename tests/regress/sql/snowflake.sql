-- Snowflake IDs: layout, helpers and their errors. Times are shown in UTC.
\set SHOW_CONTEXT never
SET timezone = 'UTC';
SET datestyle = 'ISO, YMD';
CREATE EXTENSION pg_idgen;

-- The default layout: 41 bits of ms since 2025-01-01 UTC, 10 of machine, 12 of sequence.
SELECT generator, machine_id, time_bits, machine_bits, sequence_bits, epoch, keeper_pid IS NOT NULL AS keeper_running
  FROM snowflake_status ORDER BY generator;

-- Machine id and sequence are bigint.
SELECT pg_typeof(machine_id) AS machine_type, pg_typeof(sequence) AS sequence_type FROM snowflake_parse(0);
SELECT pg_typeof(machine_id) AS status_machine_type FROM snowflake_status LIMIT 1;

-- Taking known IDs apart.
SELECT * FROM snowflake_parse(0);
SELECT * FROM snowflake_parse((1::bigint << 22) | (5 << 12) | 7);
SELECT * FROM snowflake_parse(9223372036854775807);
SELECT snowflake_format(0), snowflake_format((1::bigint << 22) | (5 << 12) | 7);
SELECT snowflake_from_format('20250623131730192-1-0') AS id,
       snowflake_format(snowflake_from_format('20250623131730192-1-0')) AS back;
SELECT snowflake_from_timestamp('2025-06-23 13:17:30.192+00') AS smallest,
       snowflake_from_timestamp('2025-06-23 13:17:30.1925+00') AS same_ms,
       snowflake_from_timestamp('2025-06-23 13:17:30.193+00') AS next_ms;
SELECT count(*) AS rows_for_null FROM snowflake_parse(NULL);

-- Scalar helpers: the settings' layout (STABLE) and a layout passed in
-- (IMMUTABLE, for generated columns and expression indexes).
SELECT snowflake_timestamp(id) AS ts, snowflake_machine_id(id) AS machine, snowflake_sequence(id) AS seq
  FROM (VALUES ((1::bigint << 22) | (5 << 12) | 7)) v(id);
SELECT snowflake_timestamp(id, '2025-01-01 00:00:00+00', 10, 12) AS ts,
       snowflake_machine_id(id, '2025-01-01 00:00:00+00', 10, 12) AS machine,
       snowflake_sequence(id, '2025-01-01 00:00:00+00', 10, 12) AS seq,
       snowflake_machine_id(id, '2025-01-01 00:00:00+00', 12, 10) AS machine_as_12_bits
  FROM (VALUES ((1::bigint << 22) | (5 << 12) | 7)) v(id);
CREATE TABLE flakes (id bigint PRIMARY KEY,
                     made_at timestamptz GENERATED ALWAYS AS
                         (snowflake_timestamp(id, '2025-01-01 00:00:00+00', 10, 12)) STORED);
CREATE INDEX flakes_by_machine ON flakes ((snowflake_machine_id(id, '2025-01-01 00:00:00+00', 10, 12)));
INSERT INTO flakes VALUES ((1::bigint << 22) | (5 << 12) | 7);
SELECT * FROM flakes;
DROP TABLE flakes;
SELECT snowflake_timestamp(1, '2025-01-01 00:00:00+00', 40, 23);
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_sequence(1, '2025-01-01 00:00:00+00', -1, 12);
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_machine_id(-1, '2025-01-01 00:00:00+00', 10, 12);
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_timestamp(1, 'infinity', 10, 12);
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_format(NULL) IS NULL AS strict_format, snowflake_from_timestamp(NULL) IS NULL AS strict_bound;

-- Live IDs: increasing, with this server's machine id, time close to now.
CREATE TEMP TABLE drawn AS SELECT n, snowflake_nextval() AS id FROM generate_series(1, 20000) n;
SELECT count(*) = count(DISTINCT id) AS distinct_ids,
       bool_and(id < next_id) AS increasing
  FROM (SELECT id, lead(id) OVER (ORDER BY n) AS next_id FROM drawn) d WHERE next_id IS NOT NULL;
SELECT p.machine_id, abs(extract(epoch FROM p.ts - now())) < 60 AS near_now
  FROM drawn, snowflake_parse(drawn.id) p WHERE n = 1;
SELECT snowflake_from_format(snowflake_format(id)) = id AS round_trip FROM drawn WHERE n = 20000;
SELECT snowflake_from_timestamp(now() - interval '1 minute') < min(id) AS bounded_below FROM drawn;

-- The JavaScript-safe variant stays below 2^53.
SELECT bool_and(id < 9007199254740992) AS below_2_53, count(DISTINCT id) AS ids
  FROM (SELECT snowflake_js_nextval() AS id FROM generate_series(1, 5000)) j;
SELECT machine_id, sequence >= 0 AS has_sequence FROM snowflake_js_parse(snowflake_js_nextval());
SELECT * FROM snowflake_js_parse(9007199254740991);

-- Bad input.
SELECT * FROM snowflake_parse(-1);
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_format(-42);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM snowflake_js_parse(9007199254740992);
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_format('not an id');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_format('20250623131730192-1024-0');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_format('20250623131730192-1-4096');
\echo :LAST_ERROR_SQLSTATE
-- The text form is strict: no white space, no leading zeros.
SELECT snowflake_from_format(' 20250623131730192-1-0');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_format('20250623131730192-1-0 ');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_format('20250623131730192-01-0');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_format('20250623131730192-1-00');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_format('20251323131730192-1-0');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_format('20241231235959999-0-0');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_timestamp('2024-12-31 23:59:59.999+00');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_timestamp('2095-01-01 00:00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_timestamp('294000-01-01 00:00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_timestamp('infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_from_timestamp('-infinity');
\echo :LAST_ERROR_SQLSTATE

-- Settings are fixed at server start.
SET pg_idgen.machine_id = '3';
\echo :LAST_ERROR_SQLSTATE
SHOW pg_idgen.snowflake_epoch;

-- snowflake_status is for monitoring roles only; drawing needs a grant, as
-- nextval() needs USAGE (privileges.sql has the rest).
CREATE ROLE idgen_snowflake_nobody;
SET ROLE idgen_snowflake_nobody;
SELECT count(*) FROM snowflake_status;
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_nextval() > 0 AS drawn_without_a_grant;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE idgen_snowflake_nobody;

-- The WAL-logged mark is never deleted, truncated or lowered (23514); the
-- keeper's row lives in pg_idgen.snowflake_database, this one stands in.
INSERT INTO snowflake_high_water (epoch_ms, time_bits, machine_bits, sequence_bits,
                                  default_high_id, javascript_high_id)
    VALUES (1735689600000, 41, 10, 12, 1000, 1000);
DELETE FROM snowflake_high_water;
\echo :LAST_ERROR_SQLSTATE
UPDATE snowflake_high_water SET default_high_id = 999;
\echo :LAST_ERROR_SQLSTATE
UPDATE snowflake_high_water SET javascript_high_id = 999;
\echo :LAST_ERROR_SQLSTATE
TRUNCATE snowflake_high_water;
\echo :LAST_ERROR_SQLSTATE
UPDATE snowflake_high_water SET default_high_id = 1001;
SELECT default_high_id, javascript_high_id FROM snowflake_high_water;
BEGIN;
SET LOCAL pg_idgen.allow_max_id_decrease = on;
DELETE FROM snowflake_high_water;
COMMIT;
SELECT count(*) AS rows_left FROM snowflake_high_water;

-- Settings are checked when they are set, not only at the next start.
ALTER SYSTEM SET pg_idgen.machine_id = '5000';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_idgen.machine_id = 'abc';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_idgen.snowflake_epoch = 'yesterday';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_idgen.snowflake_time_bits = 63;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_idgen.snowflake_sequence_bits = 0;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_idgen.snowflake_machine_bits = 62;
\echo :LAST_ERROR_SQLSTATE

-- Leave the database as it was found.
DROP EXTENSION pg_idgen CASCADE;
