#!/usr/bin/env bash
# The whole test suite: formatting and lints, plain #[test]s and #[pg_test]s
# (cargo pgrx test), the SQL regression files (pg_regress) and the
# integration tests (pytest, each on throwaway clusters). Exits non-zero on
# any failure. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

bash tests/setup.sh

echo; echo "== cargo fmt --check"
cargo fmt --check
echo; echo "== cargo clippy -D warnings"
cargo clippy --all-targets --features "pg15 pg_test" -- -D warnings

work=$(mktemp -d /tmp/pg_idgen-test.XXXXXX)
chown postgres: "$work"
trap 'rm -rf "$work"' EXIT

echo; echo "== cargo pgrx test (plain #[test]s and #[pg_test]s)"
cargo pgrx test pg15 --runas postgres --pgdata "$work/pgrx-data"

# cargo pgrx test installed its debug build with the test schema; put the
# release build back for the rest of the suite.
echo; echo "== reinstalling the release build"
cargo pgrx install --release --features failpoints --pg-config /usr/lib/postgresql/15/bin/pg_config 2>&1 | grep -E 'Finished|error' || true

echo; echo "== SQL regression files"
bash tests/regress/run.sh

echo; echo "== integration tests"
.venv/bin/python -m pytest -p no:cacheprovider tests/integration "$@"
