"""A trial as a data-parallel job: K rank processes (``trainer.distributed``), one launcher.

`run_trial_group` is the worker's trial function under ``--gpus-per-trial K``. The worker
process is the launcher: it claims, heartbeats, reports, asks the pruner and writes checkpoint
pointers exactly as for a one-process trial; rank 0 reaches the study only through it (reports,
checkpoints, its final result), and the other ranks only through rank 0 (torch.distributed).

    worker (launcher) ──socket pair── rank 0 ──gloo / NCCL── ranks 1..K-1

Faults: a rank that dies (killed, crashed, out of host memory) ends the attempt at once: the
launcher kills the other ranks, and the trial goes back to the queue as one failed attempt
(after ``max_attempts`` of them it ends FAIL), resumable from its last checkpoint. A rank that
fails in Python (the task's code, a diverged loss) ends the trial like a one-process trial
would. A rank stuck in a collective is freed by the group's timeout on every collective.

Example (what ``hpsearch worker --device cpu --gpus-per-trial 2`` does)::

    worker = Worker(storage, study, device="cpu x2",
                    run_trial=functools.partial(run_trial_group, devices=["cpu", "cpu"]))

Caveat: a multi-rank trial does not adapt to an out-of-memory error as a one-process trial does
(a rank cannot retry alone): it fails with the reason; lower batch_size or raise
grad_accum_steps. The pre-training memory check is not run for multi-rank trials.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import trainer
from search.errors import first_line
from search.worker.launcher import group_label, rank_plans
from search.worker.training import outcome_of
from search.worker.trial import TrialOutcome, TrialRun
from trainer.config import DEFAULT_BATCH_SIZE
from trainer.distributed import ENV_COLLECTIVE_TIMEOUT, ENV_CONTROL_FD, ENV_DEVICE

__all__ = ["run_trial_group"]

logger = logging.getLogger("search.worker.trial_group")

ENV_TIMEOUT = "HPSEARCH_COLLECTIVE_TIMEOUT_S"
"""Seconds a collective of a multi-rank trial may wait (default: trainer.distributed's)."""
LINGER_S = 30.0
"""After one rank ended normally, how long the others get to end too before they are killed."""
POLL_S = 0.2
"""How often the launcher looks at its ranks between two messages."""
ENDED_WELL = ("completed", "pruned", "preempted")


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen[bytes]
    conn: Connection
    exit_code: int | None = None
    result: dict[str, Any] | None = None
    ended_at: float = math.inf
    """When its train() returned (time.monotonic: one clock for every process of a machine)."""
    killed: bool = False


@dataclass
class _Group:
    ranks: list[_Rank] = field(default_factory=list)
    kill_at: float | None = None
    stop_sent: bool = False

    def pass_stop(self, run: TrialRun) -> None:
        """Tell rank 0 once that the worker asked the trial to stop (it checkpoints and ends)."""
        if run.stop.is_set() and not self.stop_sent and self.ranks[0].exit_code is None:
            self.stop_sent = _send(self.ranks[0], ("stop",))

    def alive(self) -> list[_Rank]:
        return [r for r in self.ranks if r.exit_code is None]

    def kill(self) -> None:
        for r in self.alive():
            r.killed = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(r.proc.pid, signal.SIGKILL)
        for r in self.ranks:
            r.exit_code = r.proc.wait() if r.exit_code is None else r.exit_code
            r.conn.close()


def run_trial_group(
    run: TrialRun, *, devices: list[str], collective_timeout_s: float | None = None
) -> TrialOutcome:
    """Train one trial on len(devices) ranks; the outcome as `run_training` gives it."""
    k = len(devices)
    batch_size = int(run.params.get("batch_size", DEFAULT_BATCH_SIZE))
    accum = run.config.train.grad_accum_steps
    if batch_size < k * accum:
        return TrialOutcome(
            status="failed",
            reason=f"batch_size {batch_size} cannot be split over {k} ranks x grad_accum_steps "
            f"{accum} (each rank needs at least one sample per micro-batch)",
        )
    scratch = Path(tempfile.mkdtemp(prefix=f"hpsearch-trial-{run.number}-"))
    group = _Group()
    try:
        resume = _copy_checkpoint(run, scratch)
        timeout = collective_timeout_s or os.environ.get(ENV_TIMEOUT)
        group.ranks = _start_ranks(devices, timeout)
        config = dataclasses.replace(run.config.train, seed=run.seed)
        spec = {
            "task": run.config.task.name,
            "params": dict(run.params),
            "config": dataclasses.asdict(config),
            "resume": resume,
            "scratch": str(scratch),
        }
        _send(group.ranks[0], ("spec", spec))  # if rank 0 is dead already, the loop says so
        _supervise(run, group)
    finally:
        group.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    return _outcome(run, group, batch_size, accum)


def _copy_checkpoint(run: TrialRun, scratch: Path) -> str | None:
    """The trial's checkpoint as a local file every rank reads (None: it has none)."""
    if run.checkpoints is None:
        return None
    stream = run.checkpoints.open()
    if stream is None:
        return None
    path = scratch / "resume.pt"
    with stream, open(path, "wb") as out:
        shutil.copyfileobj(stream, out, 1 << 20)
    return str(path)


def _start_ranks(devices: list[str], timeout: float | str | None) -> list[_Rank]:
    k = len(devices)
    port = _free_port()
    ranks = []
    for r, plan in enumerate(rank_plans(devices, os.environ, cpu_count=os.cpu_count() or 1)):
        ours, theirs = socket.socketpair()
        env = dict(
            plan.env,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            RANK=str(r),
            WORLD_SIZE=str(k),
            LOCAL_RANK=str(r),
            LOCAL_WORLD_SIZE=str(k),
            **{ENV_CONTROL_FD: str(theirs.fileno()), ENV_DEVICE: plan.device},
        )
        if timeout:
            env[ENV_COLLECTIVE_TIMEOUT] = str(timeout)
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainer.distributed"],
            env=env,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,  # Ctrl-C reaches the worker, which stops the ranks cleanly
        )
        theirs.close()
        ranks.append(_Rank(r, proc, Connection(ours.detach())))
    logger.info("started %d ranks on %s (rendezvous 127.0.0.1:%d)", k, group_label(devices), port)
    return ranks


def _supervise(run: TrialRun, group: _Group) -> None:
    """Answer rank 0 until every rank has exited (or the survivors of a dead one are killed)."""
    while group.alive():
        group.pass_stop(run)
        open_conns = [r.conn for r in group.alive() if not r.conn.closed]
        for conn in wait(open_conns, timeout=POLL_S) if open_conns else []:
            rank = next(r for r in group.ranks if r.conn is conn)
            _receive(run, group, rank)
        now = time.monotonic()
        for r in group.alive():
            code = r.proc.poll()
            if code is None:
                continue
            while not r.conn.closed and r.conn.poll():  # its last words (its result)
                _receive(run, group, r)
            r.exit_code = code
            if r.result is None or code != 0 or r.result["status"] not in ENDED_WELL:
                how = _ending(r)
                if group.alive():
                    logger.warning("rank %d %s: stopping the other ranks", r.rank, how)
                group.kill_at = now
            elif group.kill_at is None:
                group.kill_at = now + LINGER_S
        if group.kill_at is not None and now >= group.kill_at and group.alive():
            group.kill()


def _receive(run: TrialRun, group: _Group, rank: _Rank) -> None:
    try:
        message = rank.conn.recv()
    except (EOFError, OSError):
        rank.conn.close()
        return
    kind = message[0]
    if kind == "result":
        _, _, rank.ended_at, rank.result = message
    elif kind == "report":
        _, epoch, value = message
        decision = run.report(epoch, value)
        # A stop asked for by now reaches rank 0 before the decision, so the ranks stop at the
        # epoch's end (the checkpoint the report follows), not some steps into the next one.
        group.pass_stop(run)
        _send(rank, ("decision", decision))
    elif kind == "checkpoint":
        _send(rank, _save_checkpoint(run, message[1]))


def _save_checkpoint(run: TrialRun, path: str) -> tuple[Any, ...]:
    if run.checkpoints is None:
        return ("error", "this trial has no checkpoint store")
    try:
        with open(path, "rb") as data:
            run.checkpoints.write(data)
    except Exception as exc:  # rank 0 logs it and trains on, as after any failed save
        return ("error", f"{type(exc).__name__}: {first_line(exc)}")
    return ("saved",)


def _send(rank: _Rank, message: tuple[Any, ...]) -> bool:
    try:
        rank.conn.send(message)
    except OSError:  # it died: its exit is noticed by the loop
        return False
    return True


def _ending(r: _Rank) -> str:
    if r.result is not None and r.result["status"] not in ENDED_WELL:
        return f"ended {r.result['status']} ({r.result.get('reason')})"
    code = r.exit_code if r.exit_code is not None else r.proc.poll()
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code} without a result"


def _outcome(run: TrialRun, group: _Group, batch_size: int, accum: int) -> TrialOutcome:
    """Rank 0's result if every rank ended well; else the first failure, or the dead rank."""
    k = len(group.ranks)
    died = [r for r in group.ranks if r.result is None and not r.killed and r.exit_code is not None]
    if died:
        r = died[0]
        return TrialOutcome(status="attempt_failed", reason=f"rank {r.rank} of {k} {_ending(r)}")
    failed = sorted(
        (r for r in group.ranks if r.result is not None and r.result["status"] not in ENDED_WELL),
        key=lambda r: r.ended_at,
    )
    chosen = failed[0] if failed else group.ranks[0]
    if chosen.result is None:  # every rank was killed by the launcher (it was interrupted)
        return TrialOutcome(status="attempt_failed", reason=f"the {k} ranks were stopped")
    fields = {f.name for f in dataclasses.fields(trainer.TrainResult)}
    result = trainer.TrainResult(**{k_: v for k_, v in chosen.result.items() if k_ in fields})
    if failed:
        result.reason = f"rank {chosen.rank} of {k}: {result.reason}"
        if "out of memory" in (result.reason or ""):
            result.reason += (
                " (a multi-GPU trial does not adapt after an out-of-memory error: lower "
                "batch_size or raise grad_accum_steps)"
            )
    outcome = outcome_of(run, result)
    accum = result.grad_accum_steps or accum  # as trained (a resumed checkpoint's, if adapted)
    micro = math.ceil(batch_size / (k * accum))
    outcome.user_attrs["data_parallel"] = {
        "ranks": k,
        "batch_size": batch_size,
        "grad_accum_steps": accum,
        "per_rank_micro_batch": micro,
        "rank_ends": [
            {
                "rank": r.rank,
                "status": None if r.result is None else r.result["status"],
                "epochs": None if r.result is None else len(r.result["metrics"]),
            }
            for r in group.ranks
        ],
    }
    return outcome


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
