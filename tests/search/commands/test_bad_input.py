"""Bad input, case by case: one line on stderr naming what is wrong, exit code 2, no traceback,
and nothing written (read back from the storage afterwards).

The cases run through `search.commands.main` in this process (the same code the `hpsearch`
program runs, minus the interpreter start); `test_cli.py` runs the program itself for a few of them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from search.commands import main as hpsearch
from tests.helpers.configs import SMALL

PASSWORD = "s3cret-Pa55"


@pytest.fixture(autouse=True)
def _no_log_lines(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """`hpsearch` prints its log records at INFO and above on stderr: in a bad-input case any
    such record would be a second line."""
    caplog.set_level(logging.INFO)
    yield
    shown = [r.getMessage() for r in caplog.get_records("call") if r.levelno >= logging.INFO]
    assert not shown, f"log lines beside the error: {shown}"


Edit = Callable[[str], str]
"""A change to the good config's text."""


def _config(tmp_path: Path, edit: Edit | None = None, name: str = "bad") -> str:
    text = SMALL.format(name=name, n_trials=4, task="digits")
    path = tmp_path / "study.toml"
    path.write_text(edit(text) if edit else text)
    return str(path)


def _replace(old: str, new: str) -> Edit:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new)

    return edit


def _append(extra: str) -> Edit:
    return lambda text: text + extra


# (case id, config edit or None, extra arguments, environment, expected words in the one line)
CONFIG_CASES = [
    ("unknown-section", _append("[trainer]\nlr = 1\n"), "unknown key [trainer]"),
    ("unknown-key-typo", _replace("sampler = ", "samplr = "), "did you mean 'sampler'"),
    ("unknown-sampler", _replace('"random"', '"bayes"'), 'study.sampler: unknown value "bayes"'),
    ("bad-direction", _replace('"maximize"', '"up"'), 'study.direction: unknown value "up"'),
    (
        "builtin-task-other-metric",
        _replace("seed = 1", 'seed = 1\nmetric = "val_loss"'),
        "study.metric: the built-in task 'digits' reports 'val_accuracy', got 'val_loss'",
    ),
    (
        "builtin-task-minimized",
        _replace('"maximize"', '"minimize"'),
        "study.direction: 'val_accuracy' of the built-in task 'digits' is better when higher",
    ),
    ("zero-trials", _replace("n_trials = 4", "n_trials = 0"), "study.n_trials: must be >= 1"),
    ("trials-not-int", _replace("n_trials = 4", 'n_trials = "4"'), "study.n_trials: must be an"),
    ("negative-seed", _replace("seed = 1", "seed = -1"), "study.seed: must be in [0, 2**32)"),
    ("huge-seed", _replace("seed = 1", "seed = 4294967296"), "study.seed: must be in [0, 2**32)"),
    (
        "zero-attempts",
        _replace("seed = 1", "seed = 1\nmax_attempts = 0"),
        "study.max_attempts: must be >= 1",
    ),
    (
        "log-low-zero",
        _replace("low = 1e-4", "low = 0"),
        "space.lr: log = true needs low > 0, got low = 0",
    ),
    ("low-above-high", _replace("low = 4, high = 24", "low = 24, high = 4"), "low must be < high"),
    ("unknown-param-type", _replace('type = "int"', 'type = "integer"'), "space.width.type"),
    ("empty-choices", _replace("choices = [64, 128]", "choices = []"), "at least one value"),
    ("float-step-zero", _replace("log = true }\nwidth", "step = 0 }\nwidth"), "space.lr"),
    (
        "float-step-not-dividing",
        _replace("low = 1e-4, high = 3e-1, log = true", "low = 0.0, high = 0.5, step = 0.3"),
        "space.lr: step = 0.3 does not divide high - low = 0.5 (the highest value tried would "
        "be 0.3, not 0.5)",
    ),
    (
        "int-step-not-dividing",
        _replace("low = 4, high = 24, log = true", "low = 4, high = 24, step = 3"),
        "space.width: step = 3 does not divide high - low = 20",
    ),
    ("unknown-pruner", _replace('type = "hyperband"', 'type = "bohb"'), "pruner.type"),
    (
        "zero-epoch-budget",
        _replace("n_trials = 4", "budget_epochs = 0"),
        "study.budget_epochs: must be >= 1, got 0",
    ),
    (
        "negative-hour-budget",
        _replace("n_trials = 4", "budget_hours = -1.5"),
        "study.budget_hours: must be > 0, got -1.5",
    ),
    (
        "hour-budget-word",
        _replace("n_trials = 4", 'budget_hours = "12h"'),
        'study.budget_hours: must be a number, got "12h"',
    ),
    (
        "epoch-budget-float",
        _replace("n_trials = 4", "budget_epochs = 10.5"),
        "study.budget_epochs: must be an integer",
    ),
    (
        "promotion-not-bool",
        _replace("reduction_factor = 2", 'reduction_factor = 2\npromotion = "yes"'),
        "pruner.promotion: must be",
    ),
    (
        "promotion-without-hyperband",
        lambda text: text.replace('"hyperband"', '"successive_halving"').replace(
            "reduction_factor = 2", "reduction_factor = 2\npromotion = true"
        ),
        "unknown key pruner.promotion",
    ),
    (
        "asha-rung-beyond-epochs",
        lambda text: text.replace('"hyperband"', '"asha"').replace(
            "min_resource = 1", "min_resource = 9"
        ),
        "pruner.min_resource: 9 is more than task.epochs = 4",
    ),
    (
        "rung-beyond-epochs",
        _replace("min_resource = 1", "min_resource = 9"),
        "pruner.min_resource: 9 is more than task.epochs = 4",
    ),
    ("reduction-one", _replace("reduction_factor = 2", "reduction_factor = 1"), ">= 2"),
    (
        "no-task",
        _replace('[task]\nname = "digits"\nepochs = 4\n', ""),
        "[task] section is missing",
    ),
    (
        "unimportable-task",
        _replace('name = "digits"', 'name = "nosuch.module:make_task"'),
        "task.name: task 'nosuch.module:make_task': no module named 'nosuch'",
    ),
    ("zero-epochs", _replace("epochs = 4", "epochs = 0"), "task.epochs: must be >= 1"),
    (
        "bad-precision",
        _replace("checkpoint_every_s = 60", 'precision = "fp8"'),
        "train.precision",
    ),
    (
        "negative-checkpoint-interval",
        _replace("checkpoint_every_s = 60", "checkpoint_every_s = -1"),
        "train.checkpoint_every_s: must be > 0",
    ),
    (
        "accumulation-beyond-batch",
        _replace("checkpoint_every_s = 60", "grad_accum_steps = 100"),
        "cannot be split into train.grad_accum_steps = 100",
    ),
    (
        "grid-too-small",
        lambda text: text.replace('"random"', '"grid"') + "[grid]\npoints = 1\n",
        "study.n_trials: 4 is more than the grid's 2 points",
    ),
    (
        "grid-value-outside",
        _append("[grid]\nlr = [0.5]\n"),
        "grid.lr: 0.5 is outside space.lr",
    ),
    ("not-toml", lambda text: "[study\n", "not valid TOML"),
    ("not-utf8", None, "not a text file in UTF-8"),
    ("missing-file", None, "cannot read config file"),
]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [pytest.param(edit, expected, id=case) for case, edit, expected in CONFIG_CASES],
)
def test_a_bad_config(
    edit: Edit | None, expected: str, tmp_path: Path, pg_url: str, request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, edit)
    case = request.node.callspec.id
    if case == "not-utf8":
        Path(config).write_bytes(b'[study]\nname = "caf\xe9"\n')
    elif case == "missing-file":
        config = str(tmp_path / "nope.toml")
    before = _studies(pg_url)
    for command in ("create", "run"):
        _assert_one_line_exit_2(
            capsys, [command, config, "--storage", pg_url], expected, f"{case} ({command})"
        )
    assert _studies(pg_url) == before
    assert list(tmp_path.glob("*.db")) == []


# (case id, arguments after the command, environment, expected words)
ARGUMENT_CASES = [
    ("grace-tiny", ["run", "{config}", "--grace-s", "0.01"], {}, "--grace-s: must be between 1"),
    ("grace-inf", ["run", "{config}", "--grace-s", "inf"], {}, "--grace-s: must be between 1"),
    ("grace-nan", ["worker", "--study", "x", "--grace-s", "nan"], {}, "must be between 1"),
    ("grace-word", ["run", "{config}", "--grace-s", "soon"], {}, "not a number of seconds"),
    ("grace-env", ["run", "{config}"], {"HPSEARCH_GRACE_S": "0"}, "HPSEARCH_GRACE_S='0'"),
    ("workers-zero", ["run", "{config}", "--workers", "0"], {}, "--workers: must be >= 1, got 0"),
    (
        "workers-negative",
        ["run", "{config}", "--workers", "-2"],
        {},
        "--workers: must be >= 1, got -2",
    ),
    (
        # argparse alone takes "-1GB" for a flag and says "expected one argument"
        "device-memory-negative",
        ["estimate", "{config}", "--device-memory", "-1GB"],
        {},
        "--device-memory: '-1GB' is not a memory size",
    ),
    ("unknown-flag", ["run", "{config}", "--fast"], {}, "unrecognized arguments: --fast"),
    ("no-command", [], {}, "the following arguments are required"),
    (
        "artifacts-missing",
        ["run", "{config}", "--artifacts", "{tmp}/unmounted"],
        {},
        "--artifacts {tmp}/unmounted: no such directory (is the shared volume mounted?)",
    ),
    (
        "artifacts-env-missing",
        ["run", "{config}"],
        {"HPSEARCH_ARTIFACTS": "{tmp}/gone"},
        "--artifacts {tmp}/gone: no such directory",
    ),
    ("device-absent", ["run", "{config}", "--workers", "1"], {}, None),  # replaced below
    (
        "run-device-absent",
        ["run", "{config}", "--device", "cuda:7"],
        {},
        "--device: device 'cuda:7'",
    ),
    (
        "mysql-url",
        ["create", "{config}", "--storage", f"mysql://ml:{PASSWORD}@db/hp"],
        {},
        "bad storage URL 'mysql://ml:***@db/hp'",
    ),
    (
        "old-driver",
        ["create", "{config}", "--storage", f"postgresql+psycopg2://ml:{PASSWORD}@db/hp"],
        {},
        "use the psycopg 3 driver",
    ),
    (
        "port-not-a-number",
        ["create", "{config}", "--storage", f"postgresql://ml:{PASSWORD}@db:port/hp"],
        {},
        "bad storage URL 'postgresql://ml:***@db:port/hp': the port is not a number",
    ),
    (
        "at-sign-in-password",
        ["create", "{config}", "--storage", "postgresql://ml:pa@ss@127.0.0.1/hp"],
        {},
        "write it percent-encoded",
    ),
    (
        "password-in-query",
        ["create", "{config}", "--storage", f"postgresql://ml@127.0.0.1:1/hp?password={PASSWORD}"],
        {},
        "cannot reach the database at postgresql+psycopg://ml@127.0.0.1:1/hp?password=***",
    ),
    (
        "password-in-env-url",
        ["create", "{config}"],
        {"HPSEARCH_STORAGE": f"postgresql://ml:{PASSWORD}@127.0.0.1:1/hp"},
        "cannot reach the database at postgresql+psycopg://ml:***@127.0.0.1:1/hp",
    ),
    ("no-database-name", ["create", "{config}", "--storage", "postgresql://h/"], {}, "no database"),
    (
        "memory-sqlite",
        ["create", "{config}", "--storage", "sqlite:///:memory:"],
        {},
        "needs a file",
    ),
    (
        "unknown-study",
        ["worker", "--study", "no-such-study", "--storage", "{pg}"],
        {},
        "no hpsearch study named 'no-such-study'",
    ),
    (
        "status-missing-sqlite-file",
        ["status", "--study", "x", "--storage", "sqlite:///{tmp}/typo.db"],
        {},
        "no study database at",
    ),
    ("try-bad-set", ["try", "{config}", "--set", "lr=9"], {}, "--set lr=9: outside space.lr"),
]


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [pytest.param(a, e, x, id=case) for case, a, e, x in ARGUMENT_CASES],
)
def test_bad_arguments_and_urls(
    args: list[str], env: dict[str, str], expected: str | None, tmp_path: Path, pg_url: str,
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith("HPSEARCH_")]:
        monkeypatch.delenv(key)
    config = _config(tmp_path)
    fill = {"config": config, "tmp": str(tmp_path), "pg": pg_url}
    args = [a.format(**fill) for a in args]
    for key, value in env.items():
        monkeypatch.setenv(key, value.format(**fill))
    case = request.node.callspec.id
    if case == "device-absent":
        # `run --workers 1` on a CPU machine is fine; a worker on a GPU this machine lacks
        # is not, and it must not touch the study (it used to claim and fail every trial).
        assert hpsearch(["create", config, "--storage", pg_url]) == 0
        capsys.readouterr()
        caplog.clear()  # what `create` logged is not the worker's
        args = ["worker", "--study", "bad", "--storage", pg_url, "--device", "cuda:3"]
        expected = "--device: device 'cuda:3'"
    before = _studies(pg_url), _trial_states(pg_url)
    _assert_one_line_exit_2(capsys, args, expected.format(**fill), case)
    assert (_studies(pg_url), _trial_states(pg_url)) == before
    assert [p.name for p in tmp_path.iterdir()] == ["study.toml"]


def _assert_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str, case: str
) -> None:
    code = hpsearch(args)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, (case, captured.err)
    assert len(lines) == 1 and lines[0].startswith("hpsearch: error: "), (case, captured.err)
    assert expected in lines[0], (case, lines[0])
    assert "Traceback" not in captured.err and captured.out == "", case
    assert PASSWORD not in captured.err + captured.out, case


def _studies(url: str) -> list[str]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        names = conn.execute(sa.text("SELECT study_name FROM studies ORDER BY 1")).scalars()
        result = list(names)
    engine.dispose()
    return result


def _trial_states(url: str) -> list[tuple[str, str]]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT s.study_name, t.state FROM trials t JOIN studies s USING (study_id) "
                "ORDER BY t.trial_id"
            )
        ).all()
    engine.dispose()
    return [tuple(r) for r in rows]


# Values the storage would refuse on one backend and keep on the other: refused on both, before
# anything is written (case id, config edit, expected words).
STORAGE_LIMIT_CASES = [
    (
        "study-name-too-long",
        _replace('name = "bad"', f'name = "{"s" * 600}"'),
        "study.name: 'sssssssssssssssssssssssssssssssssssss...' is 600 characters long; "
        "the storage keeps at most 512",
    ),
    (
        "study-name-nul",
        _replace('name = "bad"', 'name = "bad\\u0000name"'),
        "study.name: 'bad\\x00name' contains the NUL character, which PostgreSQL refuses",
    ),
    (
        "study-name-newline",
        _replace('name = "bad"', 'name = "bad\\nname"'),
        "study.name: 'bad\\nname' contains '\\n' at position 3",
    ),
    (
        "metric-too-long",
        _replace("seed = 1", f'seed = 1\nmetric = "{"m" * 513}"'),
        "study.metric: 'mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm...' is 513 characters long",
    ),
    (
        "metric-nul",
        _replace("seed = 1", 'seed = 1\nmetric = "acc\\u0000"'),
        "study.metric: 'acc\\x00' contains the NUL character",
    ),
    (
        "param-name-too-long",
        _append(f'"{"p" * 520}" = {{ type = "float", low = 0.0, high = 1.0 }}\n'),
        "space.ppppppppppppppppppppppppppppppppppppp...: the parameter name is 520 characters long",
    ),
    (
        "param-name-nul",
        _append('"p\\u0000" = { type = "float", low = 0.0, high = 1.0 }\n'),
        "the parameter name contains the NUL character",
    ),
]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [pytest.param(edit, expected, id=case) for case, edit, expected in STORAGE_LIMIT_CASES],
)
def test_a_value_the_storage_would_refuse(
    edit: Edit, expected: str, tmp_path: Path, storage_url: str,
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The same answer on SQLite and PostgreSQL: one line, exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, edit)
    case = request.node.callspec.id
    before = _studies(storage_url), _trial_states(storage_url)
    for command in ("create", "run"):
        args = [command, config, "--storage", storage_url]
        _assert_one_line_exit_2(capsys, args, expected, f"{case} ({command})")
    assert (_studies(storage_url), _trial_states(storage_url)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["study.toml", *(["study.db"] if storage_url.startswith("sqlite") else [])]
    )


def test_an_unknown_study_name_close_to_one_says_which(
    pg_url: str, study_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    name = f"resnet-sweep-{study_name[-6:]}"
    config = _config(tmp_path, name=name)
    assert hpsearch(["create", config, "--storage", pg_url]) == 0
    capsys.readouterr()
    caplog.clear()  # what `create` logged is not part of the answer
    typo = name.replace("sweep", "swep")
    for command in (["worker", "--study", typo], ["status", "--study", typo]):
        _assert_one_line_exit_2(
            capsys,
            [*command, "--storage", pg_url],
            f"no hpsearch study named {typo!r} in ",
            " ".join(command),
        )
    code = hpsearch(["status", "--study", typo, "--storage", pg_url])
    assert code == 2
    assert f"did you mean {name!r}? (`hpsearch studies` lists them)" in capsys.readouterr().err
