"""A chaos soak on PostgreSQL: a study of real `hpsearch worker` processes under every fault.

While the study runs: a worker with a device this machine lacks tries to join (it must stop
with exit 2 and touch nothing), one trial kills whichever worker runs it (it must end FAIL after
``max_attempts``), workers are killed (-9) or SIGTERMed at random and replaced (every few seconds
and every few finished trials, so a fast machine sees as many faults as a slow one), and the
database restarts once. At the end every trial is COMPLETE, PRUNED or FAIL with its reason,
nothing is RUNNING or WAITING, there are exactly `n_trials`, and no trial ran in two places at
once (each run of a trial's task logs when it starts and after every epoch; the runs of one
trial must not overlap).

    python -m tests.soak.chaos --trials 60 --workers 6  # a longer soak (needs initdb, pg_ctl)

`tests/search/worker/test_chaos.py` runs a short one in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POISON_X = 0.987654321
"""The x of the poisonous trial: its task kills its worker process at its first epoch's end."""

TASK = '''
"""A small real task for the soak: it logs each run's epochs, and one trial kills its worker."""
import json, os, signal, time
import torch
from torch.utils.data import TensorDataset
from trainer import Task

LOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs.jsonl")

def make_task(params):
    key = round(params["x"], 12)
    started = time.time()
    epoch = [0]

    def log(event):
        with open(LOG, "a") as fh:
            fh.write(json.dumps({"x": key, "pid": os.getpid(), "start": started,
                                 "t": time.time(), "event": event}) + "\\n")

    log("start")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    data = TensorDataset(x, (x[:, 0] * params["x"] > 0).long())

    def metric(out, y):
        epoch[0] += 1
        if key == POISON:
            log("poison")
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(EPOCH_S)
        log("epoch")
        return (out.argmax(1) == y).float().mean().item() * params["x"]

    return Task(model=torch.nn.Linear(8, 2), train_set=data, val_set=data,
                loss_fn=torch.nn.functional.cross_entropy, metric_fn=metric)
'''

CONFIG = """
[study]
name = "{name}"
n_trials = {n_trials}
sampler = "random"
seed = {seed}
max_attempts = 3

[pruner]
type = "{pruner}"
min_resource = 1
reduction_factor = 3

[task]
name = "chaos_task:make_task"
epochs = 4

[train]
checkpoint_every_s = 60

[space]
x = {{ type = "float", low = 0.0, high = 1.0 }}
lr = {{ type = "float", low = 1e-3, high = 1e-1, log = true }}
batch_size = {{ type = "categorical", choices = [32] }}
"""


@dataclass
class Soak:
    """What happened, and what was found at the end."""

    kills: int = 0
    sigterms: int = 0
    database_restarts: int = 0
    wrong_device_exit: int | None = None
    states: Counter[str] = field(default_factory=Counter)
    fail_reasons: dict[int, str] = field(default_factory=dict)
    poisoned: dict[str, Any] = field(default_factory=dict)
    overlapping_runs: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    seconds: float = 0.0
    resumed_after_pause: int = 0
    """Trials that paused at a rung and were resumed to the end (pruner asha)."""

    def tally(self) -> str:
        return (
            f"{sum(self.states.values())} trials {dict(sorted(self.states.items()))} in "
            f"{self.seconds:.0f} s; {self.kills} kill -9, {self.sigterms} SIGTERM, "
            f"{self.database_restarts} database restart(s); wrong-device worker exit "
            f"{self.wrong_device_exit}; poisonous trial {self.poisoned.get('state')} after "
            f"{self.poisoned.get('attempts')} attempts; overlapping runs: "
            f"{len(self.overlapping_runs)}; completed after a pause: {self.resumed_after_pause}"
        )


def run_soak(
    url: str,
    restart_database: Callable[[], None],
    workdir: Path,
    *,
    n_trials: int = 24,
    n_workers: int = 4,
    grace_s: float = 3.0,
    epoch_s: float = 0.15,
    seed: int = 0,
    timeout_s: float = 170.0,
    pruner: str = "hyperband",
) -> Soak:
    """Run one soak; returns what happened. Raises AssertionError if the study never ends."""
    import optuna

    from search.db.migrate import upgrade
    from search.db.storage import open_storage
    from search.sampling.sample_ahead import queue_first_trials
    from search.study.parse_config import load_config
    from search.study.studies import create_study
    from tests.helpers.processes import WorkerProcess, query, trial_states

    rng = random.Random(seed)
    name = f"chaos-{seed}-{os.getpid()}-{int(time.time())}"
    (workdir / "chaos_task.py").write_text(
        TASK.replace("POISON", repr(POISON_X)).replace("EPOCH_S", repr(epoch_s))
    )
    config = CONFIG.format(name=name, n_trials=n_trials, seed=seed, pruner=pruner)
    (workdir / "chaos.toml").write_text(config)
    sys.path.insert(0, str(workdir))
    storage = open_storage(url)
    upgrade(storage)
    study, _ = create_study(storage, load_config(workdir / "chaos.toml"))
    optuna.load_study(study_name=name, storage=url).enqueue_trial({"x": POISON_X})
    queue_first_trials(storage, study)
    storage.close()

    soak = Soak()
    started = time.monotonic()
    serial = 0

    def new_worker(*extra: str) -> WorkerProcess:
        nonlocal serial
        serial += 1
        return WorkerProcess(
            url, name, workdir, grace_s=grace_s, name=f"w{serial}", extra=tuple(extra)
        )

    workers = [new_worker() for _ in range(n_workers)]
    wrong = new_worker("--device", "cuda:7")  # replaces the default --device cpu
    # Faults come on a clock and on progress, whichever is first: a fast machine that ends the
    # study before the clock strikes still sees a fault every `fault_every` trials, and the
    # database restart by the time a third of the trials are done.
    fault_every = max(2, n_trials // 6)
    next_fault = time.monotonic() + rng.uniform(4, 6)
    next_fault_done = fault_every
    restart_at = time.monotonic() + rng.uniform(8, 12)
    try:
        while time.monotonic() - started < timeout_s:
            states = trial_states(url, name)
            done = sum(states.get(s, 0) for s in ("COMPLETE", "PRUNED", "FAIL"))
            if done >= n_trials and not any(w.alive() for w in workers):
                break
            if wrong is not None and not wrong.alive():
                soak.wrong_device_exit = wrong.wait(1)
                wrong_log, wrong = wrong.log(), None
                registered = query(
                    url, "SELECT count(*) FROM hpsearch.workers WHERE device LIKE 'cuda%'"
                )
                assert registered[0][0] == 0, "the wrong-device worker registered"
                assert wrong_log.strip().splitlines()[-1].startswith("hpsearch: error: --device")
            if soak.database_restarts == 0 and (
                time.monotonic() >= restart_at or done >= n_trials // 3
            ):
                restart_database()
                soak.database_restarts += 1
            if done < n_trials - 2 and (time.monotonic() >= next_fault or done >= next_fault_done):
                live = [i for i, w in enumerate(workers) if w.alive()]
                if live:
                    victim = rng.choice(live)
                    if rng.random() < 0.5:
                        workers[victim].kill()
                        soak.kills += 1
                    else:
                        workers[victim].signal(signal.SIGTERM)
                        workers[victim].wait(60)
                        soak.sigterms += 1
                    workers[victim] = new_worker()
                next_fault = time.monotonic() + rng.uniform(3, 6)
                next_fault_done = done + fault_every
            # The poisonous trial takes down its worker: bring the fleet back to strength.
            for i, w in enumerate(workers):
                if not w.alive() and w.proc.returncode == -signal.SIGKILL and done < n_trials:
                    workers[i] = new_worker()
            time.sleep(0.25)
        else:
            logs = "\n".join(f"--- {w.log_path.name}\n{w.log()[-1500:]}" for w in workers)
            raise AssertionError(f"the soak did not end in {timeout_s} s\n{logs}")
    finally:
        for w in [*workers, *([wrong] if wrong else [])]:
            w.kill()
        sys.path.remove(str(workdir))
    soak.seconds = time.monotonic() - started

    trials = optuna.load_study(study_name=name, storage=url).get_trials()
    soak.numbers = [
        n
        for (n,) in query(
            url,
            "SELECT t.number FROM trials t JOIN studies s USING (study_id) "
            "WHERE s.study_name = :n ORDER BY 1",
            n=name,
        )
    ]
    soak.states = Counter(t.state.name for t in trials)
    soak.fail_reasons = {
        t.number: t.system_attrs.get("fail_reason", "") for t in trials if t.state.name == "FAIL"
    }
    poisoned = next(t for t in trials if t.params.get("x") == POISON_X)
    soak.poisoned = {
        "state": poisoned.state.name,
        "attempts": len(poisoned.system_attrs.get("hpsearch:failed_attempts", [])),
        "reason": poisoned.system_attrs.get("fail_reason"),
    }
    soak.overlapping_runs = overlapping_runs(workdir / "runs.jsonl")
    soak.resumed_after_pause = sum(
        1 for t in trials if "hpsearch:paused_at" in t.system_attrs and t.state.name == "COMPLETE"
    )
    return soak


def overlapping_runs(log: Path) -> list[str]:
    """Runs of one trial (its x) by two processes whose lifetimes overlap."""
    runs: dict[tuple[float, int, float], list[float]] = defaultdict(list)
    for line in log.read_text().splitlines():
        event = json.loads(line)
        runs[(event["x"], event["pid"], event["start"])].append(event["t"])
    by_trial: dict[float, list[tuple[float, float, int]]] = defaultdict(list)
    for (x, pid, start), times in runs.items():
        by_trial[x].append((start, max(times), pid))
    overlaps = []
    for x, spans in by_trial.items():
        spans.sort()
        last_end, last_pid = spans[0][1], spans[0][2]
        for start, end, pid in spans[1:]:
            if start < last_end and pid != last_pid:
                overlaps.append(
                    f"x={x}: pid {last_pid} until {last_end:.2f}, pid {pid} from {start:.2f}"
                )
            if end > last_end:
                last_end, last_pid = end, pid
    return overlaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument("--pruner", choices=("hyperband", "asha"), default="hyperband")
    args = parser.parse_args()
    from tests.helpers.postgres import private_postgres

    with private_postgres() as (url, restart), tempfile.TemporaryDirectory() as tmp:
        soak = run_soak(
            url,
            restart,
            Path(tmp),
            n_trials=args.trials,
            n_workers=args.workers,
            seed=args.seed,
            timeout_s=args.timeout_s,
            pruner=args.pruner,
        )
    print(soak.tally())
    print(json.dumps(soak.fail_reasons, indent=1))


if __name__ == "__main__":
    main()
