# Throwaway PostgreSQL clusters for the demo, the tests and the benchmark.
# Source this file. A cluster runs as the `postgres` user, listens only on a
# Unix socket inside its own temporary directory (listen_addresses = ''),
# and loads pg_idgen through shared_preload_libraries: the settings of
# cluster.conf, which cluster.py (the integration tests' clusters) reads too.

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
# The settings every cluster starts with, shared with cluster.py.
CLUSTER_CONF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster.conf

# cluster_init DIR [postgresql.conf lines...]: a new cluster in DIR/data.
cluster_init() {
    local dir=$1; shift
    mkdir -p "$dir"
    chown postgres: "$dir"
    runuser -u postgres -- "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust \
        --no-sync -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log"; return 1; }
    {
        local line
        while IFS= read -r line; do
            [[ -z $line || $line == "#"* ]] && continue
            echo "${line//@DIR@/"$dir"}"
        done <"$CLUSTER_CONF"
        for line in "$@"; do echo "$line"; done
    } >>"$dir/data/postgresql.conf"
}

# cluster_start DIR: starts it and waits until it accepts connections.
cluster_start() {
    local dir=$1
    # No Rust backtraces in error DETAILs: clients see PostgreSQL's messages.
    # The server's own lib directory first: the relocatable 16-18 builds
    # carry their libpq there, which postgres_fdw needs (the system's is
    # older).
    env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE LD_LIBRARY_PATH="$PG_BIN/../lib" \
        runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null \
        || { tail -20 "$dir/server.log"; return 1; }
}

# cluster_stop DIR [mode]: stops it (fast by default).
cluster_stop() {
    local dir=$1 mode=${2:-fast}
    runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop >/dev/null 2>&1 || true
}

# cluster_psql DIR [psql args...]: psql as postgres over the cluster's socket.
cluster_psql() {
    local dir=$1; shift
    "$PG_BIN/psql" -X -v ON_ERROR_STOP=1 -h "$dir" -U postgres "$@"
}
