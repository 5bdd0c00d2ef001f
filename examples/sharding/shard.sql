-- On each shard (psql -v central_host=... -v central_port=... -v central_db=...
-- -v central_user=...): reach the central server through postgres_fdw and
-- take the 'orders' ranges from there.
-- snowflake_nextval() needs pg_idgen in pg_idgen.snowflake_database too
-- (postgres by default): the shard records its snowflake mark there.
\set shard_db :DBNAME
\connect postgres
CREATE EXTENSION IF NOT EXISTS pg_idgen;
\connect :shard_db
CREATE EXTENSION IF NOT EXISTS pg_idgen;
CREATE EXTENSION IF NOT EXISTS postgres_fdw;
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
    OPTIONS (host :'central_host', port :'central_port', dbname :'central_db',
             connect_timeout '5', keepalives_idle '10', keepalives_interval '5',
             keepalives_count '3',
             -- pinned on the central server's session (segment_attach checks):
             options '-c synchronous_commit=on -c lock_timeout=10ms -c idle_in_transaction_session_timeout=5s');
CREATE USER MAPPING FOR CURRENT_USER SERVER central OPTIONS (user :'central_user');
SELECT segment_attach('orders', 'central');

-- The shard's part of orders: keys from the central ranges, plus a
-- snowflake column (each shard has its own pg_idgen.machine_id).
CREATE TABLE orders (
    id       bigint PRIMARY KEY DEFAULT segment_nextval('orders'),
    event_id bigint NOT NULL DEFAULT snowflake_nextval(),
    shard    text   NOT NULL DEFAULT current_setting('cluster_name'),
    item     text
);
