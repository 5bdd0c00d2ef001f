-- Segment IDs as a user meets them: create a tag, draw IDs, use it as a
-- column default, read the dashboard.
\set SHOW_CONTEXT never
CREATE EXTENSION pg_idgen;

SELECT segment_create('orders', start => 1, step => 1000);
SELECT biz_tag, max_id, step, version FROM id_segment;

SELECT segment_nextval('orders') AS first_id;
SELECT segment_nextval('orders') FROM generate_series(1, 3);
SELECT * FROM segment_nextval('orders', 4);
SELECT segment_nextval('orders', 0);

-- The worker took the first range in its own committed transaction.
SELECT biz_tag, max_id >= 1000 AS first_range_taken, version >= 1 AS cas_bumped FROM id_segment;

CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'), item text);
INSERT INTO orders (item) VALUES ('apple'), ('pear'), ('plum');
SELECT id, item FROM orders ORDER BY id;

-- A rolled-back transaction does not give its IDs back.
BEGIN;
SELECT segment_nextval('orders') AS drawn_in_aborted_transaction;
ROLLBACK;
SELECT segment_nextval('orders') AS after_rollback;

-- The start value is the first ID handed out; the tag is independent of others.
SELECT segment_create('invoices', start => 5000, step => 10);
SELECT segment_nextval('invoices') FROM generate_series(1, 12);

SELECT tag, next_id, range_first <= next_id AND next_id <= range_last AS in_range, step, refills >= 1 AS refilled,
       ids_taken, last_error
  FROM segment_status ORDER BY tag;

-- A plain UPDATE of step takes effect at the next refill.
UPDATE id_segment SET step = 3 WHERE biz_tag = 'invoices';
SELECT min(id), max(id), count(DISTINCT id)
  FROM (SELECT segment_nextval('invoices') AS id FROM generate_series(1, 500)) drawn;
SELECT step FROM segment_status WHERE tag = 'invoices';

-- segment_status lists every tag of the database, idle ones too (what
-- id_segment says, nothing cached), each once.
SELECT segment_create('idle', step => 50);
SELECT tag, source, step, remaining_in_range, refills, worker_pid FROM segment_status WHERE tag = 'idle';
SELECT segment_nextval('idle');
SELECT tag, source, step, refills > 0 AS refilled FROM segment_status WHERE tag = 'idle';
SELECT count(*) = count(DISTINCT tag) AS each_tag_once FROM segment_status;
SELECT segment_drop('idle');

-- segment_currval and segment_setval, as currval and setval.
SELECT segment_create('counter', step => 100);
SELECT segment_currval('counter');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_nextval('counter') AS first, segment_currval('counter') AS current;
SELECT segment_setval('counter', 5000);
SELECT segment_currval('counter') AS after_setval;
SELECT segment_nextval('counter') > 5000 AS above_the_value, segment_currval('counter') > 5000 AS current_follows;
SELECT max_id >= 5000 AS row_moved FROM id_segment WHERE biz_tag = 'counter';
-- segment_setval is transactional, and so is the currval it sets: a
-- rollback, of the transaction or of a savepoint, puts back the one before.
SELECT segment_create('rolled', step => 100);
BEGIN;
SELECT segment_setval('rolled', 9000);
SELECT segment_currval('rolled') AS in_its_transaction;
ROLLBACK;
SELECT segment_currval('rolled');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_setval('rolled', 7000);
BEGIN;
SAVEPOINT s;
SELECT segment_setval('rolled', 8000);
ROLLBACK TO SAVEPOINT s;
SELECT segment_currval('rolled') AS after_the_savepoint_rolled_back;
SAVEPOINT t;
SELECT segment_setval('rolled', 8500);
RELEASE SAVEPOINT t;
COMMIT;
SELECT segment_currval('rolled') AS released_and_committed;
SELECT segment_nextval('rolled') > 8500 AS next_above_it;
-- What a rollback puts back may be an ID segment_nextval gave.
BEGIN;
SELECT segment_setval('rolled', 9500);
ROLLBACK;
SELECT segment_currval('rolled') AS the_last_nextval;
BEGIN;
SAVEPOINT u;
SELECT segment_setval('rolled', 9600);
ROLLBACK TO SAVEPOINT u;
SELECT segment_currval('rolled') AS still_the_last_nextval;
COMMIT;
SELECT segment_setval('counter', 10);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_setval('counter', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_setval('no_such_tag', 10);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_setval(NULL, 10);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_currval(NULL);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT segment_create('brand_new');
SELECT segment_setval('brand_new', 10);
ROLLBACK;
\echo :LAST_ERROR_SQLSTATE
-- Rolled back, the row stays where it was; the cache given up is a gap.
BEGIN;
SELECT segment_setval('counter', 1000000);
SELECT segment_nextval('counter');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT segment_nextval('counter') BETWEEN 5001 AND 1000000 AS not_moved;
SELECT segment_drop('counter');

-- segment_drop removes the row and the cached ranges.
SELECT segment_drop('invoices');
SELECT count(*) FROM id_segment WHERE biz_tag = 'invoices';
SELECT count(*) FROM segment_status WHERE tag = 'invoices';

-- The last IDs of the bigint range, then the end of the tag.
SELECT segment_create('almost_done', start => 9223372036854775806, step => 1000);
SELECT segment_nextval('almost_done');
SELECT segment_nextval('almost_done');
SELECT segment_nextval('almost_done');
\echo :LAST_ERROR_SQLSTATE

-- Leave the database as it was found.
DROP EXTENSION pg_idgen CASCADE;
