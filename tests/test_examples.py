"""Every example runs, as README and the examples' comments say to run it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.helpers import REPO

EXAMPLES = sorted((REPO / "examples").glob("*.toml"))


@pytest.mark.slow
@pytest.mark.parametrize("config", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_each_example_trains_one_trial(config: Path) -> None:
    """`hpsearch try CONFIG`: the config is valid, its task imports and trains."""
    done = subprocess.run(
        [sys.executable, "-m", "search", "try", str(config), "--epochs", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "epoch 2/2" in done.stdout


def _threads_of_this_test_process() -> dict[str, str]:
    """The share of the cores tests/conftest.py gives each test process when several run at
    once (README's command on a machine of its own takes them all)."""
    threads = os.environ.get("OMP_NUM_THREADS")
    return {"OMP_NUM_THREADS": threads} if threads else {}


@pytest.mark.slow
def test_readme_main_job(tmp_path: Path) -> None:
    """README's first command, `hpsearch run examples/digits.toml`, on the SQLite default."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    done = subprocess.run(
        [sys.executable, "-m", "search", "run", "examples/digits.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
        | _threads_of_this_test_process(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    study = optuna.load_study(study_name="digits", storage=f"sqlite:///{tmp_path}/hpsearch.db")
    # The budget of 180 epochs is spent exactly, on many trials (ASHA: most stop after an
    # epoch or three), and the study ends with none left running or paused.
    assert sum(len(t.intermediate_values) for t in study.trials) == 180
    assert len(study.trials) > 20
    assert all(t.state.is_finished() for t in study.trials)
    assert study.best_value > 0.9  # the best tuned CNN classifies digits well
    assert f"best: trial {study.best_trial.number}" in done.stdout


def test_readme_says_how_to_skip_the_cuda_download_before_the_first_command() -> None:
    """A reader going top to bottom learns about the CPU build of torch before the first
    command downloads the CUDA one; the two commands stay the first code lines."""
    text = (REPO / "README.md").read_text()
    cpu_build = text.index("pip install torch --index-url https://download.pytorch.org/whl/cpu")
    block = text.index("```bash\n")
    assert cpu_build < block
    first, second = text[block:].splitlines()[1:3]
    assert first == "pip install -e . && hpsearch run examples/digits.toml"
    assert second == "pip install -e '.[test]' && python -m pytest"


@pytest.mark.parametrize(
    "path",
    [
        "hpsearch.db",
        "hpsearch.db-wal",
        "hpsearch.db.artifacts/0f3a-1-9c2e.pt",  # the default checkpoints of SQLite studies
        "grid_vs_random/report.md",  # examples/grid_vs_random.toml's --out
        "examples/hpsearch.db",
    ],
)
def test_default_outputs_stay_out_of_git_status(path: str) -> None:
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", path], cwd=REPO, capture_output=True
    )
    assert done.returncode == 0, f"{path} would show in git status"


def test_an_example_run_elsewhere_says_where_to_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hpsearch run /path/to/repo/examples/tabular.toml` from another directory: its task
    (examples.tabular) cannot import there; one line says where to run it, exit 2, nothing
    written."""
    from search.commands import main

    monkeypatch.chdir(tmp_path)
    hidden = {"", ".", str(REPO), str(REPO) + "/"}
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in hidden])
    for name in [m for m in sys.modules if m == "examples" or m.startswith("examples.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delenv("HPSEARCH_STORAGE", raising=False)
    code = main(["run", str(REPO / "examples" / "tabular.toml")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"no module named 'examples' in the current directory ({tmp_path})" in err
    assert "run from the directory that holds examples/" in err
    assert "the repository's root" in err and "PYTHONPATH" in err
    assert list(tmp_path.iterdir()) == []
