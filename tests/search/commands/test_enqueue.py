"""Warm starts: `[[study.enqueue]]` in the config and `hpsearch enqueue`, on both backends with
three workers under ASHA: each known configuration runs first, exactly once, from the first rung,
as an ordinary trial the sampler learns from; bad ones are one line, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tests.helpers.cli import hpsearch

CONFIG = """
[study]
name = "{name}"
direction = "maximize"
n_trials = 9
sampler = "tpe"
seed = 5

[[study.enqueue]]
lr = 0.05
act = "tanh"

[[study.enqueue]]
lr = 0.125
dropout = 0.25
act = "relu"

[pruner]
type = "asha"
min_resource = 1
reduction_factor = 3

[task]
name = "tests.helpers.tiny_task:make_task"
epochs = 3

[space]
lr = {{ type = "float", low = 1e-4, high = 3e-1, log = true }}
dropout = {{ type = "float", low = 0.0, high = 0.5 }}
act = {{ type = "categorical", choices = ["relu", "tanh"] }}
"""


@pytest.mark.slow
def test_enqueued_configurations_run_first_and_exactly_once(
    storage_url: str, study_name: str, tmp_path: Path
) -> None:
    config = tmp_path / "study.toml"
    config.write_text(CONFIG.format(name=study_name))
    flags = ("--storage", storage_url)
    assert hpsearch("create", str(config), *flags, cwd=tmp_path).returncode == 0
    added = hpsearch(
        "enqueue", "--study", study_name, *flags, "--set", "lr=0.2", "--set", "dropout=0",
        cwd=tmp_path,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    number = int(added.stdout.split("trial ")[1].split()[0])
    # The configured ones first; the one enqueued later takes the next queued slot.
    assert number == 2, added.stdout

    done = hpsearch("run", str(config), "--workers", "3", *flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    trials = optuna.load_study(study_name=study_name, storage=storage_url).trials
    assert len(trials) == 9
    wanted = {
        0: {"lr": 0.05, "act": "tanh"},
        1: {"lr": 0.125, "dropout": 0.25, "act": "relu"},
        2: {"lr": 0.2, "dropout": 0.0},
    }
    for n, params in wanted.items():
        t = trials[n]
        assert {k: t.params[k] for k in params} == params, (n, t.params)
        # An ordinary trial: every param with its distribution (the sampler learns from it),
        # the ones not given sampled inside the space, trained from the first rung.
        assert set(t.distributions) == {"lr", "dropout", "act"}
        assert 0.0 <= t.params["dropout"] <= 0.5
        assert min(t.intermediate_values) == 1
        assert t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        # Exactly once across the fleet.
        assert sum(u.params["lr"] == params["lr"] for u in trials) == 1


BAD = [
    (("--set", "lr=5"), "--set lr=5.0: outside space.lr"),
    (("--set", "wd=0.1"), "--set wd: not a parameter of the study's [space]"),
    (("--set", "act=gelu"), "--set act='gelu': outside space.act"),
    (("--set", "lr"), "expected NAME=VALUE"),
    ((), "give the configuration with --set NAME=VALUE"),
]


def test_bad_enqueue_is_one_line_exit_2_and_nothing_written(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    config = tmp_path / "study.toml"
    config.write_text(CONFIG.format(name=study_name))
    assert hpsearch("create", str(config), "--storage", pg_url, cwd=tmp_path).returncode == 0
    before = optuna.load_study(study_name=study_name, storage=pg_url).trials
    for flags, expected in BAD:
        done = hpsearch("enqueue", "--study", study_name, "--storage", pg_url, *flags, cwd=tmp_path)
        assert done.returncode == 2, (flags, done.stderr)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("hpsearch: error: ") and expected in line, line
    assert optuna.load_study(study_name=study_name, storage=pg_url).trials == before


def test_a_config_whose_enqueued_configuration_is_outside_the_space_is_refused(
    tmp_path: Path,
) -> None:
    config = tmp_path / "study.toml"
    config.write_text(CONFIG.format(name="x").replace("lr = 0.125", "lr = 3.0"))
    for command in ("create", "run"):
        done = hpsearch(command, str(config), cwd=tmp_path)
        assert done.returncode == 2
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("hpsearch: error: ") and line.endswith(
            "study.toml: study.enqueue[1].lr = 3.0: outside space.lr [0.0001, 0.3] (log)"
        ), line
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(CONFIG.format(name="x").replace('act = "tanh"', "width = 8"))
    done = hpsearch("create", str(unknown), cwd=tmp_path)
    assert done.returncode == 2 and "study.enqueue[0].width: not a parameter" in done.stderr
    assert not (tmp_path / "hpsearch.db").exists()
