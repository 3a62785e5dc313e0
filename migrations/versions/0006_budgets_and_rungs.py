"""Study budgets (epochs trained, counted by every worker) and the rungs of promotion-based ASHA.

`study_budgets` holds one counter per study: a worker reserves each epoch there before training
it (`search.db.budget`), so that the fleet together never trains more than `budget_epochs`.
`trial_rungs` records each trial's value at every rung it reached and whether it sits paused
there (`search.db.pauses`); a paused trial is WAITING in Optuna's table and is claimed only by
a promotion.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from search.db.migrate import schema_for

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    schema = schema_for(op.get_bind())
    op.create_table(
        "study_budgets",
        sa.Column("study_id", sa.Integer, primary_key=True),
        sa.Column("epochs_used", sa.Integer, nullable=False, server_default="0"),
        schema=schema,
    )
    op.create_table(
        "trial_rungs",
        sa.Column("trial_id", sa.Integer, primary_key=True),
        sa.Column("level", sa.Integer, primary_key=True),
        sa.Column("study_id", sa.Integer, nullable=False),
        sa.Column("bracket", sa.Integer, nullable=False),
        sa.Column("value", sa.Float(53)),
        sa.Column("paused", sa.Boolean, nullable=False),
        schema=schema,
    )
    op.create_index(
        "ix_trial_rungs_study", "trial_rungs", ["study_id", "bracket", "level"], schema=schema
    )


def downgrade() -> None:
    schema = schema_for(op.get_bind())
    op.drop_index("ix_trial_rungs_study", table_name="trial_rungs", schema=schema)
    op.drop_table("trial_rungs", schema=schema)
    op.drop_table("study_budgets", schema=schema)
