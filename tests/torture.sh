#!/usr/bin/env bash
# The torture suite's long form, for soak runs: 50 crash rounds, three
# minutes of load at 32 clients and 40,000 refills raced by four sessions
# (the test command runs the short forms);
# then the switchover and failover under Patroni with etcd five times over
# (tests/integration/test_patroni.py, once in the test command; set
# PG_IDGEN_PATRONI_ROUNDS for another count); then the Citus tests on every
# PostgreSQL Citus supports (16-18; the test command runs them on one);
# last, `cargo pgrx test` on every version (the test command: on 15).
# Arguments go to both pytest runs; a run of which they select no test
# (e.g. -k crash, for the Patroni one) passes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# The test command's builds (tests/test.sh says why).
export CARGO_PROFILE_DEV_DEBUG=0 CARGO_INCREMENTAL=0 CARGO_PGRX_DISABLE_GC_SECTIONS_WORKAROUND=1
bash tests/setup.sh

source tests/lib/pytest.sh   # run_pytest

status=0
PG_IDGEN_TORTURE=long run_pytest tests/integration/test_torture.py \
    tests/integration/test_segment.py::test_four_sessions_racing_refills_never_share_an_id "$@" || status=$?
PG_IDGEN_PATRONI=1 PG_IDGEN_PATRONI_ROUNDS=${PG_IDGEN_PATRONI_ROUNDS:-5} run_pytest tests/integration/test_patroni.py "$@" || status=$?

source tests/lib/pg_versions.sh
for major in "${CITUS_MAJORS[@]}"; do
    echo; echo "== Citus on PostgreSQL $major"
    cargo pgrx install --no-default-features --features "pg$major failpoints" \
        --pg-config "$(pg_config_for "$major")" 2>&1 | grep -E 'Finished|error' || true
    PG_BIN=$(pg_bin_for "$major") run_pytest tests/integration/test_citus.py "$@" || status=$?
done

# The #[pg_test]s on every version (the test command runs them on 15), each
# followed by the test command's build again (cargo pgrx test installs its own).
pgdata=$(mktemp -d /tmp/pg_idgen-torture-pgrx.XXXXXX)
chown postgres: "$pgdata"
for major in "${PG_IDGEN_VERSIONS[@]}"; do
    echo; echo "== cargo pgrx test pg$major"
    cargo pgrx test "pg$major" --no-default-features --features "pg$major" --runas postgres \
        --pgdata "$pgdata/$major" || status=$?
    cargo pgrx install --no-default-features --features "pg$major failpoints" \
        --pg-config "$(pg_config_for "$major")" 2>&1 | grep -E 'Finished|error' || true
done
rm -rf "$pgdata"
exit "$status"
