"""The worker: pulls a study's trials one at a time and trains them, on one device or as a
data-parallel group, and the local launcher of worker processes.

- `loop`: `Worker`, one trial after another until the study is done; each trial's way:
  `claiming` (the next trial, or the study's end), `trial_start` (its params, `TrialRun` and
  reporter), `decisions` (pruner, budget and promotion at each report: why it stops),
  `recording` (its end, pause or hand-back: one `match` on its `StopReason`);
- `health`: the database's health, which every part reports to; `heartbeat` (and the lease
  watchdog, `self_fence`); `signals`: SIGTERM and Ctrl-C; `progress`: the terminal line and the
  budget on the dashboard;
- `trial`: what a trial function gets (`TrialRun`) and returns (`TrialOutcome`), and why it
  stopped (`StopReason`);
- `training`: the default trial function (`trainer.train` in this process);
- `trial_group`: a trial as K rank processes (``--gpus-per-trial``);
- `report_writer`: reports written without making training wait;
- `budget_and_promotion`: a study's epoch and hour budgets as a worker spends them; pausing at
  rungs and promoting (promotion-based ASHA);
- `artifacts`: checkpoints every worker can reach;
- `preflight`: the checks before a worker registers; `provenance`: what made a trial;
- `start`: one worker in this process (`run_worker`, `WorkerOptions`);
- `launcher`: every local child process (workers, ranks): devices, threads, restarts;
- `slurm_script`: the sbatch script of a job array of workers (`hpsearch slurm`);
- `tracked`: a trial's tracker runs. (`hpsearch try`, one configuration without a study, is
  `search.commands.try_`.)
"""

from search.worker.artifacts import ArtifactStore, artifact_store_for
from search.worker.launcher import run_worker_processes
from search.worker.loop import Worker
from search.worker.start import WorkerOptions, run_worker
from search.worker.trial import TrialOutcome, TrialRun

__all__ = [
    "ArtifactStore",
    "TrialOutcome",
    "TrialRun",
    "Worker",
    "WorkerOptions",
    "artifact_store_for",
    "run_worker",
    "run_worker_processes",
]
