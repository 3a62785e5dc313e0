"""`[tracking]` is checked like every other key: one line naming the key, exit 2, nothing
written; a password in the MLflow URI is refused (masked); without the tracker's package the
line names the extra to install."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from search.commands.cli import main
from search.db.storage import open_storage
from search.study.note import config_toml
from search.study.parse_config import load_config, parse_config
from search.study.settings import ConfigError, StudyConfig
from search.study.studies import create_study
from tests.helpers import REPO
from tests.helpers.cli import count_studies, hpsearch
from tests.helpers.configs import GOOD, write_config

SECRET = "s3cr3t-pw"


def with_tracking(tracking: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    data["tracking"] = tracking
    return data


@pytest.mark.parametrize(
    ("tracking", "message"),
    [
        ({"mlfow": {}}, "unknown key tracking.mlfow (did you mean 'mlflow'?)"),
        ({"mlflow": {"experiment": "x"}}, "tracking.mlflow.uri is missing"),
        ({"mlflow": {"uri": 5000}}, "tracking.mlflow.uri: must be a string, got 5000"),
        ({"mlflow": {"uri": "http://h", "run": "x"}}, "unknown key tracking.mlflow.run"),
        ({"mlflow": {"uri": " "}}, "tracking.mlflow.uri: must not be empty"),
        ({"mlflow": "http://h"}, 'tracking.mlflow: must be a table, got "http://h"'),
        ({"wandb": {"entity": "team"}}, "tracking.wandb.project is missing"),
        ({"wandb": {"project": "p", "mode": "shared"}}, "tracking.wandb.mode: unknown value"),
        ({"wandb": {"project": "p", "api_key": "k"}}, "unknown key tracking.wandb.api_key"),
        (
            {"mlflow": {"uri": f"https://ml:{SECRET}@mlflow.internal"}},
            "tracking.mlflow.uri: https://ml:***@mlflow.internal holds a password",
        ),
    ],
)
def test_bad_tracking_is_one_line_naming_the_key(tracking: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(with_tracking(tracking))
    text = str(err.value)
    assert message in text and "\n" not in text and SECRET not in text


def test_tracking_is_stored_with_the_study_and_shown_in_its_note() -> None:
    tracking = {
        "mlflow": {"uri": "http://mlflow.internal:5000", "experiment": "digits"},
        "wandb": {"project": "digits", "entity": "team", "mode": "offline"},
    }
    config = parse_config(with_tracking(tracking))
    assert StudyConfig.from_dict(config.to_dict()) == config
    assert config.to_dict()["tracking"] == tracking
    assert 'mlflow = { uri = "http://mlflow.internal:5000", experiment = "digits" }' in (
        config_toml(config)
    )
    # A study without trackers is stored as before.
    assert "tracking" not in parse_config(GOOD).to_dict()


def _with_tracking_section(tmp_path: Path, name: str, section: str) -> Path:
    config = write_config(tmp_path, name, n_trials=2, task="tests.helpers.tiny_task:make_task")
    config.write_text(config.read_text() + "\n[tracking]\n" + section)
    return config


def test_create_refuses_a_password_in_the_uri(tmp_path: Path, pg_url: str, study_name: str) -> None:
    config = _with_tracking_section(
        tmp_path, study_name, f'mlflow = {{ uri = "http://ml:{SECRET}@127.0.0.1:5000" }}\n'
    )
    before = count_studies(pg_url)
    done = hpsearch("create", str(config), "--storage", pg_url, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and SECRET not in done.stderr + done.stdout
    assert "tracking.mlflow.uri: http://ml:***@127.0.0.1:5000 holds a password" in done.stderr
    assert "MLFLOW_TRACKING_PASSWORD" in done.stderr
    assert count_studies(pg_url) == before


@pytest.mark.parametrize("tracker", ["mlflow", "wandb"])
def test_without_the_tracker_package_the_extra_is_named(
    tracker: str, tmp_path: Path, pg_url: str, study_name: str
) -> None:
    # As on a machine without the package: an import hook hides it from this process.
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] == {tracker!r}:\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    section = {
        "mlflow": 'mlflow = { uri = "http://127.0.0.1:5000" }\n',
        "wandb": 'wandb = { project = "digits", mode = "offline" }\n',
    }[tracker]
    config = _with_tracking_section(tmp_path, study_name, section)
    before = count_studies(pg_url)
    done = hpsearch(
        "create", str(config), "--storage", pg_url, cwd=tmp_path,
        env={"PYTHONPATH": f"{hide}:{REPO}"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert f"pip install 'hpsearch[{tracker}]'" in done.stderr
    assert count_studies(pg_url) == before


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "has no [tracking] mlflow settings: give them with --uri"),
        (["--project", "p"], "--project: for --to wandb, not --to mlflow"),
        (["--uri", f"http://u:{SECRET}@h:5000"], "http://u:***@h:5000 holds a password"),
    ],
)
def test_export_without_settings_or_with_bad_flags_is_one_line(
    flags: list[str], message: str, tmp_path: Path, pg_url: str, study_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    config = write_config(
        tmp_path, study_name, n_trials=2, task="tests.helpers.tiny_task:make_task"
    )
    create_study(open_storage(pg_url), load_config(config))
    export = ["export", "--study", study_name, "--to", "mlflow", "--storage", pg_url]
    assert main([*export, *flags]) == 2
    out, err = capsys.readouterr()
    assert message in err and err.count("\n") == 1
    assert SECRET not in err + out
