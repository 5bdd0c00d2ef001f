"""The URL shortener example: shortens URLs into base62 codes of pg_idgen
segment IDs, and resolves codes back to their URLs.

    python examples/shortener/shorten.py --init                 # schema.sql, once
    python examples/shortener/shorten.py https://example.com/a  # prints the code, e.g. 101
    python examples/shortener/shorten.py --resolve 101          # prints https://example.com/a

Each URL becomes a row of `links` (schema.sql): its `id` comes from
`segment_nextval('links')`, its `code` is the generated column
`idgen_base62(id)`. Resolving decodes the code in the database
(`idgen_base62_decode`) and looks the row up by its primary key, so the
`code` column is only for display and its unique index.

The database is `--db CONNINFO`, else `$DATABASE_URL`, else libpq's own
environment (PGHOST, PGDATABASE, ...). Exit status: 0 on success, 1 when a
code has no link, 2 for bad input (a malformed code, a URL that is not
http(s)), 3 when the database fails.
"""

import argparse
import os
import sys
from urllib.parse import urlsplit

import psycopg

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema.sql")


class BadInput(Exception):
    pass


class NotFound(Exception):
    pass


def shorten(conn, url):
    """Stores the URL; returns its code."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadInput(f"not an http(s) URL: {url!r}")
    (code,), = conn.execute("INSERT INTO links (url) VALUES (%s) RETURNING code", (url,)).fetchall()
    return code


def resolve(conn, code):
    """The URL of a code."""
    try:
        rows = conn.execute("SELECT url FROM links WHERE id = idgen_base62_decode(%s)", (code,)).fetchall()
    except (psycopg.errors.InvalidTextRepresentation, psycopg.errors.NumericValueOutOfRange) as e:
        raise BadInput(f"not a short code: {code!r} ({e.diag.message_primary})") from None
    if not rows:
        raise NotFound(f"no link for code {code!r}")
    return rows[0][0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("urls", nargs="*", metavar="URL", help="URLs to shorten; prints one code per line")
    parser.add_argument("--resolve", metavar="CODE", nargs="+", help="codes to resolve; prints one URL per line")
    parser.add_argument("--init", action="store_true", help="create the schema (schema.sql) first")
    parser.add_argument("--db", default=os.environ.get("DATABASE_URL", ""),
                        help="libpq connection string (default: $DATABASE_URL, else the PG* variables)")
    args = parser.parse_args(argv)
    if not (args.urls or args.resolve or args.init):
        parser.error("give URLs to shorten, --resolve CODE, or --init")

    try:
        with psycopg.connect(args.db, autocommit=True) as conn:
            if args.init:
                with open(SCHEMA) as f:
                    conn.execute(f.read())
            for url in args.urls:
                print(shorten(conn, url))
            for code in args.resolve or []:
                print(resolve(conn, code))
    except BadInput as e:
        print(f"shorten.py: {e}", file=sys.stderr)
        return 2
    except NotFound as e:
        print(f"shorten.py: {e}", file=sys.stderr)
        return 1
    except psycopg.Error as e:
        print(f"shorten.py: database error: {str(e).strip()}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
