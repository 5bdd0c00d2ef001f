"""Two SQLAlchemy 2 mappings keyed by pg_idgen tags, each batched by the
ORM's "insertmanyvalues" with every object given the key its row got
(docs/examples.md#sqlalchemy-2). Without either, a key from a server
default makes the ORM send one INSERT per object: it cannot tell which
RETURNING row belongs to which object.

- Order (SQLAlchemy 2.1 and later): the default is marked monotonic.
  segment_nextval('orders') strictly increases within one backend, so the
  ORM inserts a batch in parameter order (INSERT ... SELECT ... ORDER BY)
  and sorts the returned keys to match, as it does for an identity column.
  Not with pg_idgen.snowflake_fallback on: a fallback ID (near 2^60) in a
  batch breaks the order, and objects would get each other's keys.
- Invoice (SQLAlchemy 2.0.10 and later, and 2.1): a sentinel column of its
  own. The ORM sends a counter in it and matches the RETURNING rows by it;
  nothing is assumed about the keys. The price is a nullable integer
  column in the table.
"""

from sqlalchemy import BigInteger, String, func
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, orm_insert_sentinel


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, server_default=func.segment_nextval("orders", monotonic=True))
    item: Mapped[str] = mapped_column(String(100))


class Invoice(Base):
    __tablename__ = "invoices"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, server_default=func.segment_nextval("invoices"))
    item: Mapped[str] = mapped_column(String(100))
    _sentinel: Mapped[int] = orm_insert_sentinel()
