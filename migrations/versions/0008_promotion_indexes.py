"""Indexes for the promotion query: the paused rung rows, and each rung's rows by value.

`search.db.pauses.next_promotable` (asked after every trial of an ASHA study) ranked every
rung row of the study in a window (a sequential scan and a sort of all of them: 89 ms at
40,000 rung rows, growing with the study). It now reads the paused rows through a partial
index that holds only them, and counts a rung's rows, and those better than a candidate,
through an index on (study_id, bracket, level, value) that answers the counts from the index
alone. That index starts with the columns of `ix_trial_rungs_study` (0006), which it replaces.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from search.db.migrate import schema_for

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    schema = schema_for(op.get_bind())
    op.create_index(
        "ix_trial_rungs_rank",
        "trial_rungs",
        ["study_id", "bracket", "level", "value"],
        schema=schema,
    )
    op.drop_index("ix_trial_rungs_study", table_name="trial_rungs", schema=schema)
    op.create_index(
        "ix_trial_rungs_paused",
        "trial_rungs",
        ["study_id", "bracket", "level"],
        schema=schema,
        # The very terms the queries write (`paused.is_(True)`), so that both databases match
        # them to the index's predicate.
        postgresql_where=sa.text("paused IS TRUE"),
        sqlite_where=sa.text("paused IS 1"),
    )


def downgrade() -> None:
    schema = schema_for(op.get_bind())
    op.drop_index("ix_trial_rungs_paused", table_name="trial_rungs", schema=schema)
    op.create_index(
        "ix_trial_rungs_study", "trial_rungs", ["study_id", "bracket", "level"], schema=schema
    )
    op.drop_index("ix_trial_rungs_rank", table_name="trial_rungs", schema=schema)
