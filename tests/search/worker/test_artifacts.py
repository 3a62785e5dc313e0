"""Checkpoints as artifacts: chunked in the database, crash-safe on disk, fenced by the lease."""

from __future__ import annotations

import io
import os
import time

import optuna
import pytest
from optuna.artifacts import download_artifact, get_all_artifact_meta
from optuna.artifacts.exceptions import ArtifactNotFound

from search.db import claims, liveness
from search.db.artifacts import DatabaseArtifactStore
from search.db.leases import LeaseLost
from search.db.storage import open_storage
from search.study.studies import create_study
from search.worker.artifacts import (
    DirectoryArtifactStore,
    TrialCheckpoints,
    artifact_store_for,
)
from search.worker.loop import Worker
from search.worker.trial import TrialOutcome, TrialRun
from tests.helpers.configs import make_config
from tests.helpers.dispatch import claim_a_new_trial, register


def test_database_store_round_trips_in_chunks(pg_url: str) -> None:
    storage = open_storage(pg_url)
    store = DatabaseArtifactStore(storage)
    store.chunk_bytes = 1000  # several chunks, and a last one that is full
    payload = os.urandom(3000)
    store.write("a1", io.BytesIO(payload))
    with store.open_reader("a1") as fh:
        assert fh.read() == payload
    store.write("a1", io.BytesIO(b"short"))  # replaced, not appended
    with store.open_reader("a1") as fh:
        assert fh.read() == b"short"
    store.write("empty", io.BytesIO(b""))
    with store.open_reader("empty") as fh:
        assert fh.read() == b""
    store.remove("a1")
    with pytest.raises(ArtifactNotFound):
        store.open_reader("a1")


def test_directory_store_never_leaves_a_partial_file(tmp_path) -> None:
    store = DirectoryArtifactStore(tmp_path / "ckpt")

    class Exploding(io.BytesIO):
        def read(self, n: int = -1) -> bytes:
            if self.tell() > 0:
                raise OSError("disk full")
            return super().read(4)

    with pytest.raises(OSError, match="disk full"):
        store.write("x", Exploding(b"0123456789"))
    assert list((tmp_path / "ckpt").iterdir()) == []
    store.write("x", io.BytesIO(b"whole"))
    with store.open_reader("x") as fh:
        assert fh.read() == b"whole"


def test_checkpoints_are_listed_for_the_dashboard_and_fenced(
    storage_url: str, study_name: str, tmp_path
) -> None:
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, make_config(study_name, n_trials=1))
    store = artifact_store_for(storage, None)
    expected = DatabaseArtifactStore if storage.is_postgres else DirectoryArtifactStore
    assert isinstance(store, expected)
    old, new = f"old-{study_name}", f"new-{study_name}"
    for worker in (old, new):
        register(storage, ref.study_id, worker, grace_s=0.05)
    claim = claim_a_new_trial(storage, ref.study_id, old)
    mine = TrialCheckpoints(store, storage, claim, ref)
    mine.write(io.BytesIO(b"epoch 1"))
    mine.write(io.BytesIO(b"epoch 2"))
    with mine.open() as fh:
        assert fh.read() == b"epoch 2"

    # Optuna (and so optuna-dashboard) lists exactly the latest checkpoint of the trial.
    study = optuna.load_study(study_name=study_name, storage=storage_url)
    metas = get_all_artifact_meta(study.trials[0], storage=study._storage)
    assert [m.filename for m in metas] == [f"{study_name}-trial-0-checkpoint.pt"]
    download_artifact(
        artifact_store=store, artifact_id=metas[0].artifact_id, file_path=str(tmp_path / "dl.pt")
    )
    assert (tmp_path / "dl.pt").read_bytes() == b"epoch 2"

    # Declared dead and taken over: the old worker can no longer move the pointer.
    time.sleep(0.2)
    liveness.heartbeat(storage, new, None)
    liveness.reap(storage, ref.study_id, 3)
    taken = claims.claim_next_trial(storage, ref.study_id, new)
    assert taken is not None
    theirs = TrialCheckpoints(store, storage, taken, ref)
    with theirs.open() as fh:
        assert fh.read() == b"epoch 2"  # the new owner resumes from the latest
    with pytest.raises(LeaseLost):
        mine.write(io.BytesIO(b"stale epoch 3"))
    with theirs.open() as fh:
        assert fh.read() == b"epoch 2"

    theirs.discard()
    assert theirs.open() is None
    assert get_all_artifact_meta(study.trials[0], storage=study._storage) == []


def test_a_published_checkpoint_never_runs_ahead_of_the_stored_scores(
    storage_url: str, study_name: str
) -> None:
    # Scores are written in the background; a checkpoint taken after epoch 2 must not become
    # the trial's checkpoint while epoch 2's score is still only in this process: killed at
    # that moment, the trial would resume after epoch 2 with no score for it.
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, make_config(study_name, n_trials=1))
    stored_at_checkpoint: dict[int, float] = {}

    def trial(run: TrialRun) -> TrialOutcome:
        for epoch in (1, 2):
            assert not run.report(epoch, 0.1 * epoch)
        assert run.checkpoints is not None
        run.checkpoints.write(io.BytesIO(b"after epoch 2"))
        study = optuna.load_study(study_name=study_name, storage=storage_url)
        stored_at_checkpoint.update(study.trials[run.number].intermediate_values)
        return TrialOutcome(status="completed", value=0.2)

    artifacts = artifact_store_for(storage, None)
    Worker(storage, ref, run_trial=trial, grace_s=5, progress=False, artifacts=artifacts).run()
    assert stored_at_checkpoint == {1: 0.1, 2: 0.2}
