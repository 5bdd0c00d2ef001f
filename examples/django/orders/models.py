from django.db import models


class Order(models.Model):
    """Keyed by segment_nextval('orders'). To Django the key is a plain
    BigAutoField: the database makes it, INSERT ... RETURNING hands it back,
    so save() and bulk_create() fill in `id` as they do for an identity
    column. Migration 0002 swaps the column's identity for the
    segment_nextval default; nothing in the model changes."""

    id = models.BigAutoField(primary_key=True)
    item = models.CharField(max_length=100)
