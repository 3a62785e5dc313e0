"""hpsearch try: one trial by hand from a study config, nothing written to a study."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from search.commands import main as hpsearch
from tests.helpers.terminal import run_on_a_terminal

REPO = Path(__file__).resolve().parents[3]
DIGITS = str(REPO / "examples" / "digits.toml")
EPOCH_LINE = re.compile(r"^epoch (\d+)/(\d+)  val_accuracy (\d\.\d{4})  \(\d+\.\d s\)$")

CUSTOM_TASK = """
import torch
from torch.utils.data import TensorDataset
from trainer import Task

def make(params):
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    data = TensorDataset(x, (x[:, 0] > 0).long())
    def loss_fn(outputs, targets):
        if params["mode"] == "nan":
            return outputs.sum() * float("nan")
        if params["mode"] == "interrupt":
            raise KeyboardInterrupt
        return torch.nn.functional.cross_entropy(outputs, targets)
    return Task(model=torch.nn.Linear(4, 2), train_set=data, val_set=data, loss_fn=loss_fn,
                metric_fn=lambda out, y: (out.argmax(1) == y).float().mean().item())
"""


def _config(tmp_path: Path, task: str = "digits", extra: str = "") -> str:
    path = tmp_path / f"study{len(list(tmp_path.glob('*.toml')))}.toml"
    path.write_text(
        f'[study]\nname = "t"\n[task]\nname = "{task}"\nepochs = 2\n{extra}'
        '[space]\nlr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n'
        'mode = { type = "categorical", choices = ["ok", "nan", "interrupt"] }\n'
    )
    return str(path)


@pytest.mark.slow
def test_prints_one_line_per_epoch_and_exits_0() -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "search",
            "try",
            DIGITS,
            "--epochs",
            "2",
            "--set",
            "width=8",
            "--set",
            "lr=0.01",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "digits: lr=0.01  weight_decay=0.0001  batch_size=64  dropout=0.25  width=8"
    assert [EPOCH_LINE.match(line).group(1, 2) for line in lines[1:3]] == [("1", "2"), ("2", "2")]
    assert lines[3].startswith("completed: val_accuracy 0.") and "fp32 on cpu" in lines[3]
    assert "\r" not in run.stdout  # no progress bar when stdout is not a terminal
    assert "trainer: precision fp32 (auto on the CPU" in run.stderr


@pytest.mark.slow
def test_draws_a_progress_bar_on_a_terminal() -> None:
    code, text = run_on_a_terminal(
        [sys.executable, "-m", "search", "try", DIGITS, "--epochs", "1", "--set", "width=8"],
        cwd=REPO,
        stream="stdout",
        columns=100,
        timeout=120,
    )
    assert code == 0
    assert "\repoch 1/1: " in text and "%|" in text  # tqdm's bar, redrawn in place
    assert re.search(r"epoch 1/1  val_accuracy \d\.\d{4}", text)


@pytest.mark.slow
def test_resumes_from_its_checkpoint_dir(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = [DIGITS, "--epochs", "2", "--set", "width=8", "--checkpoint-dir", str(tmp_path)]
    assert hpsearch(["try", *args]) == 0
    first = capsys.readouterr()
    assert hpsearch(["try", *args]) == 0
    second = capsys.readouterr()
    assert "resumed from epoch 2 step 0" in second.err
    assert first.out.splitlines()[2].split("(")[0] == second.out.splitlines()[1].split("(")[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "lr"], "--set 'lr': expected NAME=VALUE, e.g. --set lr=0.003"),
        (["--set", "=3"], "expected NAME=VALUE"),
        (["--set", "depth=3"], "--set depth: not a parameter of the config's [space] (lr, "),
        (["--set", "lr=0.5"], "--set lr=0.5: outside space.lr [0.0001, 0.1] (log)"),
        (["--set", "lr=fast"], "--set lr=fast: not a valid value for space.lr"),
        (["--set", "batch_size=48"], "--set batch_size=48: outside space.batch_size {32, 64, 128}"),
        (["--set", "width=8.5"], "not a valid value for space.width [8, 64] (log)"),
        (["--epochs", "0"], "--epochs: must be >= 1, got 0"),
        (["--epochs", "many"], "argument --epochs: invalid int value: 'many'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    assert hpsearch(["try", DIGITS, *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("hpsearch: error: ")
    assert message in captured.err and captured.err.count("\n") == 1


def test_bad_config_task_and_device_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cases = [
        ([str(tmp_path / "missing.toml")], "missing.toml: cannot read config file"),
        (
            [_config(tmp_path, extra='[train]\nprecison = "bf16"\n')],
            "unknown key train.precison (did you mean 'precision'?)",
        ),
        (
            [_config(tmp_path, task="no_such_module_xyz:make")],
            "task 'no_such_module_xyz:make': no module named 'no_such_module_xyz'",
        ),
        (
            [_config(tmp_path, task="digits"), "--device", "tpu"],
            "--device: device 'tpu': not a device; use cpu, cuda or cuda:N",
        ),
        ([], "the following arguments are required: CONFIG"),
    ]
    for args, message in cases:
        assert hpsearch(["try", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("hpsearch: error: ") and err.count("\n") == 1, err
        assert message in err, err


@pytest.mark.slow
def test_a_custom_task_by_name_and_exit_codes_1_and_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "cli_custom_task.py").write_text(CUSTOM_TASK)
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, task="cli_custom_task:make")
    assert hpsearch(["try", config, "--set", "mode=ok"]) == 0
    assert "completed: val_accuracy" in capsys.readouterr().out
    assert hpsearch(["try", config, "--set", "mode=nan"]) == 1
    assert "diverged: val_accuracy - after 0 epoch(s)" in capsys.readouterr().err
    assert hpsearch(["try", config, "--set", "mode=interrupt"]) == 130
    assert capsys.readouterr().err.endswith("hpsearch: interrupted\n")
    assert list(tmp_path.glob("*.db")) == []  # a trial by hand writes no study database
