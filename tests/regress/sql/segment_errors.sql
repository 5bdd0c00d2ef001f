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

-- max_id never moves back, not even after a restart: a trigger refuses it,
-- and its hint names the way to do it on purpose.
SELECT segment_create('guarded', start => 1001);
UPDATE id_segment SET max_id = 0 WHERE biz_tag = 'guarded';
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL pg_idgen.allow_max_id_decrease = on;
UPDATE id_segment SET max_id = max_id - 1 WHERE biz_tag = 'guarded' RETURNING max_id;
ROLLBACK;
SHOW pg_idgen.allow_max_id_decrease;
CREATE ROLE idgen_plain;
SET ROLE idgen_plain;
SET pg_idgen.allow_max_id_decrease = on;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE idgen_plain;

-- A tag keeps its name: the trigger refuses a changed biz_tag.
UPDATE id_segment SET biz_tag = 'renamed' WHERE biz_tag = 'guarded';
\echo :LAST_ERROR_SQLSTATE
SELECT biz_tag FROM id_segment WHERE biz_tag IN ('guarded', 'renamed');

-- A transaction that changed or locked a tag's row gets no new range of
-- it (the worker would wait for that very transaction): it fails at once.
SELECT segment_create('held', step => 1);
SELECT segment_nextval('held') > 0 AS drew;
BEGIN;
UPDATE id_segment SET step = 1 WHERE biz_tag = 'held';
SELECT count(segment_nextval('held')) FROM generate_series(1, 1000);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT biz_tag FROM id_segment WHERE biz_tag = 'held' FOR UPDATE;
SELECT count(segment_nextval('held')) FROM generate_series(1, 1000);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- A tag created by the calling transaction works in that transaction, as
-- a sequence created there would; rolled back, it never existed.
BEGIN;
SELECT segment_create('fresh', start => 500, step => 10);
SELECT array_agg(id) FROM (SELECT segment_nextval('fresh') AS id FROM generate_series(1, 25)) s;
SELECT segment_nextval('fresh', 3);
ROLLBACK;
SELECT segment_nextval('fresh');
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT segment_create('fresh', start => 500, step => 10);
SELECT array_agg(id) FROM (SELECT segment_nextval('fresh') AS id FROM generate_series(1, 25)) s;
COMMIT;
SELECT segment_nextval('fresh') > 524 AS continues_above;

-- If the commit cannot raise max_id above the IDs a new tag handed out
-- (here a BEFORE UPDATE trigger skips the UPDATE), the COMMIT fails and
-- the tag never existed.
CREATE FUNCTION skip_update() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE TRIGGER skip_update BEFORE UPDATE ON id_segment FOR EACH ROW EXECUTE FUNCTION skip_update();
BEGIN;
SELECT segment_create('unraised', start => 7);
SELECT segment_nextval('unraised');
COMMIT;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER skip_update ON id_segment;
DROP FUNCTION skip_update();
SELECT count(*) FROM id_segment WHERE biz_tag = 'unraised';

-- A statement still running when the extension is dropped under it gets
-- no further ID once its cached range is used up.
SELECT segment_create('doomed', step => 10);
BEGIN;
DECLARE doomed_ids NO SCROLL CURSOR FOR SELECT segment_nextval('doomed') FROM generate_series(1, 1000);
FETCH 1 FROM doomed_ids;
DROP EXTENSION pg_idgen CASCADE;
FETCH 100 FROM doomed_ids;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- segment_attach: the server must exist, be postgres_fdw and have a
-- connect_timeout; the tag must exist there and not here.
CREATE EXTENSION postgres_fdw;
SELECT segment_attach('far', 'no_such_server');
\echo :LAST_ERROR_SQLSTATE
CREATE FOREIGN DATA WRAPPER not_postgres;
CREATE SERVER elsewhere FOREIGN DATA WRAPPER not_postgres;
SELECT segment_attach('far', 'elsewhere');
\echo :LAST_ERROR_SQLSTATE
CREATE SERVER no_timeout FOREIGN DATA WRAPPER postgres_fdw OPTIONS (dbname 'x');
SELECT segment_attach('far', 'no_timeout');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_attach(NULL, 'no_timeout');
\echo :LAST_ERROR_SQLSTATE
-- A "central server" that is this very database, over a Unix socket.
CREATE SCHEMA central;
CREATE TABLE central.id_segment (LIKE id_segment INCLUDING ALL);
INSERT INTO central.id_segment (biz_tag, max_id, step) VALUES ('far', 0, 10);
DO $$BEGIN
  EXECUTE format('CREATE SERVER loop FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host %L, port %L, dbname %L, connect_timeout %L)',
                 split_part(current_setting('unix_socket_directories'), ',', 1),
                 current_setting('port'), current_database(), '5');
END$$;
CREATE USER MAPPING FOR CURRENT_USER SERVER loop;
-- The server must pin the central session: synchronous_commit not off,
-- lock_timeout <= 10ms, an idle_in_transaction_session_timeout.
SELECT segment_attach('far', 'loop', remote_schema => 'central');
\echo :LAST_ERROR_SQLSTATE
ALTER SERVER loop OPTIONS (ADD options '-c synchronous_commit=off -c lock_timeout=10ms -c idle_in_transaction_session_timeout=5s');
SELECT segment_attach('far', 'loop', remote_schema => 'central');
\echo :LAST_ERROR_SQLSTATE
ALTER SERVER loop OPTIONS (SET options '-c synchronous_commit=on -c lock_timeout=10ms -c idle_in_transaction_session_timeout=5s');
-- The central server must say where it is (id_segment_origin, which
-- pg_idgen there or examples/sharding/central_by_hand.sql creates).
SELECT segment_attach('far', 'loop', remote_schema => 'central');
\echo :LAST_ERROR_SQLSTATE
CREATE VIEW central.id_segment_origin AS SELECT * FROM id_segment_origin;
SELECT segment_attach('not_there', 'loop', remote_schema => 'central');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_attach('orders', 'loop', remote_schema => 'central');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_attach('far', 'loop', remote_schema => 'central');
SELECT array_agg(id) FROM (SELECT segment_nextval('far') AS id FROM generate_series(1, 12)) s;
SELECT max_id >= 12 AS covers_every_id_drawn FROM central.id_segment WHERE biz_tag = 'far';
SELECT tag, source FROM segment_status WHERE tag = 'far';
SELECT segment_attach('far', 'loop', remote_schema => 'central');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_create('far');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_setval('far', 100000);
\echo :LAST_ERROR_SQLSTATE
-- The central table gone (renamed away): the refill's error names the
-- central server, the cause and the fix.
ALTER TABLE central.id_segment RENAME TO id_segment_away;
SELECT count(segment_nextval('far')) FROM generate_series(1, 100000);
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE central.id_segment_away RENAME TO id_segment;
-- The central row lowered below what this server took from it: refused,
-- naming the mark to raise it to (test_remote.py draws after the raise).
UPDATE central.id_segment SET max_id = 0 WHERE biz_tag = 'far';
SELECT count(segment_nextval('far')) FROM generate_series(1, 100000);
\echo :LAST_ERROR_SQLSTATE
UPDATE central.id_segment SET max_id = r.max_id_seen, version = version + 1
  FROM id_segment_remote r WHERE r.biz_tag = 'far' AND id_segment.biz_tag = 'far';
-- The central row deleted: the next refill names it (and frees the slot).
DELETE FROM central.id_segment WHERE biz_tag = 'far';
SELECT count(segment_nextval('far')) FROM generate_series(1, 100000);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO central.id_segment (biz_tag, max_id, step)
  SELECT 'far', max_id_seen, 10 FROM id_segment_remote WHERE biz_tag = 'far';
-- The row made again at the mark, and the central server on another WAL
-- timeline than at the last refill (as after a failover or a point-in-time
-- recovery): refused, naming it, until segment_central_accept() there.
CREATE OR REPLACE VIEW central.id_segment_origin AS
  SELECT system_identifier, timeline + 1 AS timeline, wal_lsn, clock, accepted_at,
         accepted_system_identifier, accepted_timeline + 1 AS accepted_timeline,
         database_oid, table_oid FROM id_segment_origin;
SELECT count(segment_nextval('far')) FROM generate_series(1, 100000);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_central_accept() IS NOT NULL AS accepted;
SELECT count(segment_nextval('far')) FROM generate_series(1, 100);
-- The foreign table's name taken by a relation that is not that table.
CREATE TABLE "central.taken@loop" (x int);
SELECT segment_attach('other', 'loop', remote_schema => 'central', remote_table => 'taken');
\echo :LAST_ERROR_SQLSTATE
DROP TABLE "central.taken@loop";
SELECT segment_drop('far');
SELECT segment_nextval('far');
\echo :LAST_ERROR_SQLSTATE
-- Dropped, its record kept (id_segment_detached): attached again while
-- the central server is on yet another timeline, with no accept since,
-- it is refused, naming the move and the recovery.
CREATE OR REPLACE VIEW central.id_segment_origin AS
  SELECT system_identifier, timeline + 2 AS timeline, wal_lsn, clock, NULL::timestamptz AS accepted_at,
         accepted_system_identifier, accepted_timeline, database_oid, table_oid FROM id_segment_origin;
SELECT segment_attach('far', 'loop', remote_schema => 'central');
\echo :LAST_ERROR_SQLSTATE
DROP USER MAPPING FOR CURRENT_USER SERVER loop;
DROP SERVER loop, no_timeout CASCADE;
DROP SERVER elsewhere;
DROP FOREIGN DATA WRAPPER not_postgres;
DROP SCHEMA central CASCADE;
DROP EXTENSION postgres_fdw;

-- Made-up tags take no slot in shared memory.
SELECT segment_nextval('made_up_' || i) FROM generate_series(1, 3) i;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM segment_status WHERE tag LIKE 'made_up_%';

-- A tag a column default uses is not dropped (as DROP SEQUENCE), unless
-- forced; a default naming a tag that does not exist is warned about at
-- commit, unless the tag is created in the same transaction.
SELECT segment_create('links');
CREATE TABLE links (id bigint PRIMARY KEY DEFAULT segment_nextval('links'), url text);
CREATE TABLE link_copies (id bigint DEFAULT segment_nextval('links'));
SELECT segment_drop('links');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_drop('links', force => true);
CREATE TABLE typo (id bigint DEFAULT segment_nextval('ordres'));
BEGIN;
CREATE TABLE later (id bigint DEFAULT segment_nextval('later'));
SELECT segment_create('later');
COMMIT;
ALTER TABLE later ALTER COLUMN id SET DEFAULT segment_nextval('latter');
SET check_function_bodies = off;
CREATE TABLE restored (id bigint DEFAULT segment_nextval('restored'));
RESET check_function_bodies;
DROP TABLE links, link_copies, typo, later, restored;

-- The Citus coordinator's functions on a server without Citus: refused,
-- saying there is nothing to do.
SELECT * FROM segment_citus_catch_up();
SELECT * FROM segment_citus_range('orders', 1, NULL);

-- A tag created again in the transaction that dropped it hands out no ID
-- (a rollback would bring the old tag back below them): 55000.
SELECT segment_create('again');
BEGIN;
SELECT segment_drop('again');
SELECT segment_create('again', start => 1000);
SELECT segment_nextval('again');
ROLLBACK;
SELECT segment_drop('again');

-- Leave the database as it was found.
DROP EXTENSION pg_idgen CASCADE;
