"""An index of each study's queued trials, for claims and queue counts.

A claim picks the lowest-numbered WAITING trial of a study and counts the ones left; through
Optuna's index on `trials.study_id` alone that reads every trial of the study. A partial index
on (study_id, number) of the WAITING trials holds only the queue. It is an index on Optuna's
`trials` table, which Optuna neither creates nor checks. (Measured at 10k trials it did not
make the per-trial overhead flat: bench/BENCHMARKS.md.)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_hpsearch_trials_waiting",
        "trials",
        ["study_id", "number"],
        postgresql_where=sa.text("state = 'WAITING'"),
        sqlite_where=sa.text("state = 'WAITING'"),
    )


def downgrade() -> None:
    op.drop_index("ix_hpsearch_trials_waiting", table_name="trials")
