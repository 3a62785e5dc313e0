"""docker-compose.yml as Docker would read it, and each service's command line run for real.

Docker itself does not run here: `docker-compose config` (Debian's docker-compose, no daemon
needed) validates and renders the file with .env.example, and each hpsearch service's rendered
command line and environment then runs against a fresh test database, its storage URL pointed at
the test server (same role, same database name rules), in the order `compose up` starts them.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from tests.helpers import REPO
from tests.helpers.cli import cli_env
from tests.helpers.postgres import fresh_database

COMPOSE = REPO / "docker-compose.yml"
STUDY = """
[study]
name = "{name}"
direction = "maximize"
n_trials = 2
sampler = "random"

[pruner]
type = "none"

[task]
name = "digits"
epochs = 1

[space]
lr = {{ type = "float", low = 1e-3, high = 1e-1, log = true }}
"""


def rendered(**env: str) -> dict[str, Any]:
    """`docker-compose config` with .env.example (and `env` over it), parsed."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail("the compose test needs docker-compose: apt-get install -y docker-compose")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HPSEARCH_", "POSTGRES_"))}
    done = subprocess.run(
        [binary, "--env-file", str(REPO / ".env.example"), "-f", str(COMPOSE), "config"],
        cwd=REPO,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_compose_file_is_valid_and_holds_no_password() -> None:
    config = rendered()
    services = config["services"]
    assert set(services) == {"postgres", "migrate", "dashboard", "worker"}
    postgres = services["postgres"]
    assert "pgdata:/var/lib/postgresql/data" in postgres["volumes"][0]
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("dashboard", "worker"):
        condition = services[name]["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully"
    # The dashboard only on this host's loopback, as the read-only role.
    assert [p for p in services["dashboard"]["ports"]] == ["127.0.0.1:8080:8080/tcp"]
    assert "hpsearch_viewer@" in services["dashboard"]["environment"]["HPSEARCH_STORAGE"]
    # Workers: a GPU each, no fixed name or host port, so that --scale worker=N works.
    worker = services["worker"]
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"] and device["count"] == 1
    assert "container_name" not in worker and "ports" not in worker
    assert "hpsearch_worker@" in worker["environment"]["HPSEARCH_STORAGE"]

    # Every password comes from the env file: the compose file names none.
    text = COMPOSE.read_text()
    for line in text.splitlines():
        if re.search(r"PASSWORD\w*:", line):
            assert re.search(r"PASSWORD\w*: \$\{\w+:\?", line), line
    for value in re.findall(r"PASSWORD=(.+)", (REPO / ".env.example").read_text()):
        assert value not in text
    # No password in any storage URL either (libpq reads PGPASSWORD).
    for service in services.values():
        url = service.get("environment", {}).get("HPSEARCH_STORAGE", "")
        assert ":" not in url.split("://", 1)[-1].split("@")[0]


def on_test_server(storage: str, admin_url: str, *, as_owner: bool = False) -> str:
    """A service's storage URL, pointed at the test server's database (its role kept)."""
    service, admin = sa.engine.make_url(storage), sa.engine.make_url(admin_url)
    user = admin.username if as_owner else service.username
    return admin.set(username=user, password=None).render_as_string(hide_password=False)


def run_service(service: dict[str, Any], storage: str, cwd: Path, **kwargs: Any) -> Any:
    env = cli_env()
    env.update({k: str(v) for k, v in service["environment"].items()})
    env.update(HPSEARCH_STORAGE=storage, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "search", *service["command"]]
    if kwargs.pop("background", False):
        return subprocess.Popen(command, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, **kwargs)


@pytest.mark.slow
@pytest.mark.postgres
def test_each_service_runs_its_command_line(tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    worker_role, viewer_role = f"hps_cw_{suffix}", f"hps_cv_{suffix}"
    study = f"compose-{suffix}"
    services = rendered(
        HPSEARCH_WORKER_ROLE=worker_role, HPSEARCH_VIEWER_ROLE=viewer_role, HPSEARCH_STUDY=study
    )["services"]
    with fresh_database(worker_role, viewer_role) as url:
        migrate = services["migrate"]
        done = run_service(
            migrate,
            on_test_server(migrate["environment"]["HPSEARCH_STORAGE"], url, as_owner=True),
            tmp_path,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert f"role {worker_role} created" in done.stdout
        for password in re.findall(r"PASSWORD=(.+)", (REPO / ".env.example").read_text()):
            assert password not in done.stdout + done.stderr

        worker = services["worker"]
        as_worker = on_test_server(worker["environment"]["HPSEARCH_STORAGE"], url)
        (tmp_path / "study.toml").write_text(STUDY.format(name=study))
        # The worker role may create a study too (README runs `create` in the migrate service).
        create = {**worker, "command": ["create", "study.toml"]}
        done = run_service(create, as_worker, tmp_path, timeout=120)
        assert done.returncode == 0, done.stderr
        done = run_service(worker, as_worker, tmp_path, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            states = conn.execute(sa.text("SELECT state FROM trials")).scalars().all()
        engine.dispose()
        assert sorted(states) == ["COMPLETE", "COMPLETE"]


@pytest.mark.slow
@pytest.mark.postgres
def test_the_dashboard_service_serves_with_the_viewer_role(tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    viewer_role = f"hps_cv_{suffix}"
    services = rendered(HPSEARCH_VIEWER_ROLE=viewer_role)["services"]
    with fresh_database(f"hps_cw_{suffix}", viewer_role) as url:
        migrate = services["migrate"]
        migrate["command"][migrate["command"].index("--worker-role") + 1] = f"hps_cw_{suffix}"
        done = run_service(
            migrate,
            on_test_server(migrate["environment"]["HPSEARCH_STORAGE"], url, as_owner=True),
            tmp_path,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        dashboard = services["dashboard"]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        command = list(dashboard["command"])
        command[command.index("--port") + 1] = str(port)  # 8080 may be taken on this machine
        command[command.index("--host") + 1] = "127.0.0.1"
        process = run_service(
            {**dashboard, "command": command},
            on_test_server(dashboard["environment"]["HPSEARCH_STORAGE"], url),
            tmp_path,
            background=True,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                        assert r.status == 200
                        break
                except OSError:
                    assert process.poll() is None, process.stderr.read() if process.stderr else ""
                    assert time.monotonic() < deadline, "the dashboard did not answer in 60 s"
                    time.sleep(0.5)
        finally:
            process.terminate()
            process.wait(10)
