#!/usr/bin/env bash
# The torture suite's long form, for soak runs: 50 crash rounds and three
# minutes of load at 32 clients (the test command runs the short form);
# then the switchover and failover under Patroni with etcd five times over
# (tests/integration/test_patroni.py, once in the test command; set
# PG_IDGEN_PATRONI_ROUNDS for another count); then the Citus tests on every
# PostgreSQL Citus supports (16-18; the test command runs them on one).
# Arguments go to both pytest runs; a run of which they select no test
# (e.g. -k crash, for the Patroni one) passes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
bash tests/setup.sh

source tests/lib/pytest.sh   # run_pytest

status=0
PG_IDGEN_TORTURE=long run_pytest tests/integration/test_torture.py "$@" || status=$?
PG_IDGEN_PATRONI=1 PG_IDGEN_PATRONI_ROUNDS=${PG_IDGEN_PATRONI_ROUNDS:-5} run_pytest tests/integration/test_patroni.py "$@" || status=$?

source tests/lib/pg_versions.sh
for major in "${CITUS_MAJORS[@]}"; do
    echo; echo "== Citus on PostgreSQL $major"
    cargo pgrx install --profile suite --no-default-features --features "pg$major failpoints" \
        --pg-config "$(pg_config_for "$major")" 2>&1 | grep -E 'Finished|error' || true
    PG_BIN=$(pg_bin_for "$major") run_pytest tests/integration/test_citus.py "$@" || status=$?
done
exit "$status"
