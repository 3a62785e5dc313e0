"""Worker liveness and trial leases.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

from search.db.migrate import schema_for

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    schema = schema_for(op.get_bind())
    op.create_table(
        "workers",
        sa.Column("worker_id", sa.String(64), primary_key=True),
        sa.Column("study_id", sa.Integer, nullable=False, index=True),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("device", sa.String(255), nullable=False),
        sa.Column("started_at", sa.Float(53), nullable=False),
        sa.Column("heartbeat_at", sa.Float(53), nullable=False),
        sa.Column("grace_s", sa.Float(53), nullable=False),
        sa.Column("stopped_at", sa.Float(53)),
        sa.Column("stop_reason", sa.String(255)),
        schema=schema,
    )
    op.create_table(
        "trial_leases",
        # Deleting a study through Optuna deletes its trials, and with them their leases.
        sa.Column(
            "trial_id",
            sa.Integer,
            sa.ForeignKey("trials.trial_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("study_id", sa.Integer, nullable=False, index=True),
        sa.Column("worker_id", sa.String(64), index=True),
        sa.Column("generation", sa.Integer, nullable=False, server_default="0"),
        sa.Column("claimed_at", sa.Float(53)),
        sa.Column("epoch", sa.Integer, nullable=False, server_default="0"),
        schema=schema,
    )


def downgrade() -> None:
    schema = schema_for(op.get_bind())
    op.drop_table("trial_leases", schema=schema)
    op.drop_table("workers", schema=schema)
