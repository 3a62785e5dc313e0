"""Sharded checkpoints in one process (the multi-rank runs are in test_sharding_gloo.py): the
archive's layout, `consolidated_state_dict` of either kind, resuming a plain model from shards,
and the reads that must refuse: a metadata file that would run code, a non-weights-only value,
an archive member that escapes its directory. And `[train] sharding` in the study config."""

from __future__ import annotations

import io
import pickle
import tarfile
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict

from search.study.parse_config import load_config
from search.study.settings import ConfigError
from trainer import CheckpointError, DirectoryCheckpointStore
from trainer.checkpoint import consolidated_state_dict, pack_sharded, write_shards
from trainer.sharding import load_weights


def model_and_optimizer(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.randn(4, 6)).sum().backward()
    optimizer.step()
    return model, optimizer


def sharded_archive(tmp_path: Path, model: nn.Module, optimizer: Any) -> Path:
    """What a K-rank trial stores, written here by one process (K = 1)."""
    work = tmp_path / "work"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no process group: assuming one process"
        model_state, optimizer_state = get_state_dict(model, optimizer)  # as FSDP ranks do
        write_shards(work, {"model": model_state, "optimizer": optimizer_state})
    archive = tmp_path / "checkpoint.pt"
    pack_sharded(work, {"format": 2, "fingerprint": "f", "train_state": {}}, archive)
    return archive


def test_a_sharded_checkpoint_consolidates_to_the_model_state_dict(tmp_path: Path) -> None:
    model, optimizer = model_and_optimizer(0)
    archive = sharded_archive(tmp_path, model, optimizer)
    with tarfile.open(archive) as tar:
        assert {"state.pt", "shards/.metadata", "shards/__0_0.distcp"} <= set(tar.getnames())
    full = consolidated_state_dict(archive)
    assert full.keys() == model.state_dict().keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(full[name], tensor), name
    # A plain checkpoint gives its "model" entry; a stream works as well as a path.
    plain = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, plain)
    plain.seek(0)
    assert torch.equal(consolidated_state_dict(plain)["2.bias"], model[2].bias)


def test_a_plain_model_resumes_from_shards(tmp_path: Path) -> None:
    model, optimizer = model_and_optimizer(0)
    store = DirectoryCheckpointStore(tmp_path / "store")
    with open(sharded_archive(tmp_path, model, optimizer), "rb") as data:
        store.write(data)
    state = store.load()
    assert state is not None and state["fingerprint"] == "f"
    other, other_optimizer = model_and_optimizer(1)
    load_weights(other, other_optimizer, state)
    for name, tensor in model.state_dict().items():
        assert torch.equal(other.state_dict()[name], tensor), name
    saved, loaded = optimizer.state_dict(), other_optimizer.state_dict()
    assert torch.equal(loaded["state"][0]["exp_avg"], saved["state"][0]["exp_avg"])
    assert loaded["param_groups"][0]["lr"] == saved["param_groups"][0]["lr"]


class _RunsCode:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("pwned",))


def test_metadata_that_would_run_code_is_refused(tmp_path: Path) -> None:
    model, optimizer = model_and_optimizer(0)
    archive = sharded_archive(tmp_path, model, optimizer)
    evil = tmp_path / "evil.pt"
    with tarfile.open(archive) as src, tarfile.open(evil, "w") as dst:
        for member in src.getmembers():
            data = src.extractfile(member) if member.isfile() else None
            if member.name == "shards/.metadata":
                payload = pickle.dumps(_RunsCode())
                member.size = len(payload)
                data = io.BytesIO(payload)
            dst.addfile(member, data)
    with pytest.raises(CheckpointError, match=r"builtins\.print is not allowed"):
        consolidated_state_dict(evil)


def test_an_archive_member_outside_its_directory_is_refused(tmp_path: Path) -> None:
    evil = tmp_path / "evil.pt"
    with tarfile.open(evil, "w") as tar:
        info = tarfile.TarInfo("../../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(CheckpointError, match="cannot unpack sharded checkpoint"):
        consolidated_state_dict(evil)
    assert not (tmp_path.parent / "escaped").exists()


def test_sharding_is_read_from_the_study_config(tmp_path: Path) -> None:
    base = (Path(__file__).parents[2] / "examples" / "digits.toml").read_text()
    path = tmp_path / "c.toml"
    path.write_text(base.replace("[train]\n", '[train]\nsharding = "fsdp"\n'))
    assert load_config(path).train.sharding == "fsdp"
    path.write_text(base.replace("[train]\n", '[train]\nsharding = "zero3"\n'))
    with pytest.raises(ConfigError, match=r'train\.sharding: unknown value "zero3"'):
        load_config(path)
