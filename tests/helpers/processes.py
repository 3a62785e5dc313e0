"""Real `hpsearch worker` processes for fault tests, and polling the study database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from search.db.storage import open_storage
from search.db.tables import study_budgets, trial_intermediate_values, trials
from search.study.studies import find_study
from tests.helpers.cli import cli_env


def default_signals() -> None:
    """`preexec_fn` for a child a test signals: SIGINT and SIGTERM at their defaults, as in a
    terminal's foreground job, whatever this process inherited (a background job of a
    non-interactive shell has SIGINT ignored, and its children with it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def ignore_sigint() -> None:
    """`preexec_fn`: SIGINT ignored, as a background job of a non-interactive shell has it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class WorkerProcess:
    """`python -m search worker` in its own process group, logging to a file."""

    def __init__(
        self,
        url: str,
        study: str,
        log_dir: Path,
        *,
        grace_s: float,
        name: str,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.log_path = log_dir / f"{name}.log"
        env = {
            **cli_env(),
            "HPSEARCH_STORAGE": url,
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
        }
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in wait/kill)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "search",
                "worker",
                "--study",
                study,
                "--grace-s",
                str(grace_s),
                "--device",
                "cpu",
                *extra,
            ],
            cwd=log_dir,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=default_signals,
        )

    def signal(self, signum: int) -> None:
        os.killpg(self.proc.pid, signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.returncode is not None:
                self._log.close()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def kill(self) -> None:
        if self.alive():
            os.killpg(self.proc.pid, 9)
            self.proc.wait(10)
        self._log.close()


def wait_for(
    condition: Callable[[], Any], timeout: float, what: str, workers: list[WorkerProcess] = ()
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.1)
    logs = "\n".join(f"--- {w.log_path.name}\n{w.log()[-3000:]}" for w in workers)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{logs}")


def query(url: str, sql: str, **params: Any) -> list[Any]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql), params).all()
    finally:
        engine.dispose()


def reported_epochs(url: str, study: str, number: int) -> int:
    """The last epoch trial `number` of `study` has reported (0 if none)."""
    rows = query(
        url,
        "SELECT max(v.step) FROM trial_intermediate_values v JOIN trials t USING (trial_id) "
        "JOIN studies s USING (study_id) WHERE s.study_name = :n AND t.number = :k",
        n=study,
        k=number,
    )
    return rows[0][0] or 0


def trial_states(url: str, study: str) -> dict[str, int]:
    rows = query(
        url,
        "SELECT t.state, count(*) FROM trials t JOIN studies s USING (study_id) "
        "WHERE s.study_name = :n GROUP BY t.state",
        n=study,
    )
    return {str(state): n for state, n in rows}


def spent_epochs(url: str, name: str) -> tuple[int, int]:
    """(the budget counter, the epochs reported by every trial) of study `name`: equal without
    crashes."""
    storage = open_storage(url)
    try:
        study = find_study(storage, name)
        assert study is not None
        with storage.autocommit() as conn:
            used = (
                conn.execute(
                    sa.select(study_budgets.c.epochs_used).where(
                        study_budgets.c.study_id == study.study_id
                    )
                ).scalar()
                or 0
            )  # no counter before the first worker starts
            reported = conn.execute(
                sa.select(sa.func.count())
                .select_from(trial_intermediate_values)
                .join(trials, trials.c.trial_id == trial_intermediate_values.c.trial_id)
                .where(trials.c.study_id == study.study_id)
            ).scalar_one()
    finally:
        storage.close()
    return used, reported
