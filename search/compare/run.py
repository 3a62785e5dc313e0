"""Running a comparison's studies: created (or found again), then each unfinished one run by
local workers in turn, with one progress line per study (`search.compare.plan` plans them)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from search.compare.plan import CompareRun
from search.db.storage import Storage, open_storage
from search.monitor.status import study_status
from search.sampling.setup import set_up_study
from search.study.studies import StudyRef

__all__ = ["RunStudy", "prepare_studies", "run_local_workers", "run_logging_to_file", "run_studies"]

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
            if _finished(status) >= status["n_trials"]:
                print(f"{where}: {_describe(status)} (already done)", file=sys.stderr)
                continue
            progress = _Progress(storage, ref, where)
            progress.start()
            try:
                code = run_study(ref)
            finally:
                progress.stop()
            if code != 0:
                return code
            if _finished(study_status(storage, ref)) < ref.config.study.n_trials:
                # The workers stopped without finishing (SIGTERM: they handed their trials
                # back); so does the comparison, instead of starting the next study.
                return 130

    finally:
        storage.close()
    return 0


def _finished(status: dict[str, Any]) -> int:
    return status["complete"] + status["pruned"] + status["failed"]


def _describe(status: dict[str, Any]) -> str:
    best = status["best"]
    shown = "none yet" if best is None else f"{best['value']:.4g} (trial {best['number']})"
    pruned = f", {status['pruned']} pruned" if status["pruned"] else ""
    failed = f", {status['failed']} failed" if status["failed"] else ""
    return (
        f"{_finished(status)}/{status['n_trials']} trials done{pruned}{failed}, "
        f"best {status['metric']} {shown}"
    )


class _Progress:
    """One line per study: strategy, repeat, trials done, best so far. Redrawn every second
    on a terminal; elsewhere (a log file, CI) one line each time a trial finishes."""

    def __init__(self, storage: Storage, ref: StudyRef, where: str) -> None:
        self.storage, self.ref, self.where = storage, ref, where
        self.tty = sys.stderr.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="compare-progress", daemon=True)
        self._last = ""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._draw(final=True)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self._draw(final=False)

    def _draw(self, *, final: bool) -> None:
        try:
            text = f"{self.where}: {_describe(study_status(self.storage, self.ref))}"
        except Exception:  # a line not redrawn this second costs nothing
            return
        if self.tty:
            sys.stderr.write(f"\r\033[K{text}" + ("\n" if final else ""))
        elif text != self._last:
            sys.stderr.write(text + "\n")
        self._last = text
        sys.stderr.flush()


def run_local_workers(
    url: str,
    study_name: str,
    devices: Sequence[str],
    worker_argv: Sequence[str],
    log_path: Path,
) -> int:
    """`hpsearch worker` processes on one study, one per device, their logs in `log_path`.

    The storage URL travels in the environment, never on the command line (where `ps` would
    show its password). CPU workers split the cores between them.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cpu_workers = sum(d == "cpu" for d in devices)
    children: list[subprocess.Popen[bytes]] = []
    with open(log_path, "ab") as log:
        for device in devices:
            env = dict(os.environ, HPSEARCH_STORAGE=url, HPSEARCH_PROGRESS="0")
            if device.startswith("cuda:"):
                env["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
                device = "cuda:0"
            elif cpu_workers > 1:
                env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // cpu_workers))
            cmd = [sys.executable, "-m", "search", "worker", "--study", study_name]
            children.append(
                subprocess.Popen(
                    [*cmd, "--device", device, *worker_argv], env=env, stdout=log, stderr=log
                )
            )

    def forward(signum: int, _frame: Any) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    interrupted = False
    try:
        while any(child.poll() is None for child in children):
            try:
                time.sleep(0.2)
            except KeyboardInterrupt:
                # The terminal sent Ctrl-C to the children too; they checkpoint and hand back.
                interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    codes = [child.returncode for child in children]
    if interrupted or 130 in codes:
        return 130
    if any(codes):
        logger.error("a worker of %s failed (exit codes %s); see %s", study_name, codes, log_path)
        return 1
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
