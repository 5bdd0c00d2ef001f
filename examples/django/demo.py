#!/usr/bin/env python3
"""Runs the example as an application would: `migrate`, then save() of one
Order and bulk_create() of many, and checks what the pattern promises —
every object has its key (no DatabaseDefault left behind), no key twice,
each key the one its row got, all of them from the tag 'orders' — and
that the batch was one INSERT. Exits 1 naming the first broken promise.

    PGHOST=/tmp/pg_idgen-demo PGUSER=postgres python demo.py [-n 10000]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "idgen_site.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from orders.models import Order  # noqa: E402


def check(ok, message):
    if not ok:
        sys.exit(f"demo.py: {message}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000, help="objects for bulk_create (default 10,000)")
    n = parser.parse_args().n

    call_command("migrate", verbosity=0)

    first = Order(item="tea")
    first.save()
    check(isinstance(first.pk, int), f"save() left the key as {first.pk!r}")

    inserts = []

    def count_inserts(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("INSERT"):
            inserts.append(sql)
        return execute(sql, params, many, context)

    objects = [Order(item=f"bulk {i}") for i in range(n)]
    with connection.execute_wrapper(count_inserts):
        Order.objects.bulk_create(objects)

    ids = [o.pk for o in objects]
    check(all(isinstance(i, int) for i in ids), f"bulk_create left keys unset, e.g. {ids[0]!r}")
    check(len(set(ids + [first.pk])) == n + 1, "a key was given twice")
    check(len(inserts) == 1, f"bulk_create sent {len(inserts)} INSERT statements, not one")
    # Each object has the key of its own row.
    rows = dict(Order.objects.filter(id__in=ids).values_list("id", "item"))
    check(all(rows.get(o.pk) == o.item for o in objects), "an object holds another row's key")

    with connection.cursor() as cur:
        # From the tag: this session's last segment_nextval('orders') is the
        # last object's key, and no key is above what the tag has handed out.
        cur.execute("SELECT segment_currval('orders'), "
                    "(SELECT max_id FROM id_segment WHERE biz_tag = 'orders'), "
                    "pg_get_expr(d.adbin, d.adrelid) "
                    "FROM pg_attrdef d JOIN pg_attribute a ON (a.attrelid, a.attnum) = (d.adrelid, d.adnum) "
                    "WHERE d.adrelid = 'orders_order'::regclass AND a.attname = 'id'")
        currval, max_id, default = cur.fetchone()
    check(default == "segment_nextval('orders'::text)", f"the key's default is {default}")
    check(currval == objects[-1].pk == max(ids), f"segment_currval('orders') = {currval}, last key {objects[-1].pk}")
    check(max(ids + [first.pk]) <= max_id, "a key above the tag's max_id")

    print(f"save(): id {first.pk}; bulk_create({n:,}): {len(inserts)} INSERT, "
          f"ids {min(ids)}..{max(ids)}, all distinct, from segment_nextval('orders')")


if __name__ == "__main__":
    main()
