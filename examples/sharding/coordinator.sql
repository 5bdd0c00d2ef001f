-- On the coordinator (psql -v shard1_host=... -v shard2_host=... and their
-- ports, databases and user): one orders table whose partitions are the
-- shards' tables, read through postgres_fdw.
CREATE EXTENSION IF NOT EXISTS postgres_fdw;
CREATE SERVER shard1 FOREIGN DATA WRAPPER postgres_fdw
    OPTIONS (host :'shard1_host', port :'shard1_port', dbname :'shard1_db', connect_timeout '5');
CREATE SERVER shard2 FOREIGN DATA WRAPPER postgres_fdw
    OPTIONS (host :'shard2_host', port :'shard2_port', dbname :'shard2_db', connect_timeout '5');
CREATE USER MAPPING FOR CURRENT_USER SERVER shard1 OPTIONS (user :'shard_user');
CREATE USER MAPPING FOR CURRENT_USER SERVER shard2 OPTIONS (user :'shard_user');
CREATE TABLE orders (id bigint NOT NULL, event_id bigint NOT NULL, shard text NOT NULL, item text)
    PARTITION BY LIST (shard);
CREATE FOREIGN TABLE orders_shard1 PARTITION OF orders FOR VALUES IN ('shard1')
    SERVER shard1 OPTIONS (table_name 'orders');
CREATE FOREIGN TABLE orders_shard2 PARTITION OF orders FOR VALUES IN ('shard2')
    SERVER shard2 OPTIONS (table_name 'orders');
