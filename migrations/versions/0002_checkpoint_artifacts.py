"""Checkpoint artifacts in the database; the last worker that held a trial.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

from search.db.migrate import schema_for

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    schema = schema_for(op.get_bind())
    op.create_table(
        "artifacts",
        sa.Column("artifact_id", sa.String(128), primary_key=True),
        sa.Column("chunk", sa.Integer, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
        schema=schema,
    )
    op.add_column("trial_leases", sa.Column("last_worker_id", sa.String(64)), schema=schema)


def downgrade() -> None:
    schema = schema_for(op.get_bind())
    op.drop_column("trial_leases", "last_worker_id", schema=schema)
    op.drop_table("artifacts", schema=schema)
