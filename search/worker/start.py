"""A worker in this process: `run_worker` with the options `run`, `worker` and `compare` pass on
(`WorkerOptions`, also given as flags to the worker processes `search.worker.launcher` starts)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from search.db.migrate import check_schema
from search.db.storage import Storage, retry
from search.study.studies import open_study
from search.worker.artifacts import artifact_store_for
from search.worker.launcher import group_label, trial_devices
from search.worker.loop import Worker
from search.worker.training import run_training
from search.worker.trial_group import run_trial_group

__all__ = ["WorkerOptions", "run_worker"]


@dataclass(frozen=True)
class WorkerOptions:
    """What `run` and `worker` pass on to each worker (and to worker processes they start)."""

    artifacts: str | None
    grace_s: float
    keep_checkpoints: bool
    device_memory: int | None
    """Bytes a trial may use on the worker's device (the pre-training memory check)."""
    gpus_per_trial: int = 1
    """Ranks of each trial (search.worker.trial_group); 1: the trial runs in the worker process."""

    def argv(self) -> list[str]:
        """These options as `hpsearch worker` flags, for a child process."""
        out = ["--grace-s", str(self.grace_s)]
        if self.artifacts:
            out += ["--artifacts", self.artifacts]
        if self.keep_checkpoints:
            out.append("--keep-checkpoints")
        if self.device_memory is not None:
            out += ["--device-memory", str(self.device_memory)]
        if self.gpus_per_trial > 1:
            out += ["--gpus-per-trial", str(self.gpus_per_trial)]
        return out


def run_worker(storage: Storage, study_name: str, device: str, options: WorkerOptions) -> int:
    """One worker in this process on `device` until the study is done; its exit code."""
    # The database answered once (open_storage); if it restarts now, wait for it.
    retry(lambda: check_schema(storage), "check the schema", attempts=12)
    study = retry(lambda: open_study(storage, study_name), "open the study", attempts=12)
    run_trial = None
    if options.device_memory is not None:
        run_trial = functools.partial(run_training, device_memory=options.device_memory)
    if options.gpus_per_trial > 1:
        group = trial_devices(device, options.gpus_per_trial)
        run_trial = functools.partial(run_trial_group, devices=group)
        device = group_label(group)
    worker = Worker(
        storage,
        study,
        device=device,
        run_trial=run_trial,
        grace_s=options.grace_s,
        artifacts=artifact_store_for(storage, options.artifacts),
        keep_checkpoints=options.keep_checkpoints,
    )
    try:
        return worker.run()
    finally:
        storage.close()
