"""The smallest Django project that keys a model by segment_nextval('orders'):
one app (orders), one model, PostgreSQL through psycopg 3.

The database comes from libpq's variables (PGHOST, PGPORT, PGDATABASE,
PGUSER, PGPASSWORD), so `PGHOST=/tmp/pg_idgen-demo PGUSER=postgres python
manage.py migrate` works as psql would. The database needs the extension:
`CREATE EXTENSION pg_idgen` (as its owner or a superuser, once)."""

import os

SECRET_KEY = "only-for-the-pg_idgen-example"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["orders"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("PGDATABASE", "postgres"),
        "USER": os.environ.get("PGUSER", ""),
        "PASSWORD": os.environ.get("PGPASSWORD", ""),
        "HOST": os.environ.get("PGHOST", ""),
        "PORT": os.environ.get("PGPORT", ""),
    }
}
