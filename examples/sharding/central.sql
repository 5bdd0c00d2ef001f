-- On the central server: the one id_segment every shard draws from.
CREATE EXTENSION IF NOT EXISTS pg_idgen;
SELECT segment_create('orders', step => 1000);
