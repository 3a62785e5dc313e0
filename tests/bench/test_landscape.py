"""bench/efficiency/landscape.py: where the best finals rank at ASHA's early rungs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench.efficiency.landscape import landscape, probe_recall
from tests.helpers.lcbench import DATA, needs_data

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "YAHPO_DATA": str(DATA)}
    return subprocess.run(
        [sys.executable, "-m", "bench.efficiency.landscape", *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
    )  # fmt: skip


def test_a_late_bloomer_is_seen_where_the_rule_s_statistic_sees_nothing() -> None:
    # 30 configurations keep their order for 9 epochs and end in it, but for one that starts
    # in the middle and ends first.
    epochs = 12
    curves = np.array([[c + e / 100 for e in range(epochs)] for c in range(30)], dtype=float)
    curves[12, -1] = 100.0
    row = landscape(curves, best=1, rungs=(1, 3, 9))
    assert row["1"]["best"] == row["3"]["best"] == row["9"]["best"] == 0.57  # 17 of 30 better
    # Among the promoted top third, every rung ranks as the next: the rule would keep them.
    assert row["1"]["rule"] == row["3"]["rule"] == 1.0
    assert row["1"]["rho"] < 1.0
    # Trials trained to epoch 9 without pausing see nothing either: the late bloomer is only
    # among the best finals (3 of the top 4 would be promoted at rung 1).
    probes = probe_recall(curves, 1, reference=9)
    assert probes["recall"] == 1.0 and probes["final"] == 0.75 and probes["alarm"] < 0.1


def test_the_test_set_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    proc = run("--instances", "3945,1", "--json", str(out))
    assert proc.returncode == 2 and "not a development instance" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


@needs_data
def test_one_development_instance_gives_a_row_per_rung_and_a_stamped_file(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    proc = run("--instances", "3945", "--configs", "60", "--best", "3", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| 3945 |" in proc.stdout
    result = json.loads(out.read_text())
    assert result["made"]["command"].startswith("python -m bench.efficiency.landscape")
    rungs = result["instances"]["3945"]
    assert list(rungs) == ["1", "3", "9", "27"]
    for cell in rungs.values():
        assert -1 <= cell["rho"] <= 1 and -1 <= cell["rule"] <= 1 and 0 <= cell["best"] < 1
    # 3945 ranks its configurations the same way from the first epochs on (rho 0.83 at 600).
    assert rungs["27"]["rho"] > 0.9 and rungs["1"]["best"] < 1 / 3
