"""Study config: every bad input is one line naming the key and value at fault."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from search.study.parse_config import load_config, parse_config
from search.study.settings import ConfigError, StudyConfig
from search.study.space import CategoricalParam, FloatParam, IntParam
from tests.helpers import REPO
from tests.helpers.configs import GOOD


def with_change(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return data


_DELETE = object()


def test_example_configs_load() -> None:
    for path in sorted((REPO / "examples").glob("*.toml")):
        config = load_config(path)
        # Each example ends: on a number of trials or on a budget (digits.toml spends epochs).
        assert (config.study.n_trials or 0) >= 1 or config.study.has_budget, path


def test_good_config_becomes_typed_dataclasses() -> None:
    config = parse_config(GOOD)
    assert config.study.seed == 3 and config.train.seed == 3
    assert config.train.epochs == 9 and config.train.grad_accum_steps == 2
    assert config.param("lr") == FloatParam(name="lr", low=1e-4, high=1e-1, log=True)
    assert config.param("width") == IntParam(name="width", low=8, high=64, log=True)
    assert config.param("batch_size") == CategoricalParam(name="batch_size", choices=(32, 64, 128))


def test_defaults_fill_in() -> None:
    config = parse_config({"study": {"name": "x"}, "task": {"name": "digits"}})
    assert (config.study.sampler, config.pruner.type, config.train.precision) == (
        "tpe",
        "hyperband",
        "auto",
    )


def test_stored_form_round_trips_and_detects_differences() -> None:
    config = parse_config(GOOD)
    again = StudyConfig.from_dict(config.to_dict())
    assert again == config
    other = parse_config(with_change("study.n_trials", 7))
    assert config.difference(other) == "study.n_trials: 6 -> 7"
    assert config.difference(again) is None


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("study.samplr", "tpe", "unknown key study.samplr (did you mean 'sampler'?)"),
        ("colour", {}, "unknown key [colour]"),
        ("study.sampler", "bayes", 'study.sampler: unknown value "bayes" (choose from random, tpe'),
        ("study.direction", "up", 'study.direction: unknown value "up"'),
        ("study.n_trials", 0, "study.n_trials: must be >= 1, got 0"),
        ("study.n_trials", "10", 'study.n_trials: must be an integer, got "10"'),
        ("study.name", _DELETE, "study.name is missing"),
        ("task", _DELETE, "[task] section is missing"),
        ("task.name", _DELETE, "task.name is missing"),
        ("task.epochs", 0, "task.epochs: must be >= 1, got 0"),
        ("pruner.type", "bohb", 'pruner.type: unknown value "bohb"'),
        ("pruner.reduction_factor", 1, "pruner.reduction_factor: must be >= 2, got 1"),
        ("pruner.min_resource", 10, "pruner.min_resource: 10 is more than task.epochs = 9"),
        ("pruner.n_warmup_steps", 2, "unknown key pruner.n_warmup_steps"),
        ("train.precision", "fp8", 'train.precision: unknown value "fp8"'),
        ("train.optimizer", "adam", 'train.optimizer: unknown value "adam"'),
        ("train.checkpoint_every_s", 0, "train.checkpoint_every_s: must be > 0, got 0"),
        ("train.grad_accum_steps", 64, "space.batch_size: 32 cannot be split into "),
        ("space.lr.low", 0.0, "space.lr: log = true needs low > 0, got low = 0"),
        ("space.lr.low", -1.0, "space.lr: log = true needs low > 0, got low = -1"),
        ("space.dropout.low", 0.5, "space.dropout: low must be < high, got low = 0.5, high = 0.5"),
        ("space.width.low", 80, "space.width: low must be < high, got low = 80, high = 64"),
        ("space.width.low", 8.5, "space.width.low: must be an integer, got 8.5"),
        ("space.lr.type", "real", 'space.lr.type: unknown value "real"'),
        ("space.lr.scale", "log", "unknown key space.lr.scale"),
        ("space.batch_size.choices", [], "space.batch_size.choices: must list at least one value"),
        ("grid.lr", [1.0], "grid.lr: 1 is outside space.lr [0.0001, 0.1] (log)"),
        ("grid.momentum", [0.9], "unknown key grid.momentum"),
        ("grid.points", 0, "grid.points: must be >= 1, got 0"),
    ],
)
def test_bad_input_is_one_line_naming_the_key(path: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(with_change(path, value))
    text = str(err.value)
    assert message in text
    assert "\n" not in text


def test_grid_with_nothing_to_grid() -> None:
    data = with_change("study.sampler", "grid")
    data["space"] = {}
    with pytest.raises(ConfigError, match=r"study\.sampler: grid needs \[space\] parameters"):
        parse_config(data)
    data["space"] = {"opt": {"type": "categorical", "choices": ["adamw"]}}
    with pytest.raises(ConfigError, match="grid has 1 point"):
        parse_config(data)


def test_grid_larger_budget_than_points_is_refused() -> None:
    data = with_change("study.sampler", "grid")
    data["space"] = {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}}
    data["study"]["n_trials"] = 4
    with pytest.raises(ConfigError, match=r"study\.n_trials: 4 is more than the grid's 3 points"):
        parse_config(data)


def test_grid_values_from_ranges_and_explicit_lists() -> None:
    data = with_change("grid.lr", [1e-3, 1e-2])
    values = parse_config(data).grid_values()
    assert values["lr"] == [1e-3, 1e-2]
    assert values["batch_size"] == [32, 64, 128]
    assert values["width"] == [8, 23, 64]  # log-spaced ints
    assert values["dropout"] == [0.0, 0.25, 0.5]


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.toml: cannot read config file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[study\nname = 1")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_config(bad)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[study]\nname = "x"\nsampler = "bayes"\n[task]\nname = "digits"\n')
    with pytest.raises(ConfigError, match=r"wrong\.toml: study\.sampler: unknown value"):
        load_config(wrong)


def test_a_budget_makes_n_trials_optional() -> None:
    data = copy.deepcopy(GOOD)
    del data["study"]["n_trials"]
    assert parse_config(data).study.n_trials == 30  # no budget: the default cap
    data["study"]["budget_epochs"] = 500
    config = parse_config(data)
    assert config.study.n_trials is None and config.study.max_trials > 10**9
    assert config.study.budget_epochs == 500 and config.study.budget_hours is None
    assert StudyConfig.from_dict(config.to_dict()) == config
    data["study"].pop("budget_epochs")
    data["study"]["budget_hours"] = 2
    assert parse_config(data).study.budget_hours == 2.0
    data["study"]["n_trials"] = 7  # both: whichever is reached first
    assert parse_config(data).study.n_trials == 7


def test_asha_and_hyperband_with_promotion_pause_at_rungs() -> None:
    data = copy.deepcopy(GOOD)
    data["pruner"] = {"type": "asha", "min_resource": 1, "reduction_factor": 3}
    assert parse_config(data).pruner.pauses
    data["pruner"] = {"type": "hyperband", "promotion": True}
    assert parse_config(data).pruner.pauses
    data["pruner"] = {"type": "hyperband"}
    assert not parse_config(data).pruner.pauses  # Optuna's stop-only Hyperband, as before


# -- a step that does not divide the range: our rule beside Optuna's ---------------------------


def _stepped(kind: str, low: float, high: float, step: float) -> dict[str, Any]:
    return with_change("space.x", {"type": kind, "low": low, "high": high, "step": step})


@settings(max_examples=300, deadline=None)
@given(
    low=st.integers(-50, 50),
    span=st.integers(1, 60),
    step=st.integers(1, 25),
    scale=st.sampled_from([1, 0.1, 0.01, 0.25, 0.001]),
)
def test_a_step_is_refused_exactly_when_optuna_would_lower_high(
    low: int, span: int, step: int, scale: float
) -> None:
    """Optuna lowers `high` to the last step below it, with a warning nobody sees, where the
    step does not divide the range; the config refuses exactly those (floats in decimal steps
    such as 0.1, and ints)."""
    import warnings

    from optuna.distributions import FloatDistribution, IntDistribution

    kind = "int" if scale == 1 else "float"
    lo, hi, st_ = (
        (low, low + span, step)
        if kind == "int"
        else (round(low * scale, 3), round((low + span) * scale, 3), round(step * scale, 3))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist = (IntDistribution if kind == "int" else FloatDistribution)(lo, hi, step=st_)
    lowered = dist.high != hi
    try:
        parse_config(_stepped(kind, lo, hi, st_))
    except ConfigError as exc:
        assert lowered, f"refused, yet Optuna keeps high = {hi}: {exc}"
        assert str(exc).startswith(f"space.x: step = {st_} does not divide high - low")
    else:
        assert not lowered, f"accepted, yet Optuna lowers high {hi} to {dist.high}"
