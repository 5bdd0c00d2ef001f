#!/usr/bin/env bash
# The whole test suite, on every supported PostgreSQL: formatting and lints,
# the docs site, then per version the SQL regression files (pg_regress) and
# the integration tests (pytest, on throwaway clusters, several at a time).
# PostgreSQL 15 runs everything, and `cargo pgrx test` (the plain #[test]s
# and the #[pg_test]s), and a switchover and a failover under Patroni
# (Debian's patroni runs Debian's 15); 16, 17 and 18 run the core
# integration tests (CORE_TESTS: concurrency, crash and restart, the
# calling-context matrix, DDL lifecycle, blocks, a central server and
# leases, the lease keeper's attackers, a failover to a standby, and
# pg_upgrade from the version tested just before), and 17 Citus and
# two-way logical replication too. Last, the PostgreSQL 15 .deb is
# installed, used and removed. Exits non-zero on any failure.
# `.ci/run` calls exactly this.
#
# Where the time goes (docs/testing.md keeps a run's figures): builds, and
# the integration tests' servers, on two cores. Every build here is cargo's
# dev profile without debug information (CARGO_PROFILE_DEV_DEBUG=0 below),
# so cargo pgrx test, the builds the tests install, the old releases
# test_upgrade.py builds and the package share one set of compiled
# dependencies per version; the release profile is built by
# `bash tests/package.sh` and the benchmark.
#
#   bash tests/test.sh                 # 15, 16, 17 and 18
#   bash tests/test.sh --pg 17         # one version (repeat --pg for more)
#   bash tests/test.sh -- -k contexts  # pytest arguments after --
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# One set of compiled dependencies per version (see "Where the time goes"):
# no debug information; no incremental caches, which a fresh clone never
# reuses; and cargo-pgrx's --no-gc-sections link argument left out, as a
# rustflag it made every crate of the extension's build differ from the
# test harness's (the schema's section is kept on Debian's binutils anyway:
# a build that lost it fails at `cargo pgrx install`).
export CARGO_PROFILE_DEV_DEBUG=0 CARGO_INCREMENTAL=0 CARGO_PGRX_DISABLE_GC_SECTIONS_WORKAROUND=1

versions=()
pytest_args=()
while (($#)); do
    case $1 in
        --pg) versions+=("$2"); shift 2 ;;
        --) shift; pytest_args=("$@"); break ;;
        *) pytest_args+=("$1"); shift ;;
    esac
done

PG_IDGEN_SETUP_INSTALL=0 bash tests/setup.sh
SETUP_SECONDS=$SECONDS
source tests/lib/pg_versions.sh
((${#versions[@]})) || versions=("${PG_IDGEN_VERSIONS[@]}")
for major in "${versions[@]}"; do require_pg "$major"; done

# The integration tests every version runs; 15 runs all of them.
CORE_TESTS=(
    tests/integration/test_contexts.py
    tests/integration/test_segment.py::test_four_sessions_racing_refills_never_share_an_id
    tests/integration/test_segment.py::test_ids_drawn_in_rolled_back_transactions_are_never_reused
    tests/integration/test_segment.py::test_a_waiting_call_shows_its_wait_event
    tests/integration/test_snowflake.py::test_four_sessions_of_a_million_ids_never_collide
    tests/integration/test_snowflake.py::test_a_crash_never_repeats_a_snowflake_id
    tests/integration/test_snowflake.py::test_a_restart_with_the_clock_an_hour_back_issues_only_larger_ids
    tests/integration/test_max_id_guard.py
    tests/integration/test_creating_transaction.py
    tests/integration/test_ddl_and_workers.py
    tests/integration/test_blocks.py
    tests/integration/test_examples.py
    tests/integration/test_remote.py::test_shards_and_a_classic_version_cas_client_never_share_an_id
    tests/integration/test_lease.py::test_three_servers_starting_at_once_get_three_machine_ids
    "tests/integration/test_security.py::test_the_lease_keeper_never_touches_a_table_or_view_a_role_planted_before_set_up"
    tests/integration/test_security.py::test_a_foreign_table_a_role_without_trust_owns_is_refused
    tests/integration/test_security.py::test_a_schema_named_after_the_superuser_does_not_redirect_the_lease_keeper
    tests/integration/test_security.py::test_the_snowflake_keeper_writes_its_mark_as_the_tables_owner
    "tests/integration/test_failover.py::test_a_promoted_standby_continues_above_every_replicated_id[right]"
    tests/integration/test_pg_upgrade.py
)

# The tests run three at a time (a module's tests that share its module
# clusters in one worker: conftest.py marks them; every other test goes to
# whichever worker is free): a test waits on its servers part of the time,
# so three workers keep two cores busy. The torture tests run alone after
# them (they load the machine on purpose, and print their tally
# from the controlling process), and on 15 test_upgrade.py too: it renames
# old releases' libraries over the installed one, which a server started
# by another worker meanwhile would load.
# Citus (16-18; tests/setup.sh builds it) on one version here, on all three
# in tests/torture.sh.
CITUS_TESTED_ON=17

PARALLEL=(-n 3 --dist loadgroup)
# 15's run of every test leaves a core idle a seventh of the time with three.
PARALLEL_15=(-n 4 --dist loadgroup)
ALONE_15=(tests/integration/test_upgrade.py tests/integration/test_torture.py)
ALONE_CORE=(tests/integration/test_torture.py::test_crash_loop_never_repeats_an_id)

source tests/lib/pytest.sh   # run_pytest

# How long each layer took, printed at the end (docs/testing.md keeps a
# run's figures): `lap NAME` closes the layer that began at the last lap.
LAP_START=$SECONDS
LAPS=()
lap() {
    LAPS+=("$(printf '%6d s  %s' $((SECONDS - LAP_START)) "$1")")
    LAP_START=$SECONDS
}
print_laps() {
    ((${#LAPS[@]})) || return 0
    echo; echo "== time per layer"
    printf '%s\n' "${LAPS[@]}"
    printf '%6d s  total\n' "$SECONDS"
}

echo; echo "== cargo fmt --check"
cargo fmt --check
echo; echo "== cargo clippy -D warnings"
cargo clippy --all-targets --features "pg15 pg_test failpoints" -- -D warnings
# The benchmark's in-process ceiling shares the pure modules: keep it building.
(cd tests/bench/ceiling && cargo fmt --check && cargo clippy --release -q -- -D warnings)
lap "set-up ($SETUP_SECONDS s of it), cargo fmt, clippy"

work=$(mktemp -d /tmp/pg_idgen-test.XXXXXX)
chown postgres: "$work"
trap 'rm -rf "$work"; print_laps' EXIT

# The docs site: a broken link, a missing page or an unknown anchor fails.
echo; echo "== mkdocs build --strict (docs/)"
.venv/bin/mkdocs build --strict --quiet --site-dir "$work/site"
lap "mkdocs build --strict"
# (Its SQL runs in tests/integration/test_docs_snippets.py, with 15's.)

previous=
for major in "${versions[@]}"; do
    pg_config=$(pg_config_for "$major")
    features=(--no-default-features --features "pg$major")
    echo; echo "======== PostgreSQL $major ($("$pg_config" --version))"

    if [[ $major == "$PG_DEBIAN_MAJOR" ]]; then
        # The plain #[test]s do not depend on the version, and the
        # #[pg_test]s' glue is what every version's regression files and
        # integration tests run: once, on 15 (on every version in
        # tests/torture.sh).
        echo; echo "== cargo pgrx test pg$major (plain #[test]s and #[pg_test]s)"
        cargo pgrx test "pg$major" "${features[@]}" --runas postgres --pgdata "$work/pgrx-data-$major"
        lap "$major: cargo pgrx test (build and run)"
    fi

    # Over cargo pgrx test's build (with the test schema): a build with the
    # test-only failpoints, for the rest.
    echo; echo "== installing pg_idgen (failpoints) into PostgreSQL $major"
    cargo pgrx install --no-default-features --features "pg$major failpoints" \
        --pg-config "$pg_config" 2>&1 | grep -E 'Finished|error' || true
    lap "$major: build and install"

    export PG_BIN
    PG_BIN=$(pg_bin_for "$major")
    echo; echo "== SQL regression files"
    bash tests/regress/run.sh
    lap "$major: SQL regression files"

    # pg_upgrade from the version tested just before, whose build is
    # installed; 15 -> 16 starts from PyPI's 15.19 (tests/lib/pg_versions.sh
    # says why), given the build just installed into Debian's 15.
    unset PG_IDGEN_UPGRADE_FROM
    if [[ -n $previous && $previous == $((major - 1)) ]]; then
        export PG_IDGEN_UPGRADE_FROM
        PG_IDGEN_UPGRADE_FROM=$(pg_bin_for "$previous")
        if [[ $previous == "$PG_DEBIAN_MAJOR" ]]; then
            from=$(pg_config_for "$previous") to="$PG_UPGRADE_SOURCE_15/bin/pg_config"
            cp "$("$from" --pkglibdir)/pg_idgen.so" "$("$to" --pkglibdir)/"
            cp "$("$from" --sharedir)"/extension/pg_idgen* "$("$to" --sharedir)/extension/"
            PG_IDGEN_UPGRADE_FROM="$PG_UPGRADE_SOURCE_15/bin"
        fi
    fi
    echo; echo "== integration tests"
    if [[ $major == "$PG_DEBIAN_MAJOR" ]]; then
        # Debian's patroni runs Debian's PostgreSQL: test_patroni.py on 15.
        PG_IDGEN_PATRONI=1 run_pytest "${PARALLEL_15[@]}" tests/integration \
            "${ALONE_15[@]/#/--ignore=}" "${pytest_args[@]}"
        alone=("${ALONE_15[@]}")
    else
        citus=()
        # With Citus: two-way logical replication, which needs 16+.
        [[ $major == "$CITUS_TESTED_ON" ]] && citus=(tests/integration/test_citus.py
            tests/integration/test_replication.py::test_two_way_replication_of_one_tag_is_refused_not_shared)
        run_pytest "${PARALLEL[@]}" "${CORE_TESTS[@]}" "${citus[@]}" "${pytest_args[@]}"
        alone=("${ALONE_CORE[@]}")
    fi
    lap "$major: integration tests, in parallel"
    echo; echo "== integration tests run alone"
    run_pytest "${alone[@]}" "${pytest_args[@]}"
    lap "$major: integration tests run alone"
    previous=$major
done

if [[ " ${versions[*]} " == *" $PG_DEBIAN_MAJOR "* ]]; then
    # The packaging is under test here, not the code generation: a debug
    # build, from the dependencies compiled above.
    echo; echo "== packages: the PostgreSQL 15 .deb (a debug build) built, installed, used and removed"
    PG_BIN=$(pg_bin_for "$PG_DEBIAN_MAJOR") bash tests/package.sh --pg "$PG_DEBIAN_MAJOR" --debug --test
    lap "packages: the .deb built, installed, used, removed"
fi
