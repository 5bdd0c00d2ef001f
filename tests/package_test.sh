#!/usr/bin/env bash
# Tests the packages that tests/package.sh builds, as a DBA would use them.
#
#   bash tests/package_test.sh [DEB]            the PostgreSQL 15 .deb
#   bash tests/package_test.sh --tarball FILE   a PostgreSQL 16-18 tarball
# Normally run through `bash tests/package.sh --pg 15 --test` (or --pg all),
# which builds the packages first. Each ends with "package test: N passed,
# N failed" and exits non-zero on any failure.
#
# The .deb, on Debian's PostgreSQL 15:
#   apt-get install ./postgresql-15-pg-idgen_<version>_<arch>.deb
#   -> the files are the package's (dpkg owns them, no failpoints build);
#   -> a fresh cluster: CREATE EXTENSION, \dx and pg_extension say <version>,
#      both generators hand out IDs; the SQL regression files pass
#      (tests/regress/run.sh, on a cluster of its own);
#   apt-get remove postgresql-15-pg-idgen -> every file it installed is gone.
#   Afterwards (also on failure) it puts back the pg_idgen files that were
#   installed before (the test suite's build, say), copied aside before the
#   install, so PostgreSQL 15 is left as it was found.
#   Debian's PostgreSQL 15 may be shared with other work on the machine: all
#   that installs into it or runs a server on it happens while holding
#   flock ${PG_IDGEN_PG15_LOCK:-/tmp/pg_idgen-pg15.lock} (not taken again
#   when a parent process holds it, e.g. `flock LOCK bash tests/test.sh`; a
#   caller that holds it some other way sets PG_IDGEN_PG15_LOCK_HELD=1).
#
# A tarball, never over the real install tree: a scratch copy of that
# version's tree without any pg_idgen file, the tarball unpacked over it
# with `tar -xzf FILE -C <copy>`, then the same cluster checks and
# regression files with the copy's server.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PKG=postgresql-15-pg-idgen
PG_ROOT=${PG_IDGEN_PG_ROOT:-/opt/pg_idgen-pg}
[[ -f tests/lib/pg_versions.sh ]] && { source tests/lib/pg_versions.sh; PG_ROOT=$PG_IDGEN_PG_ROOT; }
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -1)

passed=0 failed=0
ok()   { passed=$((passed + 1)); echo "  ok    $*"; }
bad()  { failed=$((failed + 1)); echo "  FAIL  $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
step() { printf '\n== %s\n' "$*"; }
die() { echo "package_test.sh: $*" >&2; exit 1; }
summary() { echo; echo "package test: $passed passed, $failed failed"; ((failed == 0)); }

# use_extension DIR: a fresh cluster in DIR with the installed pg_idgen
# (tests/lib/cluster.sh, PG_BIN): CREATE EXTENSION, its version, IDs.
use_extension() {
    local dir=$1 extversion dx ids sf
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
}

regress() {
    step "the SQL regression files (tests/regress/run.sh) against the packaged extension"
    if bash tests/regress/run.sh; then ok "SQL regression files"; else bad "SQL regression files"; fi
}

# ---------------------------------------------------------------- tarball
test_tarball() {
    local tarball=$1 major root scratch tree
    [[ -f $tarball ]] || die "no $tarball; build it with: bash tests/package.sh"
    tarball=$(realpath "$tarball")
    major=$(sed -n 's/.*-pg\([0-9]*\)-[^-]*-linux\.tar\.gz$/\1/p' <<<"${tarball##*/}")
    [[ -n $major ]] || die "cannot tell the PostgreSQL version from the name ${tarball##*/}"
    root=$PG_ROOT/$major
    [[ -x $root/bin/pg_config ]] || die "no PostgreSQL $major at $root; bash tests/setup.sh installs it"

    step "PostgreSQL $major: a scratch copy of $root without pg_idgen"
    scratch=$(mktemp -d /tmp/pg_idgen-pkgtest-pg$major.XXXXXX)
    chmod 0755 "$scratch"
    tree=$scratch/tree
    export PG_BIN=$tree/bin
    source tests/lib/cluster.sh
    trap 'cluster_stop "'"$scratch"'/cluster" immediate; rm -rf "'"$scratch"'"' EXIT
    cp -a "$root" "$tree"
    rm -f "$tree"/lib/pg_idgen* "$tree"/share/extension/pg_idgen*

    step "tar -xzf ${tarball##*/} -C <copy>"
    local listed=() f
    mapfile -t listed < <(tar -tzf "$tarball")
    printf '    %s\n' "${listed[@]}"
    check "its paths are relative, under lib/ and share/extension/" \
        bash -c '! printf "%s\n" "${@}" | grep -Ev "^(lib/pg_idgen\.so|share/extension/pg_idgen[-.a-z0-9]*)$"' _ "${listed[@]}"
    tar -xzf "$tarball" -C "$tree"
    check "the server's own paths find them: $("$tree/bin/pg_config" --pkglibdir)/pg_idgen.so" \
        test -f "$("$tree/bin/pg_config" --pkglibdir)/pg_idgen.so"
    for f in "share/extension/pg_idgen.control" "share/extension/pg_idgen--$version.sql" \
             "share/extension/pg_idgen--0.1.0--0.2.0.sql" "share/extension/pg_idgen--0.2.0--0.3.0.sql"; do
        check "$f is in it" test -f "$tree/$f"
    done
    check "the library is a build without failpoints" \
        bash -c '! grep -aq pg_idgen_failpoints "$1"' _ "$tree/lib/pg_idgen.so"

    step "a fresh PostgreSQL $major cluster: CREATE EXTENSION, \\dx, both generators"
    use_extension "$scratch/cluster"
    regress
    summary
}

# -------------------------------------------------------------------- deb
test_deb() {
    local deb=${1:-target/packages/${PKG}_${version}_$(dpkg --print-architecture).deb}
    [[ -f $deb ]] || die "no $deb; build it with: bash tests/package.sh --pg 15"
    deb=$(realpath "$deb")
    [[ -x $PG15_CONFIG ]] || die "no PostgreSQL 15 at $PG15_CONFIG; bash tests/setup.sh installs it"
    # Debian's PostgreSQL 15, whatever PG_BIN the caller exported for
    # another version (tests/lib/cluster.sh and tests/regress/run.sh use it).
    export PG_BIN=/usr/lib/postgresql/15/bin
    source tests/lib/cluster.sh

    local lock=${PG_IDGEN_PG15_LOCK:-/tmp/pg_idgen-pg15.lock}
    if [[ -n ${PG_IDGEN_PG15_LOCK_HELD:-} ]] || held_by_ancestor "$lock"; then
        echo "$lock is held by the caller"
    else
        exec 9>>"$lock"
        if ! flock -n 9; then
            echo "waiting for $lock (PostgreSQL 15 is in use by other work)"
            flock 9
        fi
    fi

    dir=""
    restored=0
    libdir=$("$PG15_CONFIG" --pkglibdir)
    extdir=$("$PG15_CONFIG" --sharedir)/extension
    # What was installed before (not the package's), to be put back.
    found=$(mktemp -d /tmp/pg_idgen-pkgfound.XXXXXX)
    mkdir "$found/lib" "$found/extension"
    cp -a "$libdir"/pg_idgen* "$found/lib/" 2>/dev/null || true
    cp -a "$extdir"/pg_idgen* "$found/extension/" 2>/dev/null || true
    trap deb_cleanup EXIT
    trap 'exit 130' INT TERM   # so that an interrupted run cleans up too

    local files=() f

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
             "$extdir/pg_idgen--0.1.0--0.2.0.sql" "$extdir/pg_idgen--0.2.0--0.3.0.sql"; do
        check "$f is installed and owned by $PKG" \
            bash -c '[[ -f $1 ]] && dpkg -S "$1" 2>/dev/null | grep -q "^$2:"' _ "$f" "$PKG"
    done
    check "the installed library is a build without failpoints" \
        bash -c '! grep -aq pg_idgen_failpoints "$1"' _ "$libdir/pg_idgen.so"
    check "dpkg --verify finds the files as packaged" bash -c '[[ -z $(dpkg --verify "$1") ]]' _ "$PKG"

    step "a fresh PostgreSQL 15 cluster: CREATE EXTENSION, \\dx, both generators"
    dir=$(mktemp -d /tmp/pg_idgen-pkgtest.XXXXXX)
    use_extension "$dir"
    rm -rf "$dir"
    dir=""
    regress

    step "apt-get remove $PKG"
    apt remove "$PKG" 2>&1 | grep -vE '^(Reading|Building|\(Reading|N: )' || true
    check "dpkg says $PKG is not installed" \
        bash -c '! dpkg-query -W -f="\${db:Status-Status}" "$1" 2>/dev/null | grep -q "^installed"' _ "$PKG"
    check "it had installed files (${#files[@]})" test "${#files[@]}" -gt 0
    local left=() stray
    for f in "${files[@]}"; do [[ -e $f ]] && left+=("$f"); done
    check "every file it installed is gone${left:+ (left: ${left[*]})}" test "${#left[@]}" -eq 0
    check "the extension is gone: no pg_idgen.so, no pg_idgen.control" \
        test ! -e "$libdir/pg_idgen.so" -a ! -e "$extdir/pg_idgen.control"
    # Files the package never had (e.g. the 0.1.0 install script that
    # tests/integration/test_upgrade.py puts there) are not its to remove.
    stray=$(ls "$libdir"/pg_idgen* "$extdir"/pg_idgen* 2>/dev/null | tr '\n' ' ' || true)
    [[ -z $stray ]] || echo "  (left as found, not the package's: $stray)"

    put_back
    local back=1
    for f in "$found"/lib/* "$found"/extension/*; do
        [[ -e $f ]] || continue
        case $f in */lib/*) cmp -s "$f" "$libdir/${f##*/}" || back=0 ;;
                    *) cmp -s "$f" "$extdir/${f##*/}" || back=0 ;; esac
    done
    check "the files installed before are back as they were" test "$back" = 1
    rm -rf "$found"
    summary
}

installed() { [[ $(dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null) == installed ]]; }
apt() { DEBIAN_FRONTEND=noninteractive apt-get "$@" -y -q -o Dpkg::Use-Pty=0; }

# held_by_ancestor LOCK: whether a process this one runs under holds LOCK
# (e.g. `flock LOCK bash tests/test.sh`); taking it again would wait forever.
held_by_ancestor() {
    local holders p=$$
    holders=$(lslocks -n -o PID,PATH 2>/dev/null | awk -v f="$1" '$2 == f {print $1}')
    [[ -n $holders ]] || return 1
    while ((p > 1)); do
        grep -qx "$p" <<<"$holders" && return 0
        p=$(ps -o ppid= -p "$p" | tr -d ' ')
        [[ -n $p ]] || return 1
    done
    return 1
}

put_back() {
    ((restored)) && return 0
    restored=1
    step "putting back the pg_idgen files installed before"
    if installed; then apt remove "$PKG" >/dev/null 2>&1 || true; fi
    cp -a "$found"/lib/. "$libdir/"
    cp -a "$found"/extension/. "$extdir/"
}

deb_cleanup() {
    local rc=$?
    if [[ -n $dir ]]; then cluster_stop "$dir" immediate; rm -rf "$dir"; fi
    put_back
    exit $rc
}

case ${1:-} in
    --tarball) test_tarball "${2:?--tarball needs a file}" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
    *) test_deb "$@" ;;
esac
