"""Who started a worker: the Slurm job array task or the Kubernetes pod (JSON), if any.

`hpsearch workers` shows it beside host and pid, so that a lost or misbehaving worker leads
to the scheduler's own record (``sacct -j 1234_5``, ``kubectl logs pod/...``).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from search.db.migrate import schema_for

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workers", sa.Column("launched_by", sa.Text), schema=schema_for(op.get_bind()))


def downgrade() -> None:
    op.drop_column("workers", "launched_by", schema=schema_for(op.get_bind()))
