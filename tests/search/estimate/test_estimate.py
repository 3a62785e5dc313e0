"""`hpsearch estimate` as users run it, and the memory check of a real worker on PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import torch

from tests.helpers import REPO
from tests.helpers.cli import count_studies, hpsearch
from trainer import TrainConfig, resolve_task
from trainer.memory import MemoryTarget, fit_memory

DIGITS = str(REPO / "examples" / "digits.toml")
TABULAR = str(REPO / "examples" / "tabular.toml")

GRID = """
[study]
name = "{name}"
direction = "maximize"
n_trials = 4
sampler = "grid"

[pruner]
type = "none"

[task]
name = "digits"
epochs = 1

[space]
width = {{ type = "categorical", choices = [8, 64] }}
batch_size = {{ type = "categorical", choices = [32, 64] }}
"""


@pytest.mark.slow
def test_estimate_measures_each_extreme_and_says_how_it_fits(tmp_path: Path) -> None:
    args = ["--device-memory", "2MiB", "--samples", "1"]
    done = hpsearch("estimate", DIGITS, *args, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # one object
    target = report["target"]
    assert target["device_type"] == "cuda" and target["limit_bytes"] == 2 * 2**20
    assert target["usable_bytes"] == int(0.9 * 2 * 2**20)
    assert target["precision"] == "bf16" or torch.cuda.is_available()  # auto, on a GPU
    rows = {row["label"]: row for row in report["configurations"]}
    assert {"center", "width=8", "width=64", "batch_size=32", "batch_size=128"} <= set(rows)
    assert {"all low", "all high", "sample 1"} <= set(rows) and "sample 2" not in rows
    assert report["independent_of"] == ["lr", "weight_decay"]
    center, wide, narrow = rows["center"], rows["width=64"], rows["width=8"]
    for row in rows.values():
        m = row["configured"]
        assert m["precision"] == target["precision"] and m["measured_on"].startswith("fake")
        assert m["total_bytes"] == m["peak_bytes"] + m["data_bytes"]
        assert m["weights_bytes"] == m["gradients_bytes"]  # fp32 under autocast, both
    assert narrow["configured"]["weights_bytes"] < center["configured"]["weights_bytes"]
    assert wide["configured"]["weights_bytes"] > center["configured"]["weights_bytes"]
    big = rows["batch_size=128"]["configured"]["activations_bytes"]
    small = rows["batch_size=32"]["configured"]["activations_bytes"]
    assert 3.5 < big / small < 4.5  # four times the samples
    # The widest, largest-batch configuration fits only after the trainer's adaptations.
    high = rows["all high"]
    assert high["fits"] is True and high["configured"]["total_bytes"] > target["usable_bytes"]
    assert high["fitted"]["grad_checkpointing"] and high["fitted"]["grad_accum_steps"] > 1
    assert high["fitted"]["total_bytes"] <= target["usable_bytes"]
    assert high["verdict"].startswith("fits with micro-batch ")
    assert rows["all low"]["verdict"] == "fits as configured"

    table = hpsearch("estimate", DIGITS, *args, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "a GPU"
    assert lines[1] == f"device: {gpu}, 2.00 MiB given (1.80 MiB usable: 10% headroom)"
    header = next(line for line in lines if line.startswith("configuration"))
    assert header.split() == [
        "configuration", "batch", "weights", "grads", "optimizer", "activations", "data",
        "peak", "fits",
    ]  # fmt: skip
    all_high = next(line for line in lines if line.startswith("all high"))
    assert all_high.endswith(" + ckpt: " + _size(high["fitted"]["total_bytes"]))
    assert next(line for line in lines if line.startswith("all low")).endswith(" yes")
    assert "(memory does not depend on lr, weight_decay: those rows are left out)" in lines
    assert not any(line.startswith("lr=") for line in lines)


@pytest.mark.slow
def test_estimate_of_one_configuration_lists_every_plan_until_one_fits(tmp_path: Path) -> None:
    args = ["--set", "width=64", "--set", "batch_size=128", "--device", "cpu"]
    done = hpsearch("estimate", DIGITS, *args, "--device-memory", "3MiB", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("batch_size=128 dropout=0.25 width=64")
    assert lines[1].startswith("device: cpu, 3.00 MiB given; precision fp32")
    plans = [line.split("  ")[0] for line in lines[lines.index("") + 2 : -2]]
    assert plans[:3] == [
        "micro-batch 128 x 1",
        "micro-batch 128 x 1, gradient checkpointing",
        "micro-batch 64 x 2, gradient checkpointing",
    ]
    assert lines[-1] == f"fits with {plans[-1]} (usable: 2.70 MiB)"
    # Without a limit on a CPU: measured, not judged.
    free = hpsearch("estimate", DIGITS, *args, "--json", cwd=tmp_path)
    row = json.loads(free.stdout)["configurations"][0]
    assert row["label"] == "given" and row["fits"] is None and row["fitted"] is None
    assert row["verdict"] == "no limit to check against"


@pytest.mark.slow
def test_estimate_takes_the_device_memory_from_the_environment(tmp_path: Path) -> None:
    """--device-memory's default is $HPSEARCH_DEVICE_MEMORY, as its help says (and as `run` and
    `worker` read it); the flag wins over it; a bad value names the variable."""
    args = ["--set", "width=8", "--device", "cpu", "--json"]
    env = {"HPSEARCH_DEVICE_MEMORY": "3MiB"}
    done = hpsearch("estimate", DIGITS, *args, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["target"]["limit_bytes"] == 3 * 2**20
    flag = hpsearch("estimate", DIGITS, *args, "--device-memory", "5MiB", cwd=tmp_path, env=env)
    assert json.loads(flag.stdout)["target"]["limit_bytes"] == 5 * 2**20
    bad = hpsearch("estimate", DIGITS, *args, cwd=tmp_path, env={"HPSEARCH_DEVICE_MEMORY": "lots"})
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == (
        "hpsearch: error: HPSEARCH_DEVICE_MEMORY: 'lots' is not a memory size (e.g. 80GB, "
        "24GiB, 512MiB; GB = 10^9 bytes, GiB = 2^30)"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["nope.toml"], "hpsearch: error: nope.toml: cannot read config file"),
        (
            [DIGITS, "--device-memory", "80 gigs"],
            "hpsearch: error: --device-memory: '80 gigs' is not a memory size",
        ),
        ([DIGITS, "--device", "cuda:99"], "hpsearch: error: --device: device 'cuda:99': "),
        ([DIGITS, "--set", "width=1000"], "--set width=1000: outside space.width [8, 64]"),
        ([DIGITS, "--set", "depth=3"], "--set depth: not a parameter of the config's [space]"),
        ([DIGITS, "--measure", "--device-memory", "8GB"], "--device-memory is not used"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], expected: str, tmp_path: Path) -> None:
    done = hpsearch("estimate", *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr
    assert done.stdout == ""


@pytest.mark.slow
def test_measure_compares_each_technique_with_fp32(tmp_path: Path) -> None:
    args = ["--measure", "--set", "width=64", "--device", "cpu", "--steps", "1", "--json"]
    done = hpsearch("estimate", DIGITS, *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = {row["technique"]: row for row in report["rows"]}
    assert list(rows) == [
        "fp32 (baseline)",
        "bf16 autocast",
        "accumulation x4",
        "gradient checkpointing",
        "bf16 + accumulation x4 + checkpointing",
    ]
    base = rows["fp32 (baseline)"]
    assert base["memory_vs_fp32"] == base["time_vs_fp32"] == 1.0
    for row in rows.values():
        timing = row["timing"]
        assert row["error"] is None and timing["status"] == "preempted", row
        assert len(timing["step_seconds"]) == 1 and timing["step_seconds"][0] > 0
        assert timing["peak_memory_kind"] == "process_peak_rss"  # each row's own process
        assert row["peak_bytes"] == timing["tensor_peak_bytes"] > 0
        # The dry run predicted what two real steps' tensors came to.
        assert row["estimate_bytes"] == pytest.approx(row["peak_bytes"], rel=0.02)
        assert timing["precision"] == row["precision"]
        assert timing["grad_accum_steps"] == row["grad_accum_steps"]
        assert timing["grad_checkpointing"] == row["grad_checkpointing"] and not timing["adapted"]
        # On a CPU, a bf16 time means nothing for a GPU: said, not printed as if it did.
        assert row["time_meaningful"] == (row["precision"] == "fp32")
    for name in ("bf16 autocast", "accumulation x4", "gradient checkpointing"):
        assert rows[name]["memory_vs_fp32"] < 0.8, name
    combined = rows["bf16 + accumulation x4 + checkpointing"]["memory_vs_fp32"]
    assert combined < min(rows[n]["memory_vs_fp32"] for n in list(rows)[1:4])
    assert any("process-wide" in note for note in report["notes"])


@pytest.mark.slow
def test_measure_table_on_a_cpu_and_a_model_without_checkpointing(tmp_path: Path) -> None:
    done = hpsearch(
        "estimate", TABULAR, "--measure", "--device", "cpu", "--steps", "1", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = {line.split("  ")[0]: line for line in lines if "  " in line}
    assert rows["fp32 (baseline)"].split()[-1] == "1.00"
    assert rows["bf16 autocast"].endswith("n/a (1)")
    assert rows["accumulation x4"].split()[-1] != "n/a"
    assert rows["gradient checkpointing"].split()[-5:] == ["-"] * 5
    assert (
        "gradient checkpointing: not measured (the model has no gradient checkpointing switch)"
        in lines
    )
    readings = [line for line in lines if line.startswith("accumulation x4: ")]
    assert len(readings) == 1 and "peak memory" in readings[0]
    assert "bf16 autocast: " in done.stdout and "means nothing for a GPU (1)" in done.stdout
    footnote = next(line for line in lines if line.startswith("(1) "))
    assert "bf16 on a CPU says nothing about a GPU" in footnote


@pytest.mark.slow
def test_a_worker_fails_what_cannot_fit_before_training_and_goes_on(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    config = tmp_path / "grid.toml"
    config.write_text(GRID.format(name=study_name))
    # A limit between what the narrow and the wide model need at their smallest plan.
    digits, cpu = resolve_task("digits"), MemoryTarget.for_device("cpu", "auto")

    def smallest(width: int, batch_size: int) -> int:
        params = {"width": width, "batch_size": batch_size}
        fit = fit_memory(digits, params, TrainConfig(epochs=1), cpu, every_plan=True)
        return fit.tried[-1].total_bytes

    fits, cannot = max(smallest(8, b) for b in (32, 64)), min(smallest(64, b) for b in (32, 64))
    assert fits < cannot
    limit = int((fits + cannot) / 2 / 0.9)

    assert hpsearch("create", str(config), "--storage", pg_url, cwd=tmp_path).returncode == 0
    worker = hpsearch(
        "worker", "--study", study_name, "--storage", pg_url, "--device", "cpu",
        "--device-memory", str(limit), cwd=tmp_path,
    )  # fmt: skip
    assert worker.returncode == 0, worker.stderr[-3000:]
    trials = optuna.load_study(study_name=study_name, storage=pg_url).trials
    assert len(trials) == 4
    for trial in trials:
        check = trial.user_attrs["memory_check"]
        assert check["limit_bytes"] == limit
        if trial.params["width"] == 64:
            assert trial.state.name == "FAIL"
            reason = trial.system_attrs["fail_reason"]
            assert reason.startswith("does not fit in ") and "\n" not in reason
            assert f"even micro-batch 1 x {trial.params['batch_size']}, gradient" in reason
            assert trial.intermediate_values == {}  # not one epoch trained
            assert trial.user_attrs["epochs_trained"] == 0
            assert check["verdict"] == "does not fit" and check["peak_bytes"] > 0.9 * limit
            assert f"trial {trial.number} fail in" in worker.stderr
        else:
            assert trial.state.name == "COMPLETE"
            assert trial.user_attrs["epochs_trained"] == 1
            assert check["verdict"].startswith("fits")
            assert check["peak_bytes"] <= 0.9 * limit
    assert "leaves (the study is done); it trained 4 trial run(s), 4 of them" in worker.stderr


@pytest.mark.slow
def test_a_bad_device_memory_for_workers_is_bad_input(pg_url: str, tmp_path: Path) -> None:
    config = tmp_path / "grid.toml"
    config.write_text(GRID.format(name="never-created"))
    before = count_studies(pg_url)
    done = hpsearch(
        "run", str(config), "--storage", pg_url, cwd=tmp_path,
        env={"HPSEARCH_DEVICE_MEMORY": "lots"},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "hpsearch: error: HPSEARCH_DEVICE_MEMORY: 'lots' is not a memory size (e.g. 80GB, "
        "24GiB, 512MiB; GB = 10^9 bytes, GiB = 2^30)"
    ]
    assert count_studies(pg_url) == before
    worker = hpsearch(
        "worker", "--study", "never-created", "--storage", pg_url, "--device-memory", "8 GB!",
        cwd=tmp_path,
    )  # fmt: skip
    assert worker.returncode == 2
    assert (
        worker.stderr.strip()
        .splitlines()[0]
        .startswith("hpsearch: error: --device-memory: '8 GB!' is not a memory size")
    )


def _size(n: int) -> str:
    from trainer.sizes import format_size

    return format_size(n)
