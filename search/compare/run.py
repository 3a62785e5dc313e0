"""Running a comparison's studies: created (or found again), then each unfinished one run by
local workers in turn, with one progress line per study (`search.compare.plan` plans them)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from search.compare.plan import CompareRun
from search.db.storage import Storage, open_storage
from search.monitor.progress import StudyProgressThread, describe
from search.monitor.status import study_status
from search.sampling.setup import set_up_study
from search.study.studies import StudyRef

__all__ = ["RunStudy", "prepare_studies", "run_logging_to_file", "run_studies"]

logger = logging.getLogger("search.compare.run")


def prepare_studies(
    storage: Storage, runs: Sequence[CompareRun], argv: Sequence[str]
) -> list[StudyRef]:
    """Create every study of the comparison (as `hpsearch create` does, note included), or find
    it again with the same config; a study of that name with another config is a ConfigError
    (exit 2)."""
    return [set_up_study(storage, run.config, argv)[0] for run in runs]


RunStudy = Callable[[StudyRef], int]
"""Runs workers on one study until it is done; returns their exit code."""


def run_studies(
    url: str,
    runs: Sequence[CompareRun],
    refs: Sequence[StudyRef],
    run_study: RunStudy,
    *,
    repeats: int,
) -> int:
    """Run every unfinished study in turn, with a progress display; the first exit code that
    is not 0 stops the comparison and is returned."""
    storage = open_storage(url)
    try:
        for i, (run, ref) in enumerate(zip(runs, refs, strict=True), start=1):
            where = f"[{i}/{len(runs)}] {run.strategy.label} repeat {run.repeat}/{repeats}"
            status = study_status(storage, ref)
            if status.done:
                print(f"{where}: {describe(status)} (already done)", file=sys.stderr)
                continue
            progress = StudyProgressThread(storage, ref, where)
            progress.start()
            try:
                code = run_study(ref)
            finally:
                progress.stop()
            if code != 0:
                return code
            if not study_status(storage, ref).done:
                # The workers stopped without finishing (SIGTERM: they handed their trials
                # back); so does the comparison, instead of starting the next study.
                return 130

    finally:
        storage.close()
    return 0


def run_logging_to_file(run: Callable[[], int], log_path: Path) -> int:
    """Run a worker in this process with its log lines going to `log_path`: the terminal
    keeps the progress display, and no worker draws its own line (HPSEARCH_PROGRESS=0)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    search_logger = logging.getLogger("search")
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    saved = (search_logger.propagate, search_logger.level, os.environ.get("HPSEARCH_PROGRESS"))
    search_logger.addHandler(handler)
    search_logger.propagate = False
    search_logger.setLevel(logging.INFO)
    os.environ["HPSEARCH_PROGRESS"] = "0"
    try:
        return run()
    finally:
        search_logger.removeHandler(handler)
        handler.close()
        search_logger.propagate, level, progress = saved
        search_logger.setLevel(level)
        if progress is None:
            os.environ.pop("HPSEARCH_PROGRESS", None)
        else:
            os.environ["HPSEARCH_PROGRESS"] = progress
