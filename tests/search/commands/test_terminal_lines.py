"""What a user sees on a real terminal (a pseudo-terminal): log lines never run into the live
status line, the precision line is said once per worker, the study's end says counts."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.cli import cli_on_a_terminal
from tests.helpers.configs import write_config

LOG_LINE = re.compile(r"\d\d:\d\d:\d\d (?:trial|worker|study|precision)")


def _visible_lines(text: str) -> list[str]:
    """The terminal's lines as they end up on the screen: on each line, what the last carriage
    return and erase-line left."""
    text = text.replace("\r\n", "\n")  # the terminal's own line ends (onlcr)
    return [segment.split("\r")[-1].replace("\x1b[K", "") for segment in text.split("\n")]


def test_log_lines_and_the_status_line_never_mix(study_name: str, tmp_path: Path) -> None:
    config = write_config(
        tmp_path, study_name, n_trials=4, task="tests.helpers.tiny_task:make_task"
    )
    code, text = cli_on_a_terminal(["run", str(config)], tmp_path)
    assert code == 0, text[-2000:]
    assert re.search(r"\r\x1b\[K\[\S+\] trial \d+: epoch \d/4", text), text[-2000:]  # the line
    starts = [m.start() for m in LOG_LINE.finditer(text)]
    assert len(starts) >= 5, text[-2000:]
    for start in starts:
        # Each log line starts on a line of its own: erased first, whatever was drawn there.
        assert text[max(0, start - 4) : start] == "\r\x1b[K", repr(text[start - 80 : start + 40])
    for line in _visible_lines(text):
        # No line on the screen holds both a status line's text and a log record.
        assert not ("| best" in line and LOG_LINE.search(line)), repr(line)
    visible = "\n".join(_visible_lines(text))
    assert len(re.findall(r"\d\d:\d\d:\d\d precision ", visible)) == 1, visible[-3000:]
