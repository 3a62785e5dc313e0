"""Artifacts (checkpoints, reports) in the study database: hpsearch's table `artifacts`, in
chunks, behind Optuna's artifact store protocol (what `search.worker.artifacts` uses when no
shared directory is given)."""

from __future__ import annotations

import tempfile
from typing import BinaryIO

import sqlalchemy as sa
from optuna.artifacts.exceptions import ArtifactNotFound

from search.db.storage import Storage
from search.db.tables import artifacts

__all__ = ["DatabaseArtifactStore"]


class DatabaseArtifactStore:
    """Artifacts in the study database (hpsearch's table `artifacts`), in chunks.

    PostgreSQL caps one bytea value at 1 GB; chunks of 32 MiB keep memory flat for checkpoints
    of any size. Writing an artifact is one transaction: readers see all of it or nothing.
    """

    chunk_bytes = 32 << 20

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def write(self, artifact_id: str, content_body: BinaryIO, trial_id: int | None = None) -> None:
        """Store an artifact; one of a trial (`trial_id`) is deleted with the trial."""
        with self.storage.transaction() as conn:
            conn.execute(sa.delete(artifacts).where(artifacts.c.artifact_id == artifact_id))
            chunk = 0
            while True:
                data = content_body.read(self.chunk_bytes)
                if not data and chunk > 0:
                    break
                conn.execute(
                    sa.insert(artifacts).values(
                        artifact_id=artifact_id, chunk=chunk, data=data, trial_id=trial_id
                    )
                )
                chunk += 1
                if len(data) < self.chunk_bytes:
                    break

    def open_reader(self, artifact_id: str) -> BinaryIO:
        # Spooled: small checkpoints stay in memory, big ones go to a temporary file.
        out = tempfile.SpooledTemporaryFile(max_size=256 << 20)  # noqa: SIM115 (returned open)
        found = False
        with self.storage.read() as conn:  # a server-side cursor needs a transaction
            rows = conn.execution_options(stream_results=True, max_row_buffer=2).execute(
                sa.select(artifacts.c.data)
                .where(artifacts.c.artifact_id == artifact_id)
                .order_by(artifacts.c.chunk)
            )
            for (data,) in rows:
                out.write(data)
                found = True
        if not found:
            out.close()
            raise ArtifactNotFound(f"no artifact {artifact_id!r} in the database")
        out.seek(0)
        return out  # type: ignore[return-value]

    def remove(self, artifact_id: str) -> None:
        with self.storage.transaction() as conn:
            conn.execute(sa.delete(artifacts).where(artifacts.c.artifact_id == artifact_id))

    def remove_prefix(self, prefix: str) -> None:
        """Delete every artifact whose id starts with `prefix` (a finished trial's leftovers)."""
        with self.storage.transaction() as conn:
            conn.execute(
                sa.delete(artifacts).where(
                    artifacts.c.artifact_id.startswith(prefix, autoescape=True)
                )
            )
