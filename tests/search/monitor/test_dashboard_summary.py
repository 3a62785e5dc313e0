"""The summary of a large study's trials that `hpsearch dashboard` feeds its study page (what
the page draws from it is checked in Chromium at 10,000 trials: test_dashboard_browser.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from search.monitor import dashboard_summary
from search.monitor.dashboard_summary import (
    BEST,
    LATEST,
    PAUSED,
    SAMPLE,
    TrialSummary,
    summarize_trials,
)


def trial(number: int, state: TrialState, value: float | None, steps: int = 0) -> FrozenTrial:
    made = create_trial(
        state=state,
        value=value if state == TrialState.COMPLETE else None,
        params={"x": 0.5},
        distributions={"x": FloatDistribution(0, 1)},
        intermediate_values={s: (value or 0.0) * s / steps for s in range(1, steps + 1)},
    )
    made.number = number
    return made


def test_the_summary_keeps_the_best_the_latest_the_running_and_the_leading_paused() -> None:
    rng = random.Random(0)
    n = 10_000
    trials, values = [], {}
    for number in range(n):
        value = rng.random()
        if number % 100 == 7:  # paused at a rung, with a value reported
            state = TrialState.WAITING
        elif number in (4_000, 9_990):
            state, value = TrialState.RUNNING, None
        elif number % 3:
            state = TrialState.PRUNED
        else:
            state = TrialState.COMPLETE
            values[number] = value
        trials.append(trial(number, state, value, steps=3 if value is not None else 0))
    trials.append(trial(n, TrialState.WAITING, None))  # queued: nothing reported
    shown = summarize_trials(trials, ["maximize"])
    kept = set(shown.numbers)

    assert shown.numbers == sorted(kept) and shown.total == n + 1
    best = sorted(values, key=lambda k: -values[k])[:BEST]
    assert set(best) <= kept
    incumbent, records = -1.0, []
    for number in sorted(values):
        if values[number] > incumbent:
            incumbent = values[number]
            records.append(number)
    assert set(records) <= kept  # the history chart's best-value line is the study's own
    assert set(range(n + 1 - LATEST, n + 1)) <= kept
    assert {4_000, 9_990} <= kept
    paused = {t.number: t.intermediate_values[3] for t in trials if t.number % 100 == 7}
    leaders = sorted(paused, key=lambda k: -paused[k])[:PAUSED]
    assert set(leaders) <= kept
    sample = set(range(0, n + 1, 34))  # every 34th: about SAMPLE trials
    assert sample <= kept
    others = set(paused) - set(leaders) - sample - set(range(n + 1 - LATEST, n + 1))
    assert others and not others & kept
    assert len(kept) <= BEST + len(records) + LATEST + 2 + PAUSED + SAMPLE + 1
    assert shown.description.startswith(f"This page shows {len(kept):,} of the study's 10,001")
    assert "the 100 best" in shown.description and "every running one (2)" in shown.description
    assert "the 50 leading paused ones" in shown.description
    assert shown.description.endswith("every 34th trial. The trial list has every trial.")


def test_minimizing_keeps_the_lowest_and_several_objectives_the_front() -> None:
    trials = [trial(i, TrialState.COMPLETE, float(i % 997)) for i in range(5_000)]
    lowest = summarize_trials(trials, ["minimize"])
    assert {i for i in range(5_000) if i % 997 < 15} <= set(lowest.numbers)
    several = summarize_trials(trials, ["minimize", "maximize"], front=[3, 1_234])
    assert {3, 1_234} <= set(several.numbers)
    assert "2 of the Pareto front" in several.description


def ask(app: Any, study_id: int, query: str = "") -> tuple[str, dict[str, str], dict[str, Any]]:
    from wsgiref.util import setup_testing_defaults

    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    environ.update(PATH_INFO=f"/api/studies/{study_id}", QUERY_STRING=query)
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc: Any = None) -> None:
        answer.update(status=status, headers=dict(headers))

    body = b"".join(app(environ, start_response))
    return answer["status"], answer["headers"], json.loads(body)


@pytest.fixture
def large_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """A SQLite study of 60 trials, "large" for summaries of 5 best, 5 latest, 10 sampled."""
    monkeypatch.setattr(dashboard_summary, "BEST", 5)
    monkeypatch.setattr(dashboard_summary, "LATEST", 5)
    monkeypatch.setattr(dashboard_summary, "SAMPLE", 10)
    url = f"sqlite:///{tmp_path / 'large.db'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=url, study_name="large", direction="minimize")
    study.set_user_attr("owner", "test")

    def objective(t: optuna.Trial) -> float:
        x = t.suggest_float("x", -3, 3)
        t.report(x * x + 1, 1)
        t.set_user_attr("worker", "w1")
        return x * x

    study.optimize(objective, n_trials=58)
    study.ask()  # running
    study.enqueue_trial({"x": 0.0})  # queued
    return url, study._study_id


def test_the_summary_answer_is_optuna_dashboards_answer_with_fewer_trials(
    large_study: tuple[str, int],
) -> None:
    from optuna_dashboard import wsgi

    url, study_id = large_study
    storage = optuna.storages.get_storage(url)
    app = wsgi(storage)
    summary = TrialSummary(app, storage, above=50)
    assert summary.available
    status, headers, full = ask(app, study_id)
    assert status.startswith("200") and len(full["trials"]) == 60

    status, headers, shown = ask(summary, study_id, "after=0&hpsearch_summary=1")
    assert status.startswith("200")
    assert headers["X-Hpsearch-Trials"] == "60"
    numbers = [t["number"] for t in shown["trials"]]
    assert headers["X-Hpsearch-Summary"].startswith(f"This page shows {len(numbers)} of the")
    assert 10 < len(numbers) < 40 and numbers == sorted(numbers)
    by_number = {t["number"]: t for t in full["trials"]}
    assert shown["trials"] == [by_number[n] for n in numbers]  # optuna-dashboard's own form
    assert 58 in numbers  # the running trial
    best = min((t for t in full["trials"] if t["state"] == "Complete"), key=lambda t: t["values"])
    assert best["number"] in numbers
    assert {k: v for k, v in shown.items() if k != "trials"} == {
        k: v for k, v in full.items() if k != "trials"
    }

    # every other question: optuna-dashboard's answer, with the trial count
    for query in ("", "after=0", "after=3&hpsearch_summary=1"):
        status, headers, answer = ask(summary, study_id, query)
        assert "X-Hpsearch-Summary" not in headers and headers["X-Hpsearch-Trials"] == "60"
        assert answer["trials"] == full["trials"][int(query[6:7] or 0) :]
    status, headers, _ = ask(summary, study_id + 1, "after=0&hpsearch_summary=1")
    assert status.startswith("404") and "X-Hpsearch-Trials" not in headers
    small = TrialSummary(app, storage, above=60)  # not more than `above`: every trial
    status, headers, answer = ask(small, study_id, "after=0&hpsearch_summary=1")
    assert "X-Hpsearch-Summary" not in headers and answer["trials"] == full["trials"]
