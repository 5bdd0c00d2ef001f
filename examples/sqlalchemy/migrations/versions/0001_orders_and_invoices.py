"""The tags 'orders' and 'invoices', and their tables keyed by them
(models.py). The tags are created first, in the same transaction: a table
whose default names a missing tag fails only at its first INSERT (42704).
segment_create and segment_drop need write access to id_segment: run
migrations as the role that ran CREATE EXTENSION pg_idgen (or one it
granted INSERT, UPDATE, DELETE on id_segment).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("SELECT segment_create('orders', start => 1, step => 1000)")
    op.execute("SELECT segment_create('invoices', start => 1, step => 1000)")
    op.create_table(
        "orders",
        sa.Column("id", sa.BigInteger(), server_default=sa.text("segment_nextval('orders')"), nullable=False),
        sa.Column("item", sa.String(length=100), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "invoices",
        sa.Column("id", sa.BigInteger(), server_default=sa.text("segment_nextval('invoices')"), nullable=False),
        sa.Column("item", sa.String(length=100), nullable=False),
        # The ORM's insert sentinel (models.Invoice._sentinel).
        sa.Column("_sentinel", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("invoices")
    op.drop_table("orders")
    op.execute("SELECT segment_drop('invoices')")
    op.execute("SELECT segment_drop('orders')")
