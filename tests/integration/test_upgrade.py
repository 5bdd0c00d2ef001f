"""Updating in place from release 0.1.0, on the real 0.1.0 library.

The fixture builds tag v0.1.0 (commit 8c4bf95) from this repository's
history for the PostgreSQL under test, with the same target directory as the
suite so that it reuses the compiled dependencies (about 30 s). A test then
starts a server on that library, creates the extension at 0.1.0 and draws
IDs; puts the current library in place the way a package manager does (a new
file renamed over the old one: a running server keeps the file it mapped);
restarts; draws with the old SQL; runs ALTER EXTENSION pg_idgen UPDATE and
draws again. Nothing may repeat. A pg_dump taken under 0.1.0 restores under
0.2.0 and continues above every ID drawn before.

0.1.0 declared only the pg15 feature; for 16-18 the fixture adds the
matching feature line to the unpacked Cargo.toml (the source is unchanged,
and it compiles against all four)."""

import os
import re
import shutil
import subprocess
import tempfile

import pytest

from cluster import PG_BIN
from helpers import REPO, assert_increasing, assert_unique, draw_plain, draw_snowflakes

RELEASE_0_1_0 = "8c4bf95"
CRATE = "pg_idgen_release_0_1_0"
PG_CONFIG = os.path.join(PG_BIN, "pg_config")
# A setting 0.2.0 registers and 0.1.0 does not: tells which library runs.
NEW_SETTING = "pg_idgen.allow_max_id_decrease"


def pg_config(flag):
    return subprocess.run([PG_CONFIG, flag], check=True, capture_output=True,
                          text=True).stdout.strip()


def build_release_0_1_0(out_dir):
    """Builds the 0.1.0 library and install script; returns their paths."""
    major = re.search(r"(\d+)", pg_config("--version")).group(1)
    src = os.path.join(out_dir, "src")
    os.makedirs(src)
    archive = subprocess.run(["git", "-C", REPO, "archive", RELEASE_0_1_0], capture_output=True)
    assert archive.returncode == 0, (
        f"the upgrade test builds release 0.1.0 from commit {RELEASE_0_1_0} (tag v0.1.0) and "
        f"this checkout lacks it: clone the repository with its history (no --depth)\n"
        f"{archive.stderr.decode(errors='replace')}")
    archive = archive.stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    # Built under a crate name of its own: the target directory is shared
    # with the current tree (for its compiled dependencies), and the two
    # must not overwrite each other's target/debug/libpg_idgen.so. The
    # library's file name does not matter (it is copied to pg_idgen.so);
    # its SQL names MODULE_PATHNAME, which pg_idgen.control resolves.
    os.rename(os.path.join(src, "pg_idgen.control"), os.path.join(src, f"{CRATE}.control"))
    cargo_toml = os.path.join(src, "Cargo.toml")
    with open(cargo_toml) as f:
        manifest = f.read().replace('name = "pg_idgen"', f'name = "{CRATE}"', 1)
    if not re.search(rf"^pg{major} = ", manifest, re.M):
        manifest = manifest.replace(
            "pg_test = []", f'pg{major} = ["pgrx/pg{major}", "pgrx-tests/pg{major}"]\npg_test = []')
    with open(cargo_toml, "w") as f:
        f.write(manifest)
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    pkg = os.path.join(out_dir, "pkg")
    built = subprocess.run(
        ["cargo", "pgrx", "package", "--debug", "--no-default-features", "--features",
         f"pg{major}", "--pg-config", PG_CONFIG, "--out-dir", pkg],
        cwd=src, env=env, capture_output=True, text=True)
    assert built.returncode == 0, f"building 0.1.0 failed:\n{built.stderr[-4000:]}"
    found = {}
    for root, _, files in os.walk(pkg):
        for name in files:
            found[name] = os.path.join(root, name)
    return found[f"{CRATE}.so"], found[f"{CRATE}--0.1.0.sql"]


class Libraries:
    """Puts the 0.1.0 or the current library at $libdir/pg_idgen.so, each
    time by renaming a complete copy over it (never writing in place)."""

    def __init__(self, old_library, work):
        self.installed = os.path.join(pg_config("--pkglibdir"), "pg_idgen.so")
        self.old = old_library
        self.new = os.path.join(work, "pg_idgen.so.current")
        shutil.copy2(self.installed, self.new)

    def _put(self, library):
        staged = self.installed + ".upgrade-test"
        shutil.copy2(library, staged)
        os.rename(staged, self.installed)

    def use_old(self):
        self._put(self.old)

    def use_new(self):
        self._put(self.new)


@pytest.fixture(scope="module")
def libraries():
    work = tempfile.mkdtemp(prefix="pg_idgen-0.1.0.")
    try:
        old_library, old_script = build_release_0_1_0(work)
        shutil.copy(old_script, os.path.join(pg_config("--sharedir"), "extension",
                                             "pg_idgen--0.1.0.sql"))
        libs = Libraries(old_library, work)
        try:
            yield libs
        finally:
            libs.use_new()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def running_library(cluster, db):
    (setting,), = cluster.sql(f"SELECT current_setting('{NEW_SETTING}', true)", dbname=db)
    return "0.1.0" if setting is None else "current"


def extversion(cluster, db):
    return cluster.sql("SELECT extversion FROM pg_extension WHERE extname = 'pg_idgen'",
                       dbname=db)


def test_a_0_1_0_database_updates_in_place_and_repeats_nothing(make_cluster, libraries):
    libraries.use_old()
    c = make_cluster()
    c.start()
    libraries.use_new()  # the package manager runs while 0.1.0 serves
    db = c.new_database(extension=False)
    c.sql("CREATE EXTENSION pg_idgen VERSION '0.1.0'", dbname=db)
    assert running_library(c, db) == "0.1.0"
    c.sql("SELECT segment_create('orders', step => 10)", dbname=db)
    ids = draw_plain(c, db, "orders", 500)
    flakes = draw_snowflakes(c, 200, dbname=db)
    # A crash on 0.1.0, then the current library: it reads what 0.1.0 left
    # (its snowflake state file, the id_segment rows) and the old SQL keeps
    # working until ALTER EXTENSION runs.
    c.restart(mode="immediate")
    assert running_library(c, db) == "current"
    assert extversion(c, db) == [("0.1.0",)]
    ids += draw_plain(c, db, "orders", 500)
    flakes += draw_snowflakes(c, 200, dbname=db)
    c.sql("ALTER EXTENSION pg_idgen UPDATE", dbname=db)
    assert extversion(c, db) == [("0.2.0",)]
    # What 0.2.0 added is there: max_id can no longer move back.
    with pytest.raises(Exception) as refused:
        c.sql("UPDATE id_segment SET max_id = 0 WHERE biz_tag = 'orders'", dbname=db)
    assert getattr(refused.value, "sqlstate", None) == "23514"
    ids += draw_plain(c, db, "orders", 500)
    flakes += draw_snowflakes(c, 200, dbname=db)
    assert len(ids) == 1500
    assert_unique(ids)
    assert_unique(flakes)
    assert_increasing(flakes)
    # The updated database has exactly what a fresh 0.2.0 one has.
    fresh = c.new_database()
    objects = ("SELECT pg_describe_object(classid, objid, 0) FROM pg_depend "
               "WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idgen') "
               "AND deptype = 'e' ORDER BY 1")
    assert c.sql(objects, dbname=db) == c.sql(objects, dbname=fresh)
    # ... with the same signatures, result types, volatility and privileges.
    functions = ("SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), "
                 "p.provolatile, p.proparallel, p.proisstrict, p.prosrc, coalesce(p.proacl::text, '') "
                 "FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass "
                 "WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idgen') "
                 "AND d.deptype = 'e' ORDER BY 1, 2")
    assert c.sql(functions, dbname=db) == c.sql(functions, dbname=fresh)
    views = ("SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), "
             "coalesce(c.relacl::text, '') FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
             "WHERE c.relname IN ('segment_status', 'snowflake_status') AND a.attnum > 0 ORDER BY 1, a.attnum")
    assert c.sql(views, dbname=db) == c.sql(views, dbname=fresh)
    triggers = "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1"
    assert c.sql(triggers, dbname=db) == c.sql(triggers, dbname=fresh)


def test_a_dump_taken_under_0_1_0_restores_under_0_2_0_above_every_id(make_cluster, libraries,
                                                                      tmp_path):
    libraries.use_old()
    c = make_cluster()
    c.start()
    libraries.use_new()
    db = c.new_database(extension=False)
    c.sql("CREATE EXTENSION pg_idgen VERSION '0.1.0'", dbname=db)
    assert running_library(c, db) == "0.1.0"
    c.sql("SELECT segment_create('orders', step => 100)", dbname=db)
    c.sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT segment_nextval('orders'), v int)",
          dbname=db)
    c.sql("INSERT INTO orders (v) SELECT g FROM generate_series(1, 1000) g", dbname=db)
    before = draw_plain(c, db, "orders", 300)
    dump = tmp_path / "dump.sql"
    c.client("pg_dump", "-d", db, "-f", str(dump))
    c.restart()
    assert running_library(c, db) == "current"
    restored = c.new_database(extension=False)
    c.client("psql", "-v", "ON_ERROR_STOP=1", "-q", "-d", restored, "-f", str(dump))
    assert extversion(c, restored) == [("0.2.0",)]
    (top,), = c.sql("SELECT max(id) FROM orders", dbname=db)
    after = [r[0] for r in c.sql(
        "INSERT INTO orders (v) SELECT g FROM generate_series(1, 500) g RETURNING id",
        dbname=restored)]
    assert min(after) > max(before + [top])
    assert_unique(after)
