#!/usr/bin/env bash
# The benchmark: pg_idgen against native sequences, identity and UUIDs
# (UUIDv4, and UUIDv7 where the server has uuidv7(), 18 and later), in one
# run on a throwaway cluster (see tests/bench/bench.py for what it
# measures), then the call-site cache (tests/bench/fast_path.py), then IDs
# per second as clients are added (tests/bench/scaling.py), then tags
# attached to a slow central server (two shards, see tests/bench/remote.py),
# then IDs on a Citus cluster, a coordinator and two workers
# (tests/bench/citus.py; Citus is built into 16, 17 and 18 only: with
# --pg 15 its table says it was not measured), then bulk loads and IDs
# fetched by a client (tests/bench/bulk.py), then this tree against release
# 0.3.0 on a copy of a relocatable PostgreSQL (tests/bench/release_delta.py;
# with --pg 16, 17 or 18 only: 15 is Debian's package, which cannot be
# copied), and last the summary (tests/bench/publish.py). Full run: under 15
# minutes on 2 cores, a minute more for the call-site cache and for the
# remote part, about 3 for the scaling part and for the Citus part, 4 for
# the bulk part and 5 for the release part; `--quick` for a smoke run;
# `--only bench|fastpath|scaling|remote|citus|bulk|release` for one of them.
#
# Every step of one run names the same run: bench.sh fixes its start time
# and commit once (PG_IDGEN_BENCH_STARTED, PG_IDGEN_BENCH_COMMIT) and the
# command (PG_IDGEN_BENCH_COMMAND), and each table starts with them. The
# full run writes tests/bench/results/; a quick run a temporary directory
# (or --out DIR). With --update-docs (alias --update-readme), a full run of
# every part then puts its tables into docs/benchmarks.md, its summary into
# README.md and its plots into docs/img/bench/ (tests/bench/publish.py); a
# quick run or --only refuses it, so the docs only ever hold one whole run.
#
# pgEdge's snowflake extension (github.com/pgEdge/snowflake: a C extension,
# `snowflake.nextval()` on a sequence, the node from `snowflake.node`) is an
# optional competitor beside the UUIDs, in the cost per ID, the INSERT
# table and plots, the scaling part, the bulk loads and the summary. The
# benchmark machines cannot download it, so it is measured only with
# --pgedge-snowflake DIR, DIR being its source tree or a git repository
# (bare or not) whose HEAD is taken with `git archive`: bench.sh builds it
# in a scratch copy under /tmp (DIR is left as it is) with PGXS against
# the PostgreSQL benchmarked and installs it there; the throwaway clusters
# get `snowflake.node = 1` and `CREATE EXTENSION snowflake`, and the tables
# name its version (the control file's default_version) and commit. Without
# it the summary says it was not measured, and why.
#
#   bash tests/bench.sh [--pg 15|16|17|18] [--only bench|fastpath|scaling|remote|citus|bulk|release] [--quick]
#                       [--out DIR] [--update-docs] [--pgedge-snowflake DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

major=15
only=
quick=
update_docs=
out=
pgedge_snowflake=
while (($#)); do
    case $1 in
        --pg) major=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --out) out=$2; shift 2 ;;
        --update-docs|--update-readme) update_docs=1; shift ;;
        --pgedge-snowflake) pgedge_snowflake=$2; shift 2 ;;
        *) echo "unknown argument '$1'" >&2; exit 2 ;;
    esac
done
case $only in
    ''|bench|fastpath|scaling|remote|citus|bulk|release) ;;
    *) echo "--only takes bench, fastpath, scaling, remote, citus, bulk or release, not '$only'" >&2; exit 2 ;;
esac
if [[ -n $update_docs && ( -n $quick || -n $only ) ]]; then
    echo "--update-docs needs a full run of every part (no --quick, no --only): the docs hold one whole run" >&2
    exit 2
fi

if [[ -n $pgedge_snowflake && ! -d $pgedge_snowflake ]]; then
    echo "--pgedge-snowflake: '$pgedge_snowflake' is not a directory (its source tree, or a git repository)" >&2
    exit 2
fi

# The run's identity, the same in every table it writes.
export PG_IDGEN_BENCH_STARTED PG_IDGEN_BENCH_COMMIT PG_IDGEN_BENCH_COMMAND
PG_IDGEN_BENCH_STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')
PG_IDGEN_BENCH_COMMIT=$(git rev-parse --short HEAD)
# The scripts add --quick to it for a quick run.
PG_IDGEN_BENCH_COMMAND="bash tests/bench.sh --pg $major${only:+ --only $only}${update_docs:+ --update-docs}"
[[ -z $pgedge_snowflake ]] || PG_IDGEN_BENCH_COMMAND+=" --pgedge-snowflake $(printf %q "$pgedge_snowflake")"
if [[ -n $update_docs ]] && ! git diff --quiet HEAD -- . ':!README.md' ':!docs'; then
    echo "warning: the work tree differs from commit $PG_IDGEN_BENCH_COMMIT, which the docs will name" >&2
fi

# Not setup.sh's own install (into PostgreSQL 15): the build for the
# version asked for is installed below.
PG_IDGEN_SETUP_INSTALL=0 bash tests/setup.sh
source tests/lib/pg_versions.sh
require_pg "$major"
if [[ $major == "$PG_DEBIAN_MAJOR" && $only == release ]]; then
    echo "the release comparison copies a relocatable PostgreSQL: --pg 16, 17 or 18" >&2
    exit 2
fi
pg_config=$(pg_config_for "$major")
export PG_BIN
PG_BIN=$(pg_bin_for "$major")

echo; echo "== installing pg_idgen (release, without the test-only failpoints) into PostgreSQL $major"
cargo pgrx install --release --no-default-features --features "pg$major" --pg-config "$pg_config" 2>&1 \
    | grep -E 'Finished|error' || true

echo; echo "== installing the benchmark's floor extension (idgen_floor)"
(cd tests/bench/floor && CARGO_TARGET_DIR="$PWD/../../../target" \
    cargo pgrx install --release --no-default-features --features "pg$major" --pg-config "$pg_config" 2>&1 \
    | grep -E 'Finished|error' || true)
test -f "$("$pg_config" --sharedir)/extension/idgen_floor.control"

# pgEdge's snowflake, from the source given, into this PostgreSQL: built in
# a scratch copy under /tmp (DIR untouched). bench.py, scaling.py and
# bulk.py measure it when PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_VERSION is set (its
# default_version; _COMMIT: the commit built, when DIR is a git repository).
install_pgedge_snowflake() {
    local src=$1 scratch top gitdir
    src=$(realpath "$src")
    PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_COMMIT=
    if [[ -f $src/snowflake.control && -f $src/Makefile ]]; then
        # A source tree (a git work tree or not): what is in it.
        scratch=$(mktemp -d /tmp/pg_idgen-pgedge-snowflake.XXXXXX)
        cp -a "$src/." "$scratch/"
        if top=$(git -C "$src" rev-parse --show-toplevel 2>/dev/null) && [[ $(realpath "$top") == "$src" ]]; then
            PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_COMMIT=$(git -C "$src" rev-parse --short=12 HEAD)
            git -C "$src" diff --quiet HEAD -- || PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_COMMIT+=" with local changes"
        fi
    elif gitdir=$(git -C "$src" rev-parse --absolute-git-dir 2>/dev/null) \
        && [[ $(realpath "$gitdir") == "$src" || $(realpath "$gitdir") == "$src/.git" ]]; then
        # A git repository (bare, a mirror, or a work tree without the
        # files): its HEAD. Not a folder inside some other repository.
        if ! git -C "$src" cat-file -e HEAD:snowflake.control 2>/dev/null; then
            echo "--pgedge-snowflake: the HEAD of the git repository $src has no snowflake.control: not pgEdge's snowflake" >&2
            exit 2
        fi
        scratch=$(mktemp -d /tmp/pg_idgen-pgedge-snowflake.XXXXXX)
        git -C "$src" archive HEAD | tar -x -C "$scratch"
        PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_COMMIT=$(git -C "$src" rev-parse --short=12 HEAD)
    else
        echo "--pgedge-snowflake: $src holds neither a source tree (snowflake.control and Makefile) nor a git repository" >&2
        exit 2
    fi
    PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_VERSION=$(sed -n "s/^[[:space:]]*default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" \
        "$scratch/snowflake.control")
    if [[ -z $PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_VERSION ]]; then
        echo "--pgedge-snowflake: no default_version in $src's snowflake.control" >&2
        rm -rf "$scratch"
        exit 2
    fi
    local make=(make -C "$scratch" USE_PGXS=1 PG_CONFIG="$pg_config")
    # A source tree may hold another build's objects: built afresh.
    if ! { "${make[@]}" clean && "${make[@]}" && "${make[@]}" install; } >"$scratch/build.log" 2>&1; then
        tail -n 25 "$scratch/build.log" >&2
        echo "pgEdge's snowflake ${PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_VERSION}${PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_COMMIT:+ (commit $PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_COMMIT)} does not build or install against PostgreSQL $major: see $scratch/build.log" >&2
        exit 1
    fi
    test -f "$("$pg_config" --sharedir)/extension/snowflake.control"
    test -f "$("$pg_config" --pkglibdir)/snowflake.so"
    rm -rf "$scratch"
    export PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_VERSION PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_COMMIT
    echo "pgEdge's snowflake $PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_VERSION${PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_COMMIT:+ (commit $PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_COMMIT)} installed"
}
# Only set by install_pgedge_snowflake, never inherited.
unset PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_VERSION PG_IDGEN_BENCH_PGEDGE_SNOWFLAKE_COMMIT
if [[ -n $pgedge_snowflake ]]; then
    if [[ -z $only || $only == bench || $only == scaling || $only == bulk ]]; then
        echo; echo "== installing pgEdge's snowflake from $pgedge_snowflake into PostgreSQL $major"
        install_pgedge_snowflake "$pgedge_snowflake"
    else
        echo "note: --pgedge-snowflake is measured by the bench, scaling and bulk parts only, not by --only $only" >&2
    fi
fi

if ! .venv/bin/python -c 'import matplotlib' 2>/dev/null; then
    echo; echo "== installing matplotlib into .venv"
    .venv/bin/pip install -q --disable-pip-version-check -r tests/bench/requirements.txt
fi

if [[ -z $out ]]; then
    if [[ -n $quick ]]; then out=$(mktemp -d /tmp/pg_idgen-bench-quick.XXXXXX); else out=tests/bench/results; fi
fi
mkdir -p "$out"
out=$(realpath "$out")
args=(--out "$out" ${quick:+--quick})
runs() { [[ -z $only || $only == "$1" ]]; }
echo; echo "== run of $PG_IDGEN_BENCH_STARTED at commit $PG_IDGEN_BENCH_COMMIT; results to $out"

if runs bench; then
    echo; echo "== benchmark"
    .venv/bin/python tests/bench/bench.py "${args[@]}"
fi
if runs fastpath; then
    echo; echo "== benchmark: the call-site cache"
    .venv/bin/python tests/bench/fast_path.py "${args[@]}"
fi
if runs scaling; then
    echo; echo "== benchmark: IDs per second as clients are added"
    .venv/bin/python tests/bench/scaling.py "${args[@]}"
fi
if runs remote; then
    echo; echo "== benchmark: tags attached to a slow central server"
    .venv/bin/python tests/bench/remote.py "${args[@]}"
fi
if runs citus; then
    echo; echo "== benchmark: a Citus cluster"
    .venv/bin/python tests/bench/citus.py "${args[@]}"
fi
if runs bulk; then
    echo; echo "== benchmark: bulk loads, and IDs from a client"
    .venv/bin/python tests/bench/bulk.py "${args[@]}"
fi
publish=(--out "$out")
if [[ $major == "$PG_DEBIAN_MAJOR" ]]; then
    why="it copies a relocatable PostgreSQL (--pg 16, 17 or 18), and this run was on PostgreSQL $major,"
    publish+=(--no-release "$why Debian's package")
elif runs release; then
    echo; echo "== benchmark: this tree against the release before it (tests/bench/release_delta.py)"
    .venv/bin/python tests/bench/release_delta.py "${args[@]}"
fi

# The summary, from this run's results; into the docs with --update-docs.
if [[ -z $only ]]; then
    echo; echo "== summary"
    .venv/bin/python tests/bench/publish.py "${publish[@]}" ${update_docs:+--write}
fi
