-- Every bad input gets an ERROR with a SQLSTATE, a message and a hint,
-- and leaves nothing behind.
\set SHOW_CONTEXT never
CREATE EXTENSION pg_idgen;
SELECT segment_create('orders', step => 100);

-- segment_nextval: NULL, empty, too long, unknown.
SELECT segment_nextval(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_nextval('');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_nextval(repeat('x', 65));
\echo :LAST_ERROR_SQLSTATE
SELECT segment_nextval(repeat('é', 40));
\echo :LAST_ERROR_SQLSTATE
SELECT segment_nextval('no_such_tag');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_nextval('orders', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_nextval('orders', NULL);
\echo :LAST_ERROR_SQLSTATE

-- segment_create: bad step, bad start, duplicate, NULLs; nothing is written.
SELECT segment_create('bad', step => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_create('bad', step => -5);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_create('bad', start => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_create('bad', start => -9223372036854775808);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_create('orders');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_create(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_create('bad', start => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_create(repeat('y', 65));
\echo :LAST_ERROR_SQLSTATE
SELECT biz_tag FROM id_segment ORDER BY 1;

-- segment_drop of a tag that is not there.
SELECT segment_drop('no_such_tag');
\echo :LAST_ERROR_SQLSTATE

-- The table refuses a step that is not positive.
\set VERBOSITY terse
UPDATE id_segment SET step = 0 WHERE biz_tag = 'orders';
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE

-- Read-only transactions get no IDs, as with nextval().
BEGIN READ ONLY;
SELECT segment_nextval('orders');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT * FROM segment_nextval('orders', 2);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- A tag that failed can be created afterwards and then works.
SELECT segment_create('no_such_tag', start => 42);
SELECT segment_nextval('no_such_tag');

-- pg_idgen.refill_timeout is a session setting with a range.
SET pg_idgen.refill_timeout = 0;
SET pg_idgen.refill_timeout = '300ms';
SHOW pg_idgen.refill_timeout;
RESET pg_idgen.refill_timeout;

-- Unknown settings under the reserved prefix are refused.
SET pg_idgen.no_such_setting = 1;
\echo :LAST_ERROR_SQLSTATE

-- segment_status is for monitoring roles only.
CREATE ROLE idgen_nobody LOGIN;
SET ROLE idgen_nobody;
SELECT count(*) FROM segment_status;
\echo :LAST_ERROR_SQLSTATE
SELECT segment_create('sneaky');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT pg_monitor TO idgen_nobody;
SET ROLE idgen_nobody;
SELECT count(*) > 0 AS sees_tags FROM segment_status;
RESET ROLE;
DROP ROLE idgen_nobody;

-- Leave the database as it was found.
DROP EXTENSION pg_idgen CASCADE;
