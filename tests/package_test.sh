#!/usr/bin/env bash
# Tests the PostgreSQL 15 .deb that tests/package.sh builds, on Debian's
# PostgreSQL 15, as a DBA would use it:
#   apt-get install ./postgresql-15-pg-idgen_<version>_<arch>.deb
#   -> the files are the package's (dpkg owns them, no failpoints build);
#   -> a fresh cluster: CREATE EXTENSION, \dx and pg_extension say <version>,
#      both generators hand out IDs; the SQL regression files pass
#      (tests/regress/run.sh, on a cluster of its own);
#   apt-get remove postgresql-15-pg-idgen -> every file it installed is gone.
# Afterwards (also on failure) it reinstalls the development build the test
# suite expects (`cargo pgrx install --release --features failpoints`),
# built before the lock is taken, so PostgreSQL 15 is left as it was found.
#
# Usage: bash tests/package_test.sh [DEB]   (default: the one in target/packages)
# Normally run through `bash tests/package.sh --pg 15 --test`, which builds
# the .deb first.
#
# Debian's PostgreSQL 15 may be shared with other work on the machine: all
# that installs into it or runs a server on it happens while holding
# flock ${PG_IDGEN_PG15_LOCK:-/tmp/pg_idgen-pg15.lock}; a caller that already
# holds it sets PG_IDGEN_PG15_LOCK_HELD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# Debian's PostgreSQL 15, whatever PG_BIN the caller exported for another
# version (tests/lib/cluster.sh and tests/regress/run.sh use it).
export PG_BIN=/usr/lib/postgresql/15/bin
source tests/lib/cluster.sh

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PKG=postgresql-15-pg-idgen
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -1)
deb=${1:-target/packages/${PKG}_${version}_$(dpkg --print-architecture).deb}
[[ -f $deb ]] || { echo "package_test.sh: no $deb; build it with: bash tests/package.sh --pg 15" >&2; exit 1; }
deb=$(realpath "$deb")
[[ -x $PG_CONFIG ]] || { echo "package_test.sh: no PostgreSQL 15 at $PG_CONFIG; bash tests/setup.sh installs it" >&2; exit 1; }

passed=0 failed=0
ok()   { passed=$((passed + 1)); echo "  ok    $*"; }
bad()  { failed=$((failed + 1)); echo "  FAIL  $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
step() { printf '\n== %s\n' "$*"; }
installed() { [[ $(dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null) == installed ]]; }
apt() { DEBIAN_FRONTEND=noninteractive apt-get "$@" -y -q -o Dpkg::Use-Pty=0; }

# Build the development build now, outside the lock, so that reinstalling
# it under the lock is only a copy (same cargo invocation as the install).
step "building the development build (failpoints) to reinstall afterwards"
devlog=target/package-build/dev-pg15.log
mkdir -p target/package-build
cargo pgrx package --features failpoints --pg-config "$PG_CONFIG" \
    --out-dir target/package-build/dev-pg15 >"$devlog" 2>&1 \
    || { tail -30 "$devlog"; echo "package_test.sh: the development build failed ($devlog)" >&2; exit 1; }
grep -E '^\s+Finished' "$devlog" || true

if [[ -z ${PG_IDGEN_PG15_LOCK_HELD:-} ]]; then
    lock=${PG_IDGEN_PG15_LOCK:-/tmp/pg_idgen-pg15.lock}
    exec 9>>"$lock"
    if ! flock -n 9; then
        echo "waiting for $lock (PostgreSQL 15 is in use by other work)"
        flock 9
    fi
fi

dir=""
reinstalled=0
reinstall_dev() {
    ((reinstalled)) && return 0
    reinstalled=1
    step "reinstalling the development build (cargo pgrx install --release --features failpoints)"
    installed && apt remove "$PKG" >/dev/null 2>&1
    cargo pgrx install --release --features failpoints --pg-config "$PG_CONFIG" 2>&1 \
        | grep -E 'Installing|Finished|error' || true
}
cleanup() {
    local rc=$?
    [[ -n $dir ]] && { cluster_stop "$dir" immediate; rm -rf "$dir"; }
    reinstall_dev
    exit $rc
}
trap cleanup EXIT

libdir=$("$PG_CONFIG" --pkglibdir)
extdir=$("$PG_CONFIG" --sharedir)/extension

if installed; then
    step "$PKG is already installed (an earlier run stopped half-way?): removing it first"
    apt remove "$PKG" >/dev/null
fi

step "apt-get install $deb"
apt install --no-install-recommends "$deb" 2>&1 | grep -vE '^(Reading|Building|Selecting|Preparing|\(Reading|N: )' || true
check "dpkg says $PKG $version is installed" \
    test "$(dpkg-query -W -f='${db:Status-Status} ${Version}' "$PKG" 2>/dev/null)" = "installed $version"
mapfile -t files < <(dpkg -L "$PKG" 2>/dev/null | while read -r f; do [[ -f $f ]] && echo "$f"; done)
for f in "$libdir/pg_idgen.so" "$extdir/pg_idgen.control" "$extdir/pg_idgen--$version.sql" \
         "$extdir/pg_idgen--0.1.0--0.2.0.sql"; do
    check "$f is installed and owned by $PKG" \
        bash -c '[[ -f $1 ]] && dpkg -S "$1" 2>/dev/null | grep -q "^$2:"' _ "$f" "$PKG"
done
check "the installed library is the release build (no failpoints)" \
    bash -c '! grep -aq pg_idgen_failpoints "$1"' _ "$libdir/pg_idgen.so"
check "dpkg --verify finds the files as packaged" bash -c '[[ -z $(dpkg --verify "$1") ]]' _ "$PKG"

step "a fresh cluster: CREATE EXTENSION, \\dx, both generators"
dir=$(mktemp -d /tmp/pg_idgen-pkgtest.XXXXXX)
cluster_init "$dir"
cluster_start "$dir"
cluster_psql "$dir" -q -c 'CREATE EXTENSION pg_idgen'
extversion=$(cluster_psql "$dir" -At -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_idgen'")
check "pg_extension says $version (got '$extversion')" test "$extversion" = "$version"
dx=$(cluster_psql "$dir" -c '\dx pg_idgen')
echo "$dx" | sed 's/^/    /'
check "\\dx lists pg_idgen $version" bash -c 'grep -Eq "^ *pg_idgen *\| *$2 *\|" <<<"$1"' _ "$dx" "$version"
ids=$(cluster_psql "$dir" -At -c "SELECT segment_create('pkg_test', start => 1, step => 100)" \
    -c "SELECT string_agg(segment_nextval('pkg_test')::text, ',') FROM generate_series(1, 3)")
check "segment_nextval hands out 1,2,3 (got '${ids##*$'\n'}')" test "${ids##*$'\n'}" = "1,2,3"
sf=$(cluster_psql "$dir" -At -c "SELECT snowflake_nextval() < snowflake_nextval()")
check "snowflake_nextval increases" test "$sf" = t
cluster_stop "$dir"
rm -rf "$dir"
dir=""

step "the SQL regression files (tests/regress/run.sh) against the packaged extension"
if bash tests/regress/run.sh; then ok "SQL regression files"; else bad "SQL regression files"; fi

step "apt-get remove $PKG"
apt remove "$PKG" 2>&1 | grep -vE '^(Reading|Building|\(Reading|N: )' || true
check "dpkg says $PKG is not installed" bash -c '! dpkg-query -W -f="\${db:Status-Status}" "$1" 2>/dev/null | grep -q "^installed"' _ "$PKG"
check "it had installed files (${#files[@]})" test "${#files[@]}" -gt 0
left=()
for f in "${files[@]}"; do [[ -e $f ]] && left+=("$f"); done
check "every file it installed is gone${left:+ (left: ${left[*]})}" test "${#left[@]}" -eq 0
stray=$(ls "$libdir"/pg_idgen* "$extdir"/pg_idgen* 2>/dev/null || true)
check "no pg_idgen file is left in $libdir or $extdir${stray:+ (left: $stray)}" test -z "$stray"

reinstall_dev
check "the development build is back (failpoints)" \
    bash -c 'grep -aq pg_idgen_failpoints "$1"' _ "$libdir/pg_idgen.so"
check "its control file says $version" grep -q "default_version = '$version'" "$extdir/pg_idgen.control"

echo
echo "package test: $passed passed, $failed failed"
((failed == 0))
