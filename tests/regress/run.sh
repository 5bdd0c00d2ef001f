#!/usr/bin/env bash
# Runs the SQL regression files (tests/regress/sql/*.sql, expected output in
# tests/regress/expected/) with pg_regress against a throwaway cluster.
# Pass file names (without .sql) to run only those.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib/cluster.sh"

dir=$(mktemp -d /tmp/pg_idgen-regress.XXXXXX)
trap 'cluster_stop "$dir" immediate; rm -rf "$dir"' EXIT
cluster_init "$dir" "pg_idgen.refill_timeout = '5s'"
cluster_start "$dir"
# pg_idgen.snowflake_database (postgres): where the snowflake mark is WAL-logged.
cluster_psql "$dir" -q -c 'CREATE EXTENSION pg_idgen'

tests=("$@")
if ((${#tests[@]} == 0)); then
    for f in "$here"/sql/*.sql; do tests+=("$(basename "$f" .sql)"); done
fi
out="$dir/out"
mkdir -p "$out"
chown -R postgres: "$out"
status=0
"$PG_BIN/../lib/pgxs/src/test/regress/pg_regress" \
    --inputdir="$here" --outputdir="$out" --bindir="$PG_BIN" \
    --host="$dir" --user=postgres --dbname=idgen_regress "${tests[@]}" || status=$?
if ((status != 0)); then
    cat "$out/regression.diffs" 2>/dev/null || true
    # Keep the actual output where a developer can inspect or adopt it.
    mkdir -p "$here/results" && cp "$out"/results/*.out "$here/results/" 2>/dev/null || true
fi
exit $status
