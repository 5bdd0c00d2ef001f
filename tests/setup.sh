#!/usr/bin/env bash
# Installs everything pg_idgen's demo, tests and benchmark need on Debian 12
# with Rust, then builds and installs the extension into Debian's
# PostgreSQL 15. Idempotent: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-contrib libclang-dev clang sudo faketime)

step() { printf '\n== %s\n' "$*"; }

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    step "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [[ "$(cargo pgrx --version 2>/dev/null)" != *"0.18.1"* ]]; then
    step "installing cargo-pgrx 0.18.1 (about 4 minutes)"
    cargo install cargo-pgrx --version 0.18.1 --locked
fi

if ! grep -q '^pg15' "${PGRX_HOME:-$HOME/.pgrx}/config.toml" 2>/dev/null; then
    step "pointing cargo-pgrx at Debian's PostgreSQL 15"
    cargo pgrx init --pg15 "$PG_CONFIG"
fi

if ! .venv/bin/python -c 'import psycopg, pytest' 2>/dev/null; then
    step "installing the integration tests' Python packages into .venv"
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check -r tests/integration/requirements.txt
fi

step "building and installing pg_idgen (release)"
cargo pgrx install --release --features failpoints --pg-config "$PG_CONFIG" 2>&1 | grep -E 'Installing|Finished|error|warning' || true
test -f /usr/lib/postgresql/15/lib/pg_idgen.so
