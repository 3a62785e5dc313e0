"""hpsearch as users install it: a wheel built from the source, installed into a fresh virtualenv,
run from a directory that is not the checkout. `hpsearch migrate` must find its migrations (the
checkout's top-level migrations/) in the installed package, and a study must run to the end on a
fresh PostgreSQL database.

The fresh virtualenv reuses this environment's packages (torch's CPU build above all: nothing is
downloaded) through a `.pth` file pointing at a copy of this site-packages' listing without
hpsearch itself, so that only the wheel can provide `search` and `trainer`; `pip install
--no-index` then also proves that the wheel's requirements are satisfiable from what is there.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.postgres import fresh_database

pytestmark = pytest.mark.slow

CONFIG = """
[study]
name = "from-a-wheel"
direction = "maximize"
n_trials = 2
sampler = "random"

[pruner]
type = "none"

[task]
name = "digits"
epochs = 1

[space]
lr = { type = "float", low = 1e-3, high = 1e-1, log = true }
width = { type = "int", low = 4, high = 8 }
"""

_NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", ".ci-venv", "build", "dist", "*.egg-info", "__pycache__", "*.db*", "out"
)


def _setuptools_builds_wheels() -> bool:
    """Whether this environment's setuptools builds wheels by itself (70.1 and later), so that
    pip needs no isolated build environment (which it would fill from the index)."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) >= (70, 1)


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.postgres
def test_a_wheel_runs_migrate_and_a_study_from_anywhere(tmp_path: Path) -> None:
    # Built from a copy: an in-tree build would leave build/ and egg-info in the checkout.
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=_NOT_COPIED)
    dist = tmp_path / "dist"
    isolation = ["--no-build-isolation"] if _setuptools_builds_wheels() else []
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(dist), "."],
        cwd=source,
    )
    (wheel,) = dist.glob("hpsearch-*.whl")
    revisions = sorted(p.name for p in (REPO / "migrations" / "versions").glob("0*.py"))
    packed = zipfile.ZipFile(wheel).namelist()
    for name in ("env.py", "script.py.mako", *(f"versions/{r}" for r in revisions)):
        assert f"search/db/migrations/{name}" in packed, f"{name} is not in the wheel"

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    target = Path(
        run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            cwd=tmp_path,
        ).strip()
    )
    shared = tmp_path / "shared-site-packages"
    shared.mkdir()
    for entry in (Path(p) for p in site.getsitepackages()):
        for item in entry.iterdir():
            if (
                item.name.startswith(("hpsearch", "__editable__", "_hpsearch"))
                or item.suffix == ".pth"
            ):
                continue
            if item.name in ("search", "trainer") or (shared / item.name).exists():
                continue
            (shared / item.name).symlink_to(item)
    (target / "reused.pth").write_text(f"{shared}\n")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-index",
            str(wheel),
        ],
        cwd=tmp_path,
    )

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "study.toml").write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPSEARCH_", "PYTHON"))}
    env["OMP_NUM_THREADS"] = "1"
    where = run(
        [
            str(python),
            "-c",
            "import search, trainer; from search.db.migrate import migrations_dir;"
            " print(search.__file__); print(migrations_dir())",
        ],
        elsewhere,
        env,
    ).split()
    assert where[0].startswith(str(target)), where
    assert where[1] == str(target / "search" / "db" / "migrations"), where
    hpsearch = str(venv / "bin" / "hpsearch")
    with fresh_database() as url:
        out = run([hpsearch, "migrate", "--storage", url], elsewhere, env)
        assert "up to date" in out
        out = run(
            [hpsearch, "run", "study.toml", "--storage", url, "--workers", "1"], elsewhere, env
        )
        assert "best: trial" in out
        out = run(
            [hpsearch, "status", "--study", "from-a-wheel", "--json", "--storage", url],
            elsewhere,
            env,
        )
        assert '"complete": 2' in out
