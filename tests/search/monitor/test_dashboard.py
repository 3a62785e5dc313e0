"""`hpsearch dashboard` on a real study in PostgreSQL, read through its own HTTP API.

The study is made by the real commands: `hpsearch create` with a password in the storage URL,
a worker stopped by SIGTERM mid-trial and another that resumes it, both keeping checkpoints.
"""

from __future__ import annotations

import gzip
import json
import signal
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from search.db.artifacts import DatabaseArtifactStore
from search.db.storage import open_storage
from tests.helpers.cli import hpsearch
from tests.helpers.configs import write_config
from tests.helpers.dashboard_process import DashboardProcess
from tests.helpers.processes import WorkerProcess, ignore_sigint, reported_epochs, wait_for

PASSWORD = "Sw0rdf1sh-dash"
"""In every storage URL of these tests. The server trusts 127.0.0.1, so it is never checked,
only carried everywhere a password would go."""


@dataclass(frozen=True)
class MadeStudy:
    url: str
    """With PASSWORD in it."""
    name: str
    study_id: int
    workdir: Path


@pytest.fixture(scope="module")
def made_study(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> MadeStudy:
    workdir = tmp_path_factory.mktemp("dashboard-study")
    url = sa.engine.make_url(pg_url).set(password=PASSWORD).render_as_string(hide_password=False)
    name = f"dash-{uuid.uuid4().hex[:6]}"
    config = write_config(workdir, name, n_trials=3)
    config.write_text(config.read_text().replace("epochs = 4", "epochs = 6"))
    created = hpsearch("create", config.name, "--storage", url, cwd=workdir)
    assert created.returncode == 0, created.stderr
    keep = ("--keep-checkpoints",)
    first = WorkerProcess(url, name, workdir, grace_s=2, name="first", extra=keep)
    try:
        wait_for(lambda: reported_epochs(url, name, 0) >= 2, 120, "epoch 2", [first])
        first.signal(signal.SIGTERM)
        assert first.wait(30) == 0, first.log()
    finally:
        first.kill()
    second = WorkerProcess(url, name, workdir, grace_s=2, name="second", extra=keep)
    try:
        assert second.wait(240) == 0, second.log()
    finally:
        second.kill()
    study = optuna.load_study(study_name=name, storage=pg_url)
    assert any("resumed_from" in t.user_attrs for t in study.trials)
    return MadeStudy(url, name, study._study_id, workdir)


@pytest.fixture
def dashboard(made_study: MadeStudy) -> Iterator[DashboardProcess]:
    server = DashboardProcess(
        "--storage", made_study.url, "--port", "0", cwd=made_study.workdir, verbose=True
    )
    try:
        server.wait_until_serving()
        yield server
    finally:
        server.kill()


@pytest.mark.slow
def test_the_dashboard_shows_the_study_its_note_provenance_and_checkpoints(
    made_study: MadeStudy, dashboard: DashboardProcess, pg_url: str
) -> None:
    status, body = dashboard.get(f"/api/studies/{made_study.study_id}")
    assert status == 200, body[:500]
    detail = json.loads(body)
    assert detail["name"] == made_study.name
    assert len(detail["trials"]) == 3
    assert detail["objective_names"] == ["val_accuracy"]

    # The study's note: its config and the command that created it, the password masked.
    note = detail["note"]["body"]
    assert f"Created by `hpsearch create {made_study.name}.toml --storage " in note
    assert "postgresql+psycopg://postgres:***@127.0.0.1" in note
    assert 'metric = "val_accuracy"' in note and "[space]" in note

    # The resumed trial says where it resumed from, among its user attributes.
    resumed = [
        json.loads(a["value"])
        for t in detail["trials"]
        for a in t["user_attrs"]
        if a["key"] == "resumed_from"
    ]
    assert resumed and resumed[0]["epoch"] >= 2 and resumed[0]["worker_id"]

    # Kept checkpoints are listed per trial and download from the dashboard, byte for byte.
    trial = detail["trials"][0]
    (artifact,) = trial["artifacts"]
    assert artifact["filename"] == f"{made_study.name}-trial-0-checkpoint.pt"
    status, data = dashboard.get(
        f"/artifacts/{made_study.study_id}/{trial['trial_id']}/{artifact['artifact_id']}"
    )
    assert status == 200
    storage = open_storage(pg_url)
    try:
        with DatabaseArtifactStore(storage).open_reader(artifact["artifact_id"]) as stored:
            assert data == stored.read()
    finally:
        storage.close()
    assert data[:2] == b"PK" and len(data) > 1000  # a torch checkpoint (a zip archive)


@pytest.mark.slow
def test_json_answers_are_compressed_for_browsers(
    made_study: MadeStudy, dashboard: DashboardProcess
) -> None:
    path = f"/api/studies/{made_study.study_id}"
    status, plain = dashboard.get(path)
    assert status == 200 and "Content-Encoding" not in dashboard.last_headers
    status, packed = dashboard.get(path, {"Accept-Encoding": "gzip, deflate, br"})
    assert status == 200 and dashboard.last_headers["Content-Encoding"] == "gzip"
    assert int(dashboard.last_headers["Content-Length"]) == len(packed) < len(plain) / 3
    assert json.loads(gzip.decompress(packed))["name"] == made_study.name


@pytest.mark.slow
def test_no_password_in_the_page_the_api_or_the_logs(
    made_study: MadeStudy, dashboard: DashboardProcess
) -> None:
    study = made_study.study_id
    trials = json.loads(dashboard.get(f"/api/studies/{study}")[1])["trials"]
    paths = [
        "/dashboard",
        f"/dashboard/studies/{study}",
        "/api/meta",
        "/api/studies",
        f"/api/studies/{study}",
        f"/api/studies/{study}/param_importances",
        f"/csv/{study}",
        "/api/studies/999999",  # errors too
        *(
            f"/artifacts/{study}/{t['trial_id']}/{a['artifact_id']}"
            for t in trials
            for a in t["artifacts"]
        ),
    ]
    answers = {path: dashboard.get(path) for path in paths}
    assert answers["/api/studies"][0] == 200 and answers[f"/csv/{study}"][0] == 200
    for path, (_status, body) in answers.items():
        assert PASSWORD.encode() not in body, path
    assert dashboard.stop(signal.SIGINT) == 0  # Ctrl-C: a clean stop
    assert "dashboard stopped" in dashboard.output
    assert "Traceback" not in dashboard.output
    assert PASSWORD not in dashboard.output
    assert "postgres:***@" in dashboard.output  # it does say which database
    assert "GET /api/studies" in dashboard.output  # -v logged the requests (masked too)


@pytest.mark.slow
def test_sigterm_stops_it_and_another_host_is_warned_about(made_study: MadeStudy) -> None:
    server = DashboardProcess(
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        cwd=made_study.workdir,
        env={"HPSEARCH_STORAGE": made_study.url},
    )
    try:
        server.wait_until_serving()
        assert server.get("/api/studies")[0] == 200
        assert server.stop(signal.SIGTERM) == 0
    finally:
        server.kill()
    assert "WARNING: the dashboard has no authentication" in server.output
    assert "can change and delete studies" in server.output
    assert "read-only:" not in server.output  # the owner role may write


@pytest.mark.slow
def test_ctrl_c_stops_it_even_started_in_the_background(made_study: MadeStudy) -> None:
    """A background job of a non-interactive shell inherits SIGINT ignored: the dashboard
    handles SIGINT itself, so Ctrl-C (or `kill -INT`) still stops it, exit 0."""
    server = DashboardProcess(
        "--port",
        "0",
        cwd=made_study.workdir,
        env={"HPSEARCH_STORAGE": made_study.url},
        preexec_fn=ignore_sigint,
    )
    try:
        server.wait_until_serving()
        assert server.stop(signal.SIGINT) == 0
    finally:
        server.kill()
    assert "dashboard stopped" in server.output and "Traceback" not in server.output


@pytest.mark.slow
def test_a_read_only_role_shows_and_says_so(made_study: MadeStudy, pg_url: str) -> None:
    role = f"viewer_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE ROLE "{role}" LOGIN'))
        conn.execute(sa.text(f'GRANT USAGE ON SCHEMA public, hpsearch TO "{role}"'))
        conn.execute(sa.text(f'GRANT SELECT ON ALL TABLES IN SCHEMA public, hpsearch TO "{role}"'))
    url = sa.engine.make_url(pg_url).set(username=role, password=PASSWORD)
    server = DashboardProcess(
        "--storage",
        url.render_as_string(hide_password=False),
        "--port",
        "0",
        cwd=made_study.workdir,
    )
    try:
        server.wait_until_serving()
        status, body = server.get(f"/api/studies/{made_study.study_id}")
        assert status == 200 and len(json.loads(body)["trials"]) == 3
        # Writing is refused by the database, and nothing changes.
        note = json.dumps({"version": 2, "body": "edited"}).encode()
        status, _ = server.send("PUT", f"/api/studies/{made_study.study_id}/note", note)
        assert status == 500
        assert server.stop() == 0
    finally:
        server.kill()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP OWNED BY "{role}"'))
            conn.execute(sa.text(f'DROP ROLE "{role}"'))
        admin.dispose()
    assert "read-only: this database role cannot write" in server.output
    assert PASSWORD not in server.output
    study = optuna.load_study(study_name=made_study.name, storage=pg_url)
    system_attrs = study._storage.get_study_system_attrs(study._study_id)
    assert "edited" not in json.dumps(system_attrs)


@pytest.mark.parametrize(
    "case", ["port-range", "port-text", "host", "unreachable", "artifacts", "port-in-use", "no-db"]
)
def test_bad_input_is_one_line_exit_2(case: str, pg_url: str, tmp_path: Path) -> None:
    args = {
        "port-range": ["--storage", pg_url, "--port", "70000"],
        "port-text": ["--storage", pg_url, "--port", "http"],
        "host": ["--storage", pg_url, "--host", "no-such-host.invalid"],
        "unreachable": ["--storage", f"postgresql+psycopg://u:{PASSWORD}@127.0.0.1:1/x"],
        "artifacts": ["--storage", pg_url, "--artifacts", str(tmp_path / "not-mounted")],
        "port-in-use": ["--storage", pg_url, "--port"],
        "no-db": ["--storage", f"sqlite:///{tmp_path / 'missing.db'}"],
    }[case]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        if case == "port-in-use":
            args.append(str(busy.getsockname()[1]))
        done = hpsearch("dashboard", *args, cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpsearch: error: "), done.stderr
    assert PASSWORD not in done.stderr
    assert not (tmp_path / "missing.db").exists()
    assert not (tmp_path / "not-mounted").exists()


def test_the_incremental_summary_answers_as_optuna_dashboard_does(tmp_path: Path) -> None:
    """The patched per-study summary (search space, attribute names) gives the same answers as
    optuna-dashboard's own, while trials finish, start and keep coming."""
    from wsgiref.util import setup_testing_defaults

    from optuna_dashboard import wsgi

    from search.monitor.dashboard import _scan_each_finished_trial_once

    url = f"sqlite:///{tmp_path / 'summary.db'}"
    study = optuna.create_study(storage=url, study_name="summary", direction="maximize")
    ours, theirs = wsgi(url), wsgi(url)
    assert _scan_each_finished_trial_once(ours)

    def answer(app: object) -> dict:
        environ: dict = {}
        setup_testing_defaults(environ)
        environ["PATH_INFO"] = f"/api/studies/{study._study_id}"
        body = b"".join(app(environ, lambda *_: None))  # type: ignore[operator]
        detail = json.loads(body)
        detail.pop("trials")  # their datetimes are the same rows; the summary is what differs
        return detail

    def ask(objective: object, n: int) -> None:
        study.optimize(objective, n_trials=n)  # type: ignore[arg-type]
        ours._inmemory_cache._trials_last_fetched_at.clear()  # no 2-second trial-list cache
        theirs._inmemory_cache._trials_last_fetched_at.clear()
        assert answer(ours) == answer(theirs)

    ask(lambda t: t.suggest_float("x", 0, 1), 3)
    ask(lambda t: t.suggest_float("x", 0, 1) + t.suggest_int("n", 1, 3), 2)  # the space grows
    running = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    running.set_user_attr("note", "text")  # a new, unsortable attribute on a running trial
    ask(lambda t: t.suggest_float("x", 0, 1), 1)
    study.tell(running, 0.5)
    ask(lambda t: t.suggest_categorical("c", ["a", "b"]), 2)
    assert answer(ours)["union_search_space"] == answer(theirs)["union_search_space"]
    assert {a["key"] for a in answer(ours)["union_user_attrs"]} == {"note"}


@pytest.mark.slow
def test_large_studies_are_named_when_it_starts(
    made_study: MadeStudy, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from search.monitor import dashboard

    storage = open_storage(pg_url)
    try:
        assert (made_study.name, 3) not in dashboard.large_studies(storage)
        monkeypatch.setattr(dashboard, "LARGE_STUDY_TRIALS", 2)
        assert (made_study.name, 3) in dashboard.large_studies(storage)
    finally:
        storage.close()
