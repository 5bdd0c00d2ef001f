-- The URL shortener's schema: a links table keyed by segment_nextval('links')
-- with its short code generated from the key by idgen_base62. Run it once
-- per database (it is idempotent): psql -f examples/shortener/schema.sql
-- or `python examples/shortener/shorten.py --init`. Needs pg_idgen in
-- shared_preload_libraries; the role running shorten.py needs INSERT and
-- SELECT on links and EXECUTE on segment_nextval(text).
CREATE EXTENSION IF NOT EXISTS pg_idgen;

-- IDs start at 62^2 = 3844, so every code has three characters or more
-- ('100'); step 1000: one update of id_segment per thousand links or so.
SELECT segment_create('links', start => 3844, step => 1000)
 WHERE NOT EXISTS (SELECT FROM id_segment WHERE biz_tag = 'links');

CREATE TABLE IF NOT EXISTS links (
    id         bigint PRIMARY KEY DEFAULT segment_nextval('links'),
    code       text GENERATED ALWAYS AS (idgen_base62(id)) STORED UNIQUE,
    url        text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
