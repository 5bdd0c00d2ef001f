#!/usr/bin/env bash
# The benchmark: pg_idgen against native sequences, identity and UUIDs, in
# one run on a throwaway cluster (see tests/bench/bench.py for what it
# measures). Full run: under 15 minutes on 2 cores; `--quick` for a smoke
# run. The full run writes tests/bench/results/ and, with
# --update-readme, the README's benchmark table (which names the
# PostgreSQL version it ran on).
#
#   bash tests/bench.sh [--pg 15|16|17|18] [--quick] [--update-readme]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

major=15
args=()
while (($#)); do
    case $1 in
        --pg) major=$2; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done

bash tests/setup.sh
source tests/pg_versions.sh
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

echo; echo "== benchmark"
exec .venv/bin/python tests/bench/bench.py "${args[@]}"
