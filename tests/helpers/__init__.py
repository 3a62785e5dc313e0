"""What the tests share, in one place (test files import from here, never from each other):

- `postgres`: a database of its own, migrated, a private server to restart;
- `configs`: study configs (a good one to vary, small ones to run, parsed ones);
- `cli`: the `hpsearch` command run as users run it; `terminal`: on a pseudo-terminal;
- `dispatch`: a registered worker and a claimed trial, written as a worker writes them;
- `processes`: worker processes to start, signal and wait for, and reads of their database;
  `objectives`: in-process workers on synthetic learning curves;
- tasks a study names by ``package.module:function``: `tiny_task`, `held_task`,
  `device_fault_task`, `rank_faults`; the trainer's `toy_task`;
- `pgbouncer`: a real PgBouncer in transaction pooling in front of a database;
- `dashboard_process`, `browser` (headless Chromium on its pages), `tcp_proxy`,
  `slurm_cluster`, `trackers` (an MLflow server, a tracked study), `wandb_files` (W&B offline
  runs read back);
- `lcbench`: the benchmark's LCBench surrogate data, and the mark that skips a test without it.

A fixture several test files use is in the conftest.py nearest them.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The checkout under test: subprocesses get it as PYTHONPATH."""
