# run_pytest ARGS...: the integration tests' pytest from the project's
# virtual environment (tests/setup.sh makes it), run from the repository's
# top, listing its 15 slowest tests (what the suite's time goes to:
# docs/testing.md). "No tests selected" (exit 5, e.g. with -k) is no
# failure. Source this file.
run_pytest() {
    local rc=0
    .venv/bin/python -m pytest -p no:cacheprovider --durations=15 "$@" || rc=$?
    ((rc == 5)) && rc=0
    return "$rc"
}
