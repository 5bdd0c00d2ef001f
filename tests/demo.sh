#!/usr/bin/env bash
# The demo: builds and installs pg_idgen, starts a throwaway cluster with
# shared_preload_libraries = 'pg_idgen', creates a table whose key is
# DEFAULT segment_nextval('orders'), inserts from four sessions at once,
# shows the IDs and the allocator's state, and leaves the cluster running.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
bash tests/setup.sh
source tests/lib/cluster.sh

dir=${PG_IDGEN_DEMO_DIR:-/tmp/pg_idgen-demo}
if [[ -d "$dir/data" ]]; then
    echo; echo "== replacing the previous demo cluster in $dir"
    cluster_stop "$dir" immediate
    rm -rf "$dir"
fi
echo; echo "== starting a cluster in $dir (Unix socket only)"
cluster_init "$dir"
cluster_start "$dir"

cluster_psql "$dir" -q <<'SQL'
CREATE EXTENSION pg_idgen;
SELECT segment_create('orders', start => 1, step => 100);
CREATE TABLE orders (
    id         bigint PRIMARY KEY DEFAULT segment_nextval('orders'),
    customer   text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
SQL

echo; echo "== four sessions insert 2,500 orders each, at the same time"
for session in 1 2 3 4; do
    cluster_psql "$dir" -q -c \
        "INSERT INTO orders (customer) SELECT 'session $session' FROM generate_series(1, 2500)" &
done
wait

cluster_psql "$dir" <<'SQL'
\echo '== which IDs each session got (ranges interleave: each session takes from the shared cache)'
SELECT customer, count(*) AS orders, min(id), max(id) FROM orders GROUP BY customer ORDER BY customer;
\echo '== the first few orders'
SELECT id, customer FROM orders ORDER BY id LIMIT 5;
\echo '== every ID distinct?'
SELECT count(*) AS orders, count(DISTINCT id) AS distinct_ids FROM orders;
\echo '== the table the worker takes ranges from (max_id = the largest ID handed out)'
SELECT * FROM id_segment;
\echo '== the allocator in shared memory'
\x on
SELECT * FROM segment_status;
SQL

cat <<MSG

The demo cluster is still running.
  connect:  psql -h $dir -U postgres
  stop:     runuser -u postgres -- $PG_BIN/pg_ctl -D $dir/data stop
MSG
