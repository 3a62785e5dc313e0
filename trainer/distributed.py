"""One rank of a data-parallel trial: ``python -m trainer.distributed``, started K times.

A launcher (the search side's ``search.worker.trial_group``) starts K of these processes with the
usual torch.distributed environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK),
``TRAINER_DEVICE`` (``cpu`` or ``cuda:N``) and ``TRAINER_CONTROL_FD``: one end of a socket pair
to the launcher, over which pickled tuples travel:

    launcher -> rank 0     ("spec", {...})                 what to train (rank 0 broadcasts it)
    rank 0 -> launcher     ("report", epoch, value)        answered ("decision", prune: bool)
    rank 0 -> launcher     ("checkpoint", path)            answered ("saved",) | ("error", why)
    launcher -> rank 0     ("stop",)                       checkpoint and stop (preemption)
    every rank -> launcher ("result", rank, ended_at, TrainResult.to_dict())

Rank 0 alone talks to the launcher (and through it to the study); the spec (params and config),
every pruning decision and every stop decision reach the other ranks over torch.distributed, so
all ranks take the same steps and stop at the same one. Accelerate wraps the model in DDP; each
rank trains its share of every optimizer step (`TrainData.steps` with a shard), so the effective
batch is the configured one for any K. Only rank 0 writes checkpoints, and they hold the
unwrapped model: a checkpoint of a K-rank run resumes with any other K, or in one process.
With ``[train] sharding = "fsdp"`` the model is sharded instead (``trainer.sharding``): every
rank writes its shard into the group's scratch directory, and rank 0 hands the launcher the
archive once all have (``trainer.checkpoint``); it too resumes on any K, or in one process.

A rank never waits forever: the process group has a timeout on every collective
(``TRAINER_COLLECTIVE_TIMEOUT_S``), a rank dies with its launcher (Linux), and the launcher kills
the others as soon as one dies.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import sys
import threading
import time
from datetime import timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from trainer.checkpoint import CheckpointStore, pack_sharded, write_shards

__all__ = [
    "ENV_COLLECTIVE_TIMEOUT",
    "ENV_CONTROL_FD",
    "ENV_DEVICE",
    "CollectiveStop",
    "GroupCheckpoints",
    "LauncherLink",
    "leave_rank",
]

log = logging.getLogger("trainer")

ENV_CONTROL_FD = "TRAINER_CONTROL_FD"
"""File descriptor of this rank's end of the socket pair to its launcher."""
ENV_DEVICE = "TRAINER_DEVICE"
"""The device this rank trains on: cpu or cuda:N."""
ENV_COLLECTIVE_TIMEOUT = "TRAINER_COLLECTIVE_TIMEOUT_S"
"""Seconds a collective may wait for the other ranks before it raises (default below)."""
DEFAULT_COLLECTIVE_TIMEOUT_S = 600.0
"""Longer than the slowest thing one rank does while the others wait at the next collective:
rank 0 writing a large checkpoint to a remote store."""
STOP_CHECK_EVERY_ON_GPU = 8
"""Optimizer steps between two broadcasts of the stop flag on GPUs: each one makes the CPU wait
for the GPU (on the CPU it is checked at every step, as in one process)."""


class LauncherLink:
    """Rank 0's requests to its launcher; remembers a ("stop",) that arrives meanwhile."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.stop_requested = False

    def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        self.conn.send(message)
        while True:
            reply = self.conn.recv()  # EOFError if the launcher is gone: the attempt ends
            if reply[0] == "stop":
                self.stop_requested = True
                continue
            return reply

    def poll_stop(self) -> bool:
        while self.conn.poll():
            if self.conn.recv()[0] == "stop":
                self.stop_requested = True
        return self.stop_requested


class CollectiveStop(threading.Event):
    """The `stop` of `trainer.train` on every rank: rank 0's answer, broadcast.

    The training loop asks ``is_set()`` before every step and every validation batch, on every
    rank, the same number of times (every rank validates on the whole set); each ask (or every
    `every`-th) is one broadcast, so all ranks stop at the same step or batch.
    """

    def __init__(self, link: LauncherLink | None, device: Any, every: int) -> None:
        super().__init__()
        self.link, self.device, self.every = link, device, every
        self._asked = 0

    def is_set(self) -> bool:
        import torch  # in a rank only: the launcher reads this module
        import torch.distributed as dist

        self._asked += 1
        if (self._asked - 1) % self.every:
            return False
        flag = self.link is not None and (super().is_set() or self.link.poll_stop())
        tensor = torch.tensor([int(flag)], device=self.device)
        dist.broadcast(tensor, src=0)
        return bool(tensor.item())


def group_report(link: LauncherLink | None, device: Any) -> Any:
    """The `report` of `trainer.train` on every rank: rank 0 asks the study, all get its answer."""
    import torch  # here, in a rank, not on import: the launcher reads only the ENV_ names
    import torch.distributed as dist

    def report(epoch: int, value: float) -> bool:
        prune = False
        if link is not None:
            reply = link.request(("report", epoch, value))
            prune = bool(reply[1])
        tensor = torch.tensor([int(prune)], device=device)
        dist.broadcast(tensor, src=0)
        return bool(tensor.item())

    return report


class GroupCheckpoints(CheckpointStore):
    """Every rank resumes from the launcher's copy of the trial's checkpoint; rank 0 alone
    saves, by handing a file to the launcher, which writes it to the trial's real store."""

    def __init__(self, resume: str | None, scratch: str, link: LauncherLink | None) -> None:
        self.resume, self.scratch, self.link = resume, Path(scratch), link
        self._writes = 0
        self._sharded_writes = 0

    def __repr__(self) -> str:
        from trainer.device import rank  # imports torch: the launcher reads this module without it

        return f"GroupCheckpoints(rank {rank()})"

    def save(self, state: dict[str, Any]) -> int:
        if self.link is None:
            return 0  # the other ranks hold the same model and optimizer state: nothing to add
        return super().save(state)

    def save_sharded(self, state: dict[str, Any], shards: dict[str, Any]) -> int:
        """Every rank writes its shard into the scratch directory (the ranks of a group share
        one machine); once all have, rank 0 packs them with `state` and hands the archive to
        the launcher, whose store write moves the trial's pointer."""
        self._sharded_writes += 1  # the same count on every rank: they save at the same steps
        directory = self.scratch / f"sharded-{self._sharded_writes}"
        try:
            write_shards(directory, shards)  # returns on every rank once all shards are written
            if self.link is None:
                return 0
            archive = self.scratch / f"sharded-{self._sharded_writes}.tar"
            pack_sharded(directory, state, archive)
            try:
                size = archive.stat().st_size
                self._hand_over(archive)
            finally:
                archive.unlink(missing_ok=True)
            return size
        finally:
            if self.link is not None:
                shutil.rmtree(directory, ignore_errors=True)

    def write(self, data: BinaryIO) -> None:
        assert self.link is not None
        self._writes += 1
        path = self.scratch / f"checkpoint-{self._writes}.pt"
        with open(path, "wb") as out:
            while chunk := data.read(1 << 20):
                out.write(chunk)
        try:
            self._hand_over(path)
        finally:
            path.unlink(missing_ok=True)

    def _hand_over(self, path: Path) -> None:
        assert self.link is not None
        reply = self.link.request(("checkpoint", str(path)))
        if reply[0] != "saved":
            raise RuntimeError(reply[1])

    def open(self) -> BinaryIO | None:
        if self.resume is None or not os.path.exists(self.resume):
            return None
        return open(self.resume, "rb")  # the caller closes it

    def discard(self) -> None:
        """The launcher discards the trial's checkpoint when the trial is recorded."""


def _die_with_launcher() -> None:
    """Linux: the kernel kills this rank when its launcher dies (a kill -9 of the worker leaves
    no orphan ranks training on; the trial resumes elsewhere from its last checkpoint)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except OSError:
        return


def main() -> NoReturn:
    """One rank: join the group, get the spec, train, send the result."""
    _die_with_launcher()
    me = int(os.environ["RANK"])
    logging.basicConfig(
        level=logging.INFO if me == 0 else logging.WARNING,
        format=f"%(asctime)s rank {me}: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    for noisy in ("accelerate", "torch.distributed"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    conn = Connection(int(os.environ[ENV_CONTROL_FD]))
    link = LauncherLink(conn) if me == 0 else None
    timeout_s = float(os.environ.get(ENV_COLLECTIVE_TIMEOUT) or DEFAULT_COLLECTIVE_TIMEOUT_S)

    import torch  # here, in a rank, not on import: the launcher reads only the ENV_ names
    import torch.distributed as dist

    from trainer import TrainConfig, resolve_task
    from trainer.loop import train

    device = torch.device(os.environ.get(ENV_DEVICE, "cpu"))
    if device.type == "cuda":
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=timedelta(seconds=timeout_s), device_id=device)
    else:
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
        # Names a rank that did not come up, instead of a bare timeout.
        dist.monitored_barrier(timeout=timedelta(seconds=timeout_s))
    payload: list[Any] = [conn.recv()[1] if me == 0 else None]
    dist.broadcast_object_list(payload, src=0)  # the params reach every rank from rank 0
    spec = payload[0]
    every = 1 if device.type == "cpu" else STOP_CHECK_EVERY_ON_GPU
    result = train(
        resolve_task(spec["task"]),
        spec["params"],
        TrainConfig(**spec["config"]),
        report=group_report(link, device),
        checkpoints=GroupCheckpoints(spec["resume"], spec["scratch"], link),
        device=str(device),
        stop=CollectiveStop(link, device, every),
    )
    conn.send(("result", me, time.monotonic(), result.to_dict()))
    conn.close()
    leave_rank(destroy_group=result.status in ("completed", "pruned", "preempted"))


def leave_rank(*, destroy_group: bool = True) -> NoReturn:
    """End a rank's process once its result is out: its process group destroyed (where its
    collectives all completed), then without the interpreter's teardown. That teardown costs
    seconds of unloading torch, and a gloo rank's aborted now and then ("terminate called
    without an active exception"), turning a finished rank into a failed one."""
    if destroy_group:
        import torch.distributed as dist

        dist.destroy_process_group()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
