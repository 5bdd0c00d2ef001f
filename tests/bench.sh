#!/usr/bin/env bash
# The benchmark: pg_idgen against native sequences, identity and UUIDs, in
# one run on a throwaway cluster (see tests/bench/bench.py for what it
# measures). Full run: under 15 minutes on 2 cores; `--quick` for a smoke
# run. The full run writes tests/bench/results/ and, with
# --update-readme, the README's benchmark table.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
bash tests/setup.sh
echo; echo "== installing pg_idgen without the test-only failpoints"
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config 2>&1 | grep -E 'Finished|error' || true

echo; echo "== installing the benchmark's floor extension (idgen_floor)"
(cd tests/bench/floor && CARGO_TARGET_DIR="$PWD/../../../target" \
    cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config 2>&1 | grep -E 'Finished|error' || true)
test -f /usr/share/postgresql/15/extension/idgen_floor.control

if ! .venv/bin/python -c 'import matplotlib' 2>/dev/null; then
    echo; echo "== installing matplotlib into .venv"
    .venv/bin/pip install -q --disable-pip-version-check -r tests/bench/requirements.txt
fi

echo; echo "== benchmark"
exec .venv/bin/python tests/bench/bench.py "$@"
