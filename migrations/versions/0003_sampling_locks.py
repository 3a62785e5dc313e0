"""The sampling lock as a row: it holds through PgBouncer's transaction pooling.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

from search.db.migrate import schema_for

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sampling_locks",
        sa.Column("study_id", sa.Integer, primary_key=True),
        sa.Column("holder", sa.String(64)),
        sa.Column("taken_at", sa.Float(53)),
        schema=schema_for(op.get_bind()),
    )


def downgrade() -> None:
    op.drop_table("sampling_locks", schema=schema_for(op.get_bind()))
