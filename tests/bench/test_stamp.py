"""Every result file a harness writes says which commit, command, date and load made it."""

from __future__ import annotations

import datetime
import json
import shlex
import subprocess
import sys
from pathlib import Path

from bench.stamp import append_line, write_json
from tests.helpers import REPO


def _head() -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_json_result_and_each_cached_row_carry_commit_command_date_and_load(
    tmp_path: Path,
) -> None:
    write_json(tmp_path / "result.json", [{"x": 1}])
    written = json.loads((tmp_path / "result.json").read_text())
    assert written["results"] == [{"x": 1}]
    with open(tmp_path / "cache.jsonl", "a") as out:
        append_line(out, {"key": "a"})
        append_line(out, {"key": "b"})
    rows = [json.loads(line) for line in (tmp_path / "cache.jsonl").read_text().splitlines()]
    assert [row["key"] for row in rows] == ["a", "b"]

    for made in (written["made"], *(row["made"] for row in rows)):
        assert _head().startswith(made["commit"].removesuffix("+changes"))
        assert shlex.split(made["command"]) == ["python", *sys.orig_argv[1:]]
        taken = datetime.datetime.fromisoformat(made["date"])
        assert abs(datetime.datetime.now(datetime.UTC) - taken) < datetime.timedelta(minutes=5)
        assert len(made["load"]) == 3 and all(x >= 0 for x in made["load"])
