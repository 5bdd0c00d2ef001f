#!/usr/bin/env bash
# Runs the SQL regression files (tests/regress/sql/*.sql, expected output in
# tests/regress/expected/) with pg_regress against a throwaway cluster.
# Pass file names (without .sql) to run only those.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib/cluster.sh"

# Files named no_machine_id*.sql run on a second cluster whose
# pg_idgen.machine_id is left unset (the errors only such a server gives);
# the others on one where it is set.
dir=$(mktemp -d /tmp/pg_idgen-regress.XXXXXX)
unset_dir=$(mktemp -d /tmp/pg_idgen-regress-unset.XXXXXX)
trap 'cluster_stop "$dir" immediate; cluster_stop "$unset_dir" immediate; rm -rf "$dir" "$unset_dir"' EXIT

tests=("$@")
if ((${#tests[@]} == 0)); then
    for f in "$here"/sql/*.sql; do tests+=("$(basename "$f" .sql)"); done
fi
set_tests=() unset_tests=()
for t in "${tests[@]}"; do
    if [[ $t == no_machine_id* ]]; then unset_tests+=("$t"); else set_tests+=("$t"); fi
done

status=0
# run_on DIR TESTS...: a cluster in DIR (made by the caller), the
# extension in postgres (pg_idgen.snowflake_database, where the snowflake
# mark is WAL-logged), and pg_regress on TESTS.
run_on() {
    local dir=$1; shift
    cluster_start "$dir"
    cluster_psql "$dir" -q -c 'CREATE EXTENSION pg_idgen'
    local out="$dir/out"
    mkdir -p "$out"
    chown -R postgres: "$out"
    "$PG_BIN/../lib/pgxs/src/test/regress/pg_regress" \
        --inputdir="$here" --outputdir="$out" --bindir="$PG_BIN" \
        --host="$dir" --user=postgres --dbname=idgen_regress "$@" || {
        status=1
        cat "$out/regression.diffs" 2>/dev/null || true
        # Keep the actual output where a developer can inspect or adopt it.
        mkdir -p "$here/results" && cp "$out"/results/*.out "$here/results/" 2>/dev/null || true
    }
}
if ((${#set_tests[@]})); then
    cluster_init "$dir" "pg_idgen.refill_timeout = '5s'"
    run_on "$dir" "${set_tests[@]}"
fi
if ((${#unset_tests[@]})); then
    cluster_init "$unset_dir" "pg_idgen.refill_timeout = '5s'" "pg_idgen.machine_id = ''"
    run_on "$unset_dir" "${unset_tests[@]}"
fi
exit $status
