#!/usr/bin/env bash
# The benchmark: pg_idgen against native sequences, identity and UUIDs, in
# one run on a throwaway cluster (see tests/bench/bench.py for what it
# measures), then tags attached to a slow central server (two shards, see
# tests/bench/remote.py), then bulk loads and IDs fetched by a client
# (tests/bench/bulk.py), then this tree against release 0.2.0 on a copy of
# a relocatable PostgreSQL (tests/bench/release_delta.py; with --pg 16, 17
# or 18 only). Full run: under 15 minutes on 2 cores, under a minute more
# for the remote part, about 4 for the bulk part and 5 for the release
# part; `--quick` for a smoke run; `--only bench`, `--only remote`,
# `--only bulk` or `--only release` for one of them.
# The full run writes tests/bench/results/ and, with --update-readme, the
# README's benchmark tables (which name the PostgreSQL version they ran
# on and the command that made them).
#
#   bash tests/bench.sh [--pg 15|16|17|18] [--only bench|remote|bulk|release] [--quick] [--update-readme]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

major=15
only=
args=()
while (($#)); do
    case $1 in
        --pg) major=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
case $only in
    ''|bench|remote|bulk|release) ;;
    *) echo "--only takes bench, remote, bulk or release, not '$only'" >&2; exit 2 ;;
esac

# Not setup.sh's own install (into PostgreSQL 15): the build for the
# version asked for is installed below.
PG_IDGEN_SETUP_INSTALL=0 bash tests/setup.sh
source tests/lib/pg_versions.sh
require_pg "$major"
pg_config=$(pg_config_for "$major")
export PG_BIN
PG_BIN=$(pg_bin_for "$major")

echo; echo "== installing pg_idgen (release, without the test-only failpoints) into PostgreSQL $major"
cargo pgrx install --release --no-default-features --features "pg$major" --pg-config "$pg_config" 2>&1 \
    | grep -E 'Finished|error' || true

echo; echo "== installing the benchmark's floor extension (idgen_floor)"
(cd tests/bench/floor && CARGO_TARGET_DIR="$PWD/../../../target" \
    cargo pgrx install --release --no-default-features --features "pg$major" --pg-config "$pg_config" 2>&1 \
    | grep -E 'Finished|error' || true)
test -f "$("$pg_config" --sharedir)/extension/idgen_floor.control"

if ! .venv/bin/python -c 'import matplotlib' 2>/dev/null; then
    echo; echo "== installing matplotlib into .venv"
    .venv/bin/pip install -q --disable-pip-version-check -r tests/bench/requirements.txt
fi

# The scripts name the command in their tables.
export PG_IDGEN_BENCH_COMMAND="bash tests/bench.sh --pg $major${only:+ --only $only}"
if [[ -z $only || $only == bench ]]; then
    echo; echo "== benchmark"
    .venv/bin/python tests/bench/bench.py "${args[@]}"
fi
if [[ -z $only || $only == remote ]]; then
    echo; echo "== benchmark: tags attached to a slow central server"
    .venv/bin/python tests/bench/remote.py "${args[@]}"
fi
if [[ -z $only || $only == bulk ]]; then
    echo; echo "== benchmark: bulk loads, and IDs from a client"
    .venv/bin/python tests/bench/bulk.py "${args[@]}"
fi
if [[ $only == release || ( -z $only && $major != "$PG_DEBIAN_MAJOR" ) ]]; then
    echo; echo "== benchmark: this tree against release 0.2.0"
    .venv/bin/python tests/bench/release_delta.py "${args[@]}"
fi
