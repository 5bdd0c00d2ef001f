"""Alembic's environment for the example (docs/examples.md#alembic): the
template's, with two changes for a database with pg_idgen.

1. Autogenerate leaves alone every table and view an extension owns —
   pg_idgen's id_segment, snowflake_high_water, ... — which CREATE and DROP
   EXTENSION make and remove. Without the filter Alembic proposes dropping
   them (and the migration fails: the extension requires them). Which they
   are is read from pg_depend (deptype 'e'), so the list follows the
   installed version of every extension, with nothing to keep up to date.
2. A server default that calls one of pg_idgen's generators is compared
   as text. Alembic compares a default it cannot match textually by
   evaluating both sides on the server, which draws two IDs and always
   finds them different. (Only with compare_server_default on; Alembic's
   own default is off.)
"""

import os
import re
from logging.config import fileConfig

from sqlalchemy import create_engine, pool, text

from alembic import context
from models import Base

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name)

target_metadata = Base.metadata

# The tables and views (relations of pg_class) that belong to an extension.
EXTENSION_RELATIONS = text("""
    SELECT n.nspname, c.relname
      FROM pg_catalog.pg_depend d
      JOIN pg_catalog.pg_class c ON c.oid = d.objid
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
       AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND d.deptype = 'e'
""")


def extension_relations(connection):
    """{(schema, name)} of every table and view an extension owns."""
    return {(schema, name) for schema, name in connection.execute(EXTENSION_RELATIONS)}


def skip_extension_relations(connection):
    """An include_name hook that leaves out what extension_relations()
    lists; Alembic names the default schema None."""
    owned = extension_relations(connection)
    default_schema = connection.dialect.default_schema_name

    def include_name(name, type_, parent_names):
        if type_ == "table":
            return (parent_names.get("schema_name") or default_schema, name) not in owned
        return True

    return include_name


GENERATOR_CALL = re.compile(r"\b(segment_nextval|snowflake_nextval|snowflake_js_nextval)\s*\(")


def _as_compared(default):
    """A default's SQL without the casts PostgreSQL adds when it stores it
    (segment_nextval('orders'::text)) and without white space."""
    return re.sub(r"\s+", "", re.sub(r"::(text|bigint|character varying)\b", "", default or ""))


def compare_server_default(context, inspected_column, metadata_column, inspected_default,
                           metadata_default, rendered_metadata_default):
    """pg_idgen's generators compared as text, never called; None (Alembic's
    own comparison) for every other default."""
    if not any(GENERATOR_CALL.search(d or "") for d in (inspected_default, rendered_metadata_default)):
        return None
    return _as_compared(inspected_default) != _as_compared(rendered_metadata_default)


def database_url():
    return os.environ.get("DATABASE_URL") or config.get_main_option("sqlalchemy.url")


def run_migrations_offline():
    context.configure(url=database_url(), target_metadata=target_metadata, literal_binds=True,
                      dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online():
    engine = create_engine(database_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        include_name = skip_extension_relations(connection)
        # End the transaction that read began, so that Alembic's own
        # transaction below is the outermost one and commits.
        connection.commit()
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            include_name=include_name,
            compare_server_default=compare_server_default,
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
