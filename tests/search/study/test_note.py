"""The study's note, where optuna-dashboard shows it first: the budget and paused trials on
top, kept up to date by the workers; a user's edits to the rest of the note are kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
from optuna_dashboard import get_note, save_note

from search.commands import main
from search.db.storage import open_storage
from search.db.studies import lock_study
from search.study.note import progress_line, refresh_progress_line
from tests.helpers.cli import cli_env

BUDGETED = """
[study]
name = "noted"
sampler = "random"
seed = 2
budget_epochs = 10

[pruner]
type = "asha"
min_resource = 1
reduction_factor = 3

[task]
name = "tests.helpers.tiny_task:make_task"
epochs = 3

[space]
lr = { type = "float", low = 1e-3, high = 1.0, log = true }
"""


def test_the_note_starts_with_the_budget_and_the_paused_trials(tmp_path: Path) -> None:
    config = tmp_path / "noted.toml"
    config.write_text(BUDGETED)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    assert main(["create", str(config), "--storage", url]) == 0
    study = optuna.load_study(study_name="noted", storage=url)
    head = get_note(study).split("\n")
    assert head[:3] == ["## noted", "", "**Budget**: 0/10 epochs (10 left) · **paused trials**: 0"]

    assert main(["run", str(config), "--storage", url]) == 0
    study = optuna.load_study(study_name="noted", storage=url)
    attrs = study.user_attrs
    assert attrs["budget"] == "10/10 epochs (0 left)"
    note = get_note(study)
    line = f"**Budget**: 10/10 epochs (0 left) · **paused trials**: {attrs['paused trials']}"
    assert note.split("\n")[:3] == ["## noted", "", line]
    assert note.count("**Budget**:") == 1 and "[space]" in note  # the rest is still there


def test_the_progress_line_keeps_what_a_user_wrote(tmp_path: Path) -> None:
    """Edited in the dashboard (no heading, and longer than one stored chunk): the line goes
    on top once, is replaced in place after, and the user's text stays whole."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="edited", storage=url)
    mine = "my own notes\n" + "x" * 5000 + "\nend"
    save_note(study, mine)
    storage = open_storage(url)
    try:
        for paused in (3, 4, 4):
            with storage.transaction() as conn:
                lock_study(conn, study._study_id)
                refresh_progress_line(conn, study._study_id, progress_line("1/9 epochs", paused))
    finally:
        storage.close()
    note = get_note(optuna.load_study(study_name="edited", storage=url))
    assert note == "**Budget**: 1/9 epochs · **paused trials**: 4\n\n" + mine


def test_create_writes_the_note_without_loading_the_dashboard(tmp_path: Path) -> None:
    """The dashboard's package loads its web app (scikit-learn, SciPy, pandas: about 1 s of
    every `create`); the note is written in its format without it, and its own `get_note`
    reads it back whole."""
    config = tmp_path / "noted.toml"
    config.write_text(BUDGETED)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    script = (
        "import sys\nfrom search.commands import main\n"
        f"code = main(['create', {str(config)!r}, '--storage', {url!r}])\n"
        "print(code, 'optuna_dashboard' in sys.modules, 'sklearn' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=cli_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-3:] == ["0", "False", "False"]
    note = get_note(optuna.load_study(study_name="noted", storage=url))
    assert note.startswith("## noted\n\n**Budget**: 0/10 epochs (10 left)")
    assert note.endswith("```\n") and 'name = "tests.helpers.tiny_task:make_task"' in note
