"""Sharded trials (``[train] sharding = "fsdp"``) on the CPU: real rank processes over gloo.

Multi-process and slow on a small machine (each group run starts K Python processes that import
torch): every test here is named ``test_gloo_*``; select them with ``-k gloo`` or leave them out
with ``-k "not gloo"``.

(a) FSDP on 2 and on 4 ranks trains the curve DDP trains on as many ranks, for the same seed:
per-epoch mean training loss within 1e-4 (relative), validation metric within 2e-3, final
weights within rtol 1e-4 / atol 1e-5 (float sums in another order: reduce-scatter instead of
all-reduce; dropout 0 so that the ranks' masks play no part). (b) The checkpoint holds one
shard per rank and consolidates to the model's plain state dict. (c) A trial preempted on 4
ranks resumes on 2 (resharding on load); one preempted on 2 resumes on 2, and in one plain
process; one preempted in one process resumes on 2; each ends with the weights of the
uninterrupted run. (d) When one rank cannot write
its shard, rank 0 hands nothing to the launcher (whose store write moves the trial's pointer),
and the next save, complete, is handed over.
"""

from __future__ import annotations

import dataclasses
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from search.study.parse_config import load_config
from search.worker.trial import TrialRun
from search.worker.trial_group import run_trial_group
from trainer import DirectoryCheckpointStore, resolve_task, train
from trainer.checkpoint import consolidated_state_dict

pytestmark = pytest.mark.slow  # gloo process groups of 2 and 4 ranks: 8-20 s each

SEED = 7
PARAMS = {"lr": 0.01, "width": 8, "batch_size": 64, "dropout": 0.0}

CONFIG = """
[study]
name = "fsdp"
direction = "maximize"
n_trials = 1
sampler = "random"
seed = 3

[pruner]
type = "none"

[task]
name = "digits"
epochs = 2

[train]
checkpoint_every_s = 600
sharding = "{sharding}"

[space]
lr = {{ type = "float", low = 1e-3, high = 3e-2, log = true }}
width = {{ type = "int", low = 4, high = 12 }}
batch_size = {{ type = "categorical", choices = [64] }}
"""


def group(
    tmp: Path, sharding: str, ranks: int, *, stop_after_epoch: int | None = None
) -> tuple[Any, DirectoryCheckpointStore]:
    """Run the trial on `ranks` gloo ranks with its checkpoint in tmp/ckpt (resumed if there)."""
    config_path = tmp / f"{sharding}.toml"
    config_path.write_text(CONFIG.format(sharding=sharding))
    store = DirectoryCheckpointStore(tmp / "ckpt")
    stop = threading.Event()

    def report(epoch: int, value: float) -> bool:
        if stop_after_epoch is not None and epoch >= stop_after_epoch:
            stop.set()  # as SIGTERM to the worker does: checkpoint and hand back
        return False

    run = TrialRun(
        number=0,
        trial_id=0,
        params=dict(PARAMS),
        config=load_config(config_path),
        seed=SEED,
        device=f"cpu x{ranks}",
        report=report,
        stop=stop,
        checkpoints=store,
    )
    return run_trial_group(run, devices=["cpu"] * ranks), store


def train_state(store: DirectoryCheckpointStore) -> dict[str, Any]:
    state = store.load()
    assert state is not None
    return state["train_state"]["loop"]


def shard_files(store: DirectoryCheckpointStore) -> list[str]:
    with tarfile.open(store.path) as tar:
        return sorted(n for n in tar.getnames() if n.endswith(".distcp"))


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=1e-4, atol=1e-5), name


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """The DDP runs the sharded ones are compared with, by number of ranks (run on first use)."""

    class Runs(dict):
        def __missing__(self, ranks: int) -> dict[str, Any]:
            outcome, store = group(tmp_path_factory.mktemp(f"ddp{ranks}"), "none", ranks)
            assert outcome.status == "completed", outcome.reason
            self[ranks] = {
                "value": outcome.value,
                "loop": train_state(store),
                "model": consolidated_state_dict(store.path),
            }
            return self[ranks]

    return Runs()


@pytest.mark.parametrize("ranks", [2, 4])
def test_gloo_fsdp_trains_the_ddp_curve(
    tmp_path: Path, ddp: dict[int, dict[str, Any]], ranks: int
) -> None:
    outcome, store = group(tmp_path, "fsdp", ranks)
    assert outcome.status == "completed", outcome.reason
    reference = ddp[ranks]
    loop = train_state(store)
    assert loop["optimizer_steps"] == reference["loop"]["optimizer_steps"]
    assert loop["train_losses"] == pytest.approx(reference["loop"]["train_losses"], rel=1e-4)
    assert loop["metrics"] == pytest.approx(reference["loop"]["metrics"], abs=2e-3)
    assert outcome.value == pytest.approx(reference["value"], abs=2e-3)
    # Every rank wrote its shard; together they are the model DDP trained.
    assert shard_files(store) == [f"shards/__{r}_0.distcp" for r in range(ranks)]
    assert_same_weights(consolidated_state_dict(store.path), reference["model"])


def test_gloo_preempted_on_4_ranks_resumes_on_2(
    tmp_path: Path, ddp: dict[int, dict[str, Any]]
) -> None:
    outcome, store = group(tmp_path, "fsdp", 4, stop_after_epoch=1)
    assert outcome.status == "preempted", outcome.reason
    assert len(shard_files(store)) == 4
    stopped_at = train_state(store)
    # The stop asked for in epoch 1's report reaches rank 0 with the report's answer, so the
    # ranks stop before epoch 2's first step (a step later, epoch 2's training loss would mix
    # 4-rank and 2-rank shares: it is carried over in the checkpoint).
    assert (stopped_at["epoch"], stopped_at["step"]) == (1, 0)

    outcome, store = group(tmp_path, "fsdp", 2)  # the same trial, on a machine with 2
    assert outcome.status == "completed", outcome.reason
    assert shard_files(store) == ["shards/__0_0.distcp", "shards/__1_0.distcp"]
    loop = train_state(store)
    # The curve goes on: epoch 1 as the 4 ranks trained it, epoch 2 on 2 ranks, and the whole
    # run equal to the uninterrupted one (DDP on 2: the same curve as FSDP on 2, test above).
    # The training loss is rank 0's share of each step (16 samples on 4 ranks, 32 on 2), so
    # epoch 1's is the 4-rank run's and epoch 2's the 2-rank run's.
    assert loop["metrics"][0] == stopped_at["metrics"][0]
    assert loop["train_losses"][0] == stopped_at["train_losses"][0]
    assert loop["optimizer_steps"] == ddp[2]["loop"]["optimizer_steps"]
    assert loop["train_losses"][1] == pytest.approx(ddp[2]["loop"]["train_losses"][1], rel=1e-4)
    assert loop["metrics"] == pytest.approx(ddp[2]["loop"]["metrics"], abs=2e-3)
    assert_same_weights(consolidated_state_dict(store.path), ddp[2]["model"])


def test_gloo_preempted_on_2_ranks_resumes_on_2_and_in_one_process(
    tmp_path: Path, ddp: dict[int, dict[str, Any]]
) -> None:
    outcome, store = group(tmp_path, "fsdp", 2, stop_after_epoch=1)
    assert outcome.status == "preempted", outcome.reason
    assert train_state(store)["epoch"] == 1
    copy = DirectoryCheckpointStore(tmp_path / "copy")
    with open(store.path, "rb") as data:
        copy.write(data)

    outcome, store = group(tmp_path, "fsdp", 2)  # on as many ranks
    assert outcome.status == "completed", outcome.reason
    assert_same_weights(consolidated_state_dict(store.path), ddp[2]["model"])

    config = load_config(tmp_path / "fsdp.toml")  # in one process (a worker without K)
    resumed = train(
        resolve_task("digits"),
        PARAMS,
        dataclasses.replace(config.train, seed=SEED),
        checkpoints=copy,
        device="cpu",
    )
    assert resumed.status == "completed", resumed.reason
    assert resumed.resumed_from is not None and resumed.resumed_from["epoch"] == 1
    # One process has nothing to shard over: it writes a plain checkpoint.
    assert not tarfile.is_tarfile(copy.path)
    assert_same_weights(consolidated_state_dict(copy.path), ddp[2]["model"])


def _saving_rank(rank: int, port: int, scratch: str, conn: Any, obstruct: bool) -> None:
    """One of two gloo ranks saving a sharded checkpoint twice through `GroupCheckpoints`;
    with `obstruct`, rank 1's shard file of the first save cannot be written."""
    import os

    import torch.distributed as dist
    from torch import nn

    from trainer.distributed import GroupCheckpoints, LauncherLink, leave_rank
    from trainer.sharding import shard_model, weights_state

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    shard_model(model, "fp32", torch.device("cpu"))
    optimizer = torch.optim.AdamW(model.parameters())
    store = GroupCheckpoints(None, scratch, LauncherLink(conn) if rank == 0 else None)
    if obstruct and rank == 1:  # a directory where rank 1's shard file must go
        (Path(scratch) / "sharded-1" / "shards" / "__1_0.distcp").mkdir(parents=True)
    outcomes = []
    for _ in range(2):
        try:
            store.save_sharded({"format": 2}, weights_state(model, optimizer))
            outcomes.append("saved")
        except OSError as exc:
            outcomes.append(f"not saved: {exc}")
    if rank == 0:
        conn.send(("done", outcomes))
    leave_rank()  # exit code 0, no teardown that could abort


def test_gloo_no_checkpoint_is_handed_over_unless_every_rank_wrote_its_shard(
    tmp_path: Path,
) -> None:
    import socket

    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [
        ctx.Process(target=_saving_rank, args=(r, port, str(tmp_path), theirs, True))
        for r in range(2)
    ]
    for p in procs:
        p.start()
    handed: list[str] = []
    while True:  # the launcher's side: store what rank 0 hands over (the pointer moves here)
        message = ours.recv()
        if message[0] == "checkpoint":
            handed.append(message[1])
            ours.send(("saved",))
        else:
            outcomes = message[1]
            break
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    # Rank 1 could not write its shard: rank 0 learnt it from the save itself and handed
    # nothing over; the next save, with every shard written, was handed over once.
    assert outcomes[0].startswith("not saved: sharded checkpoint not written"), outcomes
    assert outcomes[1] == "saved"
    assert handed == [str(tmp_path / "sharded-2.tar")]


def test_gloo_a_one_process_checkpoint_resumes_on_2_ranks(
    tmp_path: Path, ddp: dict[int, dict[str, Any]]
) -> None:
    # sharding = "fsdp" in one process (a worker without --gpus-per-trial) writes a plain
    # checkpoint; 2 ranks then load it as full state dicts, each keeping its shard.
    (tmp_path / "fsdp.toml").write_text(CONFIG.format(sharding="fsdp"))
    config = load_config(tmp_path / "fsdp.toml")
    store = DirectoryCheckpointStore(tmp_path / "ckpt")
    stop = threading.Event()
    first = train(
        resolve_task("digits"),
        PARAMS,
        dataclasses.replace(config.train, seed=SEED),
        checkpoints=store,
        device="cpu",
        stop=stop,
        report=lambda epoch, value: stop.set() or False,
    )
    assert first.status == "preempted" and not tarfile.is_tarfile(store.path)
    outcome, store = group(tmp_path, "fsdp", 2)
    assert outcome.status == "completed", outcome.reason
    assert len(shard_files(store)) == 2
    assert_same_weights(consolidated_state_dict(store.path), ddp[2]["model"])
