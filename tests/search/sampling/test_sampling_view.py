"""TPE sampled in memory (the study's mirror, a batch per lock): the same points as Optuna's own
TPE on the same history, and trials that Optuna and optuna-dashboard read unchanged."""

from __future__ import annotations

import io
import json
import math

import optuna
import optuna_dashboard

from search.db.storage import open_storage
from search.sampling.mirror import StudyMirror
from search.sampling.samplers import make_sampler, suggest
from search.study.studies import create_study
from search.worker.loop import Worker
from tests.helpers.configs import tpe_config
from tests.helpers.objectives import curve


def test_tpe_studies_stay_optuna_studies(storage_url: str, study_name: str) -> None:
    config = tpe_config(study_name, 18)
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, config)
    assert Worker(storage, ref, run_trial=curve, grace_s=5, progress=False).run() == 0

    # optuna.load_study reads every trial whole: numbered 0..17, params in their ranges.
    study = optuna.load_study(study_name=study_name, storage=storage_url)
    trials = study.get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == list(range(18))
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in trials)
    for t in trials:
        assert set(t.params) == {"x", "lr", "width", "act"}
        assert 1e-4 <= t.params["lr"] <= 1e-1 and t.params["act"] in ("relu", "gelu")
        assert t.distributions["lr"] == optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)

    # optuna-dashboard's API serves the study and its trials.
    app = optuna_dashboard.wsgi(storage_url)
    body = _get(app, f"/api/studies/{ref.study_id}?after=0")
    assert len(body["trials"]) == 18
    assert {p["name"] for p in body["trials"][0]["params"]} == {"x", "lr", "width", "act"}

    # The mirror hands TPE the history Optuna's storage does: the next point is the same.
    mirror = StudyMirror(open_storage(storage_url), ref)
    mirror.refresh()
    ours = optuna.Trial(mirror.study(make_sampler(config, 18)), mirror.new_trial(18))
    mine = {p.name: suggest(ours, p) for p in config.space}
    copy = optuna.create_study(direction="maximize")
    for t in trials:
        copy.add_trial(t)
    copy.sampler = make_sampler(config, 18)
    theirs = optuna.Trial(copy, copy._storage.create_new_trial(copy._study_id))
    assert theirs.number == 18
    expected = {p.name: suggest(theirs, p) for p in config.space}
    assert mine.keys() == expected.keys()
    for name in mine:
        if isinstance(mine[name], float):
            assert math.isclose(mine[name], expected[name], rel_tol=1e-12), name
        else:
            assert mine[name] == expected[name], name


def _get(app: object, path: str) -> dict:
    route, _, query = path.partition("?")
    status: list[str] = []
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": route,
        "QUERY_STRING": query,
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.input": io.BytesIO(),
        "wsgi.errors": io.StringIO(),
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": True,
    }
    chunks = app(environ, lambda s, _headers, _exc=None: status.append(s))  # type: ignore[operator]
    assert status[0].startswith("200"), status
    return json.loads(b"".join(chunks))
