"""The `hpsearch` command line run as users run it: a real process, from a clean directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from tests.helpers import REPO, terminal


def cli_env() -> dict[str, str]:
    """This process's environment for the CLI: no inherited hpsearch settings (HPSEARCH_*),
    this checkout's code on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPSEARCH_")}
    return {**env, "PYTHONPATH": str(REPO)}


def hpsearch(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run the CLI from a clean working directory (no inherited storage settings)."""
    return subprocess.run(
        [sys.executable, "-m", "search", *args],
        cwd=cwd,
        env={**cli_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def count_studies(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT count(*) FROM studies")).scalar_one()
    except sa.exc.ProgrammingError:
        return 0
    finally:
        engine.dispose()


def cli_on_a_terminal(args: list[str], cwd: Path, timeout: float = 300) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal; returns (exit code, what the terminal got)."""
    return terminal.run_on_a_terminal(
        [sys.executable, "-m", "search", *args], cwd=cwd, env=cli_env(), timeout=timeout
    )
