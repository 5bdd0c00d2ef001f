"""The application examples against a real server (issue 38, points 1-3
and 8): Django (examples/django), SQLAlchemy 2 and Alembic
(examples/sqlalchemy), and node-postgres (examples/node), each run as a
user would run it and held to what docs/examples.md promises.

The packages come from tests/setup.sh (tests/integration/requirements.txt,
examples/node/package-lock.json); nothing is installed here. Speed is
checked only as statement counts: one INSERT for Django's bulk_create, one
per insertmanyvalues page for SQLAlchemy's add_all."""

import importlib.util
import math
import os
import re
import subprocess
import sys
import warnings

import psycopg
import pytest
from sqlalchemy import BigInteger, String, create_engine, event, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from helpers import REPO, assert_unique

DJANGO = os.path.join(REPO, "examples", "django")
SQLALCHEMY = os.path.join(REPO, "examples", "sqlalchemy")
ALEMBIC_INI = os.path.join(SQLALCHEMY, "alembic.ini")
NODE = os.path.join(REPO, "examples", "node")


def load_models():
    """examples/sqlalchemy/models.py, as its own module (env.py imports it
    as `models` in Alembic's processes)."""
    spec = importlib.util.spec_from_file_location("sqlalchemy_example_models",
                                                  os.path.join(SQLALCHEMY, "models.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


models = load_models()


@pytest.fixture(scope="module")
def server(lc):
    """The module's cluster, with the extension in `postgres` too, where
    the snowflake keeper records its mark (the Node example draws
    snowflake IDs)."""
    lc.sql("CREATE EXTENSION IF NOT EXISTS pg_idgen")
    return lc


def libpq_env(cluster, db):
    return {**os.environ, "PGHOST": cluster.dir, "PGPORT": str(cluster.port), "PGUSER": "postgres",
            "PGDATABASE": db}


def sqlalchemy_url(cluster, db):
    return f"postgresql+psycopg://postgres@/{db}?host={cluster.dir}&port={cluster.port}"


def run(args, env, cwd=REPO):
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def ok(done):
    assert done.returncode == 0, f"{done.args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def id_default(cluster, db, table):
    """The id column's default expression and identity kind ('' for none)."""
    (default, identity), = cluster.sql(
        "SELECT pg_get_expr(d.adbin, d.adrelid), a.attidentity FROM pg_attribute a "
        "LEFT JOIN pg_attrdef d ON (d.adrelid, d.adnum) = (a.attrelid, a.attnum) "
        "WHERE a.attrelid = %s::regclass AND a.attname = 'id'", (table,), dbname=db)
    return default, identity


def tags(cluster, db):
    return {tag: max_id for tag, max_id in cluster.sql("SELECT biz_tag, max_id FROM id_segment", dbname=db)}


# --------------------------------------------------------------------------
# Django: a BigAutoField whose identity migration 0002 swaps for
# segment_nextval('orders').

def test_django_save_and_bulk_create_get_their_keys_from_the_tag_in_one_insert(server):
    c = server
    db = c.new_database()
    env = libpq_env(c, db)
    manage = [sys.executable, "manage.py"]

    ok(run(manage + ["migrate"], env, cwd=DJANGO))
    assert id_default(c, db, "orders_order") == ("segment_nextval('orders'::text)", "")
    assert "orders" in tags(c, db)
    # The models match the migrations: RunSQL changed nothing Django tracks.
    ok(run(manage + ["makemigrations", "--check", "--dry-run"], env, cwd=DJANGO))

    # demo.py: save(), bulk_create(10,000) in one INSERT, each object its
    # row's key, from the tag (it exits 1 naming what failed).
    out = ok(run([sys.executable, "demo.py", "-n", "10000"], env, cwd=DJANGO))
    assert "bulk_create(10,000): 1 INSERT" in out, out
    ids = [r[0] for r in c.sql("SELECT id FROM orders_order", dbname=db)]
    assert len(ids) == 10_001
    assert_unique(ids)
    assert max(ids) <= tags(c, db)["orders"]

    # The reverse: the identity is back and continues above every key; the
    # tag is gone.
    ok(run(manage + ["migrate", "orders", "0001"], env, cwd=DJANGO))
    default, identity = id_default(c, db, "orders_order")
    assert default is None and identity == "d"
    assert "orders" not in tags(c, db)
    (after_reverse,), = c.sql("INSERT INTO orders_order (item) VALUES ('identity') RETURNING id", dbname=db)
    assert after_reverse > max(ids)

    # Forward again, on a table with rows: the tag starts above them.
    ok(run(manage + ["migrate"], env, cwd=DJANGO))
    out = ok(run([sys.executable, "demo.py", "-n", "100"], env, cwd=DJANGO))
    again = [r[0] for r in c.sql("SELECT id FROM orders_order WHERE id > %s", (after_reverse,), dbname=db)]
    assert len(again) == 101, out

    ok(run(manage + ["migrate", "orders", "zero"], env, cwd=DJANGO))
    assert c.sql("SELECT to_regclass('orders_order')", dbname=db) == [(None,)]
    assert tags(c, db) == {}


# --------------------------------------------------------------------------
# SQLAlchemy 2 and Alembic.

def alembic(cluster, db, *args):
    env = {**os.environ, "DATABASE_URL": sqlalchemy_url(cluster, db)}
    return run([sys.executable, "-m", "alembic", "-c", ALEMBIC_INI, *args], env)


@pytest.fixture(scope="module")
def migrated(server):
    """A database with the extension, migrated by the example's Alembic
    migration (the tags 'orders' and 'invoices' and their tables)."""
    db = server.new_database()
    ok(alembic(server, db, "upgrade", "head"))
    return db


class StatementCounter:
    """The INSERT statements an engine sends to the server, one per
    cursor execution (each insertmanyvalues page is one)."""

    def __init__(self, engine):
        self.inserts = []
        event.listen(engine, "before_cursor_execute", self.seen)

    def seen(self, conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("INSERT"):
            self.inserts.append(statement)


@pytest.mark.parametrize("model", [models.Order, models.Invoice], ids=["monotonic default (2.1)",
                                                                     "sentinel column (2.0.10+)"])
def test_sqlalchemy_add_all_is_batched_and_each_object_gets_its_rows_key(server, migrated, model):
    c, db = server, migrated
    tag = model.__tablename__
    engine = create_engine(sqlalchemy_url(c, db))
    counter = StatementCounter(engine)
    n = 10_000
    objects = [model(item=f"{tag} {i}") for i in range(n)]
    with Session(engine) as session:
        session.add_all(objects)
        session.flush()
        ids = [o.id for o in objects]
        items = {o.id: o.item for o in objects}
        # One connection for the transaction: its last ID of the tag.
        currval = session.execute(text("SELECT segment_currval(:tag)"), {"tag": tag}).scalar_one()
        session.commit()
    engine.dispose()
    rows = dict(c.sql(f"SELECT id, item FROM {tag}", dbname=db))

    assert all(isinstance(i, int) for i in ids)
    assert_unique(ids)
    page = engine.dialect.insertmanyvalues_page_size
    assert len(counter.inserts) == math.ceil(n / page), \
        f"{len(counter.inserts)} INSERT statements for {n} objects (pages of {page})"
    assert all(s.count("),") >= page - 1 for s in counter.inserts[:-1]), "a page was not one multi-row INSERT"
    assert len(items) == n
    mismatched = [i for i, item in items.items() if rows.get(i) != item]
    assert not mismatched, f"{len(mismatched)} objects hold another row's key, e.g. {mismatched[0]}"
    assert currval == max(ids)
    assert max(ids) <= tags(c, db)[tag]


def test_a_key_from_a_plain_server_default_costs_an_insert_per_object(server, migrated):
    """Why models.py marks the default: the same table mapped with
    server_default=text(...) and no sentinel. The ORM cannot match the
    returned keys to objects, so it sends one INSERT per object."""
    c, db = server, migrated

    class Base(DeclarativeBase):
        pass

    class PlainOrder(Base):
        __tablename__ = "orders"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True,
                                        server_default=text("segment_nextval('orders')"))
        item: Mapped[str] = mapped_column(String(100))

    engine = create_engine(sqlalchemy_url(c, db))
    counter = StatementCounter(engine)
    objects = [PlainOrder(item=f"plain {i}") for i in range(300)]
    with Session(engine) as session:
        session.add_all(objects)
        session.flush()
        ids = [o.id for o in objects]
        session.commit()
    engine.dispose()
    assert len(counter.inserts) == 300
    assert all(isinstance(i, int) for i in ids)
    assert_unique(ids)


def extension_tables(cluster, db):
    return {name for name, in cluster.sql(
        "SELECT c.relname FROM pg_depend d JOIN pg_class c ON c.oid = d.objid "
        "JOIN pg_extension e ON e.oid = d.refobjid "
        "WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_extension'::regclass "
        "AND d.deptype = 'e' AND e.extname = 'pg_idgen' AND c.relkind = 'r'", dbname=db)}


def ids_taken(cluster, db, tag):
    (taken,), = cluster.sql("SELECT ids_taken FROM segment_status WHERE database = %s AND tag = %s",
                            (db, tag), dbname=db)
    return taken


def test_alembic_autogenerate_leaves_the_extension_alone_and_migrations_make_and_drop_tags(server):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    c = server
    db = c.new_database()
    ok(alembic(c, db, "upgrade", "head"))
    assert set(tags(c, db)) == {"orders", "invoices"}
    assert id_default(c, db, "orders") == ("segment_nextval('orders'::text)", "")

    # Autogenerate through env.py proposes nothing at all: not the
    # extension's tables, not the models' tables or defaults. It compares
    # the generator defaults as text, so it draws no ID (Alembic's own
    # comparison draws two per default: below).
    c.sql("SELECT segment_nextval('orders')", dbname=db)
    before = ids_taken(c, db, "orders")
    check = alembic(c, db, "check")
    assert check.returncode == 0, check.stderr
    assert "No new upgrade operations detected" in check.stdout + check.stderr
    assert ids_taken(c, db, "orders") == before

    # Without env.py's filter, Alembic would drop every table of the
    # extension: the filter is what keeps them out.
    owned = extension_tables(c, db)
    assert {"id_segment", "snowflake_high_water"} <= owned
    engine = create_engine(sqlalchemy_url(c, db))
    with engine.connect() as conn, warnings.catch_warnings():
        warnings.simplefilter("ignore")     # SQLAlchemy knows no pg_lsn (a column of the extension's)
        plain = compare_metadata(MigrationContext.configure(conn), models.Base.metadata)
    removed = {d[1].name for d in plain if isinstance(d, tuple) and d[0] == "remove_table"}
    assert removed == owned

    # Alembic's own comparison of server defaults runs them on the server.
    with engine.connect() as conn, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compare_metadata(MigrationContext.configure(conn, opts={"compare_server_default": True}),
                         models.Base.metadata)
        conn.rollback()
    assert ids_taken(c, db, "orders") > before
    engine.dispose()

    # ... and still sees a default that changed.
    c.sql("ALTER TABLE orders ALTER COLUMN id SET DEFAULT segment_nextval('invoices')", dbname=db)
    changed = alembic(c, db, "check")
    assert changed.returncode != 0
    assert re.search(r"modify_default.*'orders', 'id'", changed.stdout + changed.stderr), changed.stderr
    c.sql("ALTER TABLE orders ALTER COLUMN id SET DEFAULT segment_nextval('orders')", dbname=db)

    # The downgrade drops the tables and the tags; upgrading again works.
    ok(alembic(c, db, "downgrade", "base"))
    assert tags(c, db) == {}
    assert c.sql("SELECT to_regclass('orders'), to_regclass('invoices')", dbname=db) == [(None, None)]
    ok(alembic(c, db, "upgrade", "head"))
    assert set(tags(c, db)) == {"orders", "invoices"}


# --------------------------------------------------------------------------
# node-postgres.

def test_node_postgres_reads_ids_exactly(server):
    assert os.path.isdir(os.path.join(NODE, "node_modules", "pg")), \
        "node-postgres is not installed in examples/node: run bash tests/setup.sh"
    version = run(["node", "--version"], os.environ)
    assert int(version.stdout.strip().lstrip("v").split(".")[0]) >= 18, version.stdout
    db = server.new_database()
    done = run(["node", "ids.mjs"], libpq_env(server, db), cwd=NODE)
    out = ok(done)
    assert "2. parseInt reads 192209013964804297 as 192209013964804300" in out, out
    assert out.rstrip().endswith("all checks passed"), out
