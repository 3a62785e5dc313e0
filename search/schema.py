"""hpsearch's own tables, beside Optuna's (schema `hpsearch` on PostgreSQL).

Optuna's tables stay the record of every study: params, intermediate values, states and
attributes are written in Optuna's schema, so Optuna and optuna-dashboard read our studies
unchanged. These tables hold only what Optuna has no place for: which worker holds which trial
(leases with fencing tokens), worker liveness, and checkpoint bytes.

Times are float seconds since the epoch taken from the database's clock, so that machines with
skewed clocks agree on who is late. Migrations live in `migrations/`.
"""

from __future__ import annotations

import sqlalchemy as sa

from search.storage import SCHEMA

__all__ = ["artifacts", "metadata", "trial_leases", "workers"]

metadata = sa.MetaData(schema=SCHEMA)

workers = sa.Table(
    "workers",
    metadata,
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
)
"""One row per worker process: its last heartbeat and the grace period it asked for."""

trial_leases = sa.Table(
    "trial_leases",
    metadata,
    sa.Column("trial_id", sa.Integer, primary_key=True),
    sa.Column("study_id", sa.Integer, nullable=False, index=True),
    sa.Column("worker_id", sa.String(64), index=True),
    sa.Column("generation", sa.Integer, nullable=False, server_default="0"),
    sa.Column("claimed_at", sa.Float(53)),
    sa.Column("epoch", sa.Integer, nullable=False, server_default="0"),
)
"""Who runs a trial. worker_id NULL: nobody (queued or handed back). `generation` grows with every
claim and fences writes: a worker whose generation is no longer current has lost the trial."""

artifacts = sa.Table(
    "artifacts",
    metadata,
    sa.Column("artifact_id", sa.String(128), primary_key=True),
    sa.Column("chunk", sa.Integer, primary_key=True),
    sa.Column("data", sa.LargeBinary, nullable=False),
)
"""Checkpoint bytes stored in the database, in chunks (PostgreSQL bytea caps one value at 1 GB)."""
