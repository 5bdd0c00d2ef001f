-- Applications as clients: blocks of IDs in one call, and base62 codes.
\set SHOW_CONTEXT never
CREATE EXTENSION pg_idgen;
SELECT segment_create('blocks', step => 100);

-- Contiguous blocks: one unless the reservation crosses a range boundary
-- (ranges taken one after another from one row are contiguous, so they
-- merge); every later call above the earlier ones.
SELECT * FROM segment_reserve('blocks', 5);
SELECT * FROM segment_reserve('blocks', 200);
SELECT segment_nextval('blocks') > 205 AS above_every_block;
SELECT count(*) AS blocks, sum(last - first + 1) AS ids FROM segment_reserve('blocks', 1000000);

-- Bad input: an ERROR each, nothing reserved.
SELECT * FROM segment_reserve('blocks', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM segment_reserve('blocks', -3);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM segment_reserve('blocks', 1000001);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM segment_reserve(NULL, 5);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM segment_reserve('blocks', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM segment_reserve('no_such_tag', 5);
\echo :LAST_ERROR_SQLSTATE
BEGIN READ ONLY;
SELECT * FROM segment_reserve('blocks', 5);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- A tag created by this very transaction reserves from it.
BEGIN;
SELECT segment_create('fresh_blocks', start => 1000);
SELECT * FROM segment_reserve('fresh_blocks', 10);
SELECT * FROM segment_reserve('fresh_blocks', 10);
COMMIT;
SELECT segment_nextval('fresh_blocks') > 1019 AS above_the_transactions_blocks;

-- Like segment_nextval, only for roles granted EXECUTE.
CREATE ROLE idgen_app LOGIN;
SET ROLE idgen_app;
SELECT * FROM segment_reserve('blocks', 5);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE idgen_app;

-- A scalar call between two rows of segment_nextval(tag, n): every ID of
-- the backend still above the one before.
SELECT bool_and(a < b) AS rows_increase, count(DISTINCT a) + count(DISTINCT b) AS distinct_ids
  FROM (SELECT segment_nextval('blocks', 20) AS a, segment_nextval('blocks') AS b) s;

-- base62: codes, their inverse, a generated column.
SELECT n, idgen_base62(n) AS code, idgen_base62_decode(idgen_base62(n)) = n AS round_trip
  FROM unnest(ARRAY[0, 9, 10, 61, 62, 3843, 3844, 9223372036854775807]::bigint[]) n;
SELECT idgen_base62_decode('007'), idgen_base62_decode('z');
SELECT idgen_base62(NULL) IS NULL AS strict, idgen_base62_decode(NULL) IS NULL AS strict_too;
SELECT idgen_base62(-1);
\echo :LAST_ERROR_SQLSTATE
SELECT idgen_base62_decode('');
\echo :LAST_ERROR_SQLSTATE
SELECT idgen_base62_decode('ab-c');
\echo :LAST_ERROR_SQLSTATE
SELECT idgen_base62_decode('AzL8n0Y58m8');
\echo :LAST_ERROR_SQLSTATE
SELECT proname, provolatile, proparallel, proisstrict FROM pg_proc
 WHERE proname LIKE 'idgen_base62%' ORDER BY 1;
SELECT segment_create('links', start => 3844);
CREATE TABLE links (
    id   bigint PRIMARY KEY DEFAULT segment_nextval('links'),
    code text GENERATED ALWAYS AS (idgen_base62(id)) STORED,
    url  text NOT NULL
);
INSERT INTO links (url) VALUES ('https://example.com/a'), ('https://example.com/b');
SELECT id, code, url FROM links ORDER BY id;
SELECT url FROM links WHERE id = idgen_base62_decode('101');

DROP TABLE links;
DROP EXTENSION pg_idgen CASCADE;
