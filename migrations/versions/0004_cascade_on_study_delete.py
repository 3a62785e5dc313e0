"""Deleting a study deletes hpsearch's rows for it: workers, leases, the sampling lock and the
checkpoints stored in the database reference the study (or the trial) ON DELETE CASCADE, so
``optuna.delete_study`` leaves nothing of hpsearch's behind.

SQLite enforces no foreign keys unless each connection asks for it, and cannot add them to a
table; there `hpsearch delete` removes the rows itself.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from search.db.migrate import schema_for

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# (table, column, referenced table, referenced column)
_CASCADES = [
    ("workers", "study_id", "studies", "study_id"),
    ("trial_leases", "study_id", "studies", "study_id"),
    ("sampling_locks", "study_id", "studies", "study_id"),
    ("artifacts", "trial_id", "trials", "trial_id"),
]


def upgrade() -> None:
    bind = op.get_bind()
    schema = schema_for(bind)
    op.add_column("artifacts", sa.Column("trial_id", sa.Integer), schema=schema)
    op.create_index("ix_artifacts_trial_id", "artifacts", ["trial_id"], schema=schema)
    if bind.dialect.name != "postgresql":
        return
    for table, column, referenced, key in _CASCADES:
        # Rows of studies deleted before this revision would fail the new constraint.
        op.execute(
            f'DELETE FROM "{schema}"."{table}" AS t WHERE t.{column} IS NOT NULL AND NOT EXISTS '
            f"(SELECT 1 FROM {referenced} AS r WHERE r.{key} = t.{column})"
        )
        op.create_foreign_key(
            f"fk_{table}_{column}",
            table,
            referenced,
            [column],
            [key],
            source_schema=schema,
            ondelete="CASCADE",
        )


def downgrade() -> None:
    bind = op.get_bind()
    schema = schema_for(bind)
    if bind.dialect.name == "postgresql":
        for table, column, _referenced, _key in _CASCADES:
            op.drop_constraint(f"fk_{table}_{column}", table, type_="foreignkey", schema=schema)
    op.drop_index("ix_artifacts_trial_id", "artifacts", schema=schema)
    op.drop_column("artifacts", "trial_id", schema=schema)
