#!/usr/bin/env bash
# The torture suite's long form, for soak runs: 50 crash rounds and three
# minutes of load at 32 clients (the test command runs the short form).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
bash tests/setup.sh
PG_IDGEN_TORTURE=long exec .venv/bin/python -m pytest -p no:cacheprovider tests/integration/test_torture.py "$@"
