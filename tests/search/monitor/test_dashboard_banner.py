"""The budget and the paused trials at the top of a study's dashboard page (issue 30, item 10),
in headless Chromium (the `browser` fixture), and kept up to date as the study runs; and the
line's parts (`banner_items`) without a browser."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from search.db import budget
from search.db.storage import open_storage
from search.db.tables import trial_rungs, trials
from search.monitor.dashboard_banner import BANNER_ID, SCRIPT, StudyBanner, banner_items
from search.monitor.status import BestTrial, PausedTrial, StudyStatus
from search.study.parse_config import parse_config
from search.study.studies import create_study
from tests.helpers.browser import LARGE_PAGE_WAIT_S, wait_until
from tests.helpers.dashboard_process import DashboardProcess
from tests.helpers.postgres import migrated

BANNER_WAIT_S = 30
"""The page reads the line every 5 s; room for a busy host."""


def asha_study(url: str, name: str) -> int:
    """An hpsearch study, ASHA with a budget of 100 epochs, 40 spent: 3 complete trials and 3
    paused at a rung (the best of them, trial 5, at rung 3)."""
    storage = open_storage(url)
    try:
        config = parse_config(
            {
                "study": {"name": name, "sampler": "random", "budget_epochs": 100},
                "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 3},
                "task": {"name": "digits", "epochs": 9},
                "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
            }
        )
        study, _ = create_study(storage, config)
        optuna_study = optuna.load_study(study_name=name, storage=storage.optuna_storage())
        x = FloatDistribution(0.0, 1.0)
        for i in range(6):
            paused = i >= 3
            values = {e: 0.5 + 0.01 * e + 0.02 * i for e in range(1, 4 if paused else 10)}
            optuna_study.add_trial(
                create_trial(
                    state=TrialState.RUNNING if paused else TrialState.COMPLETE,
                    value=None if paused else values[9],
                    params={"x": i / 10},
                    distributions={"x": x},
                    intermediate_values=values,
                )
            )
        budget.ensure_counter(storage, study.study_id)
        budget.reserve_epochs(storage, study.study_id, 100, 40)
        with storage.transaction() as conn:
            ids = dict(
                conn.execute(
                    sa.select(trials.c.number, trials.c.trial_id).where(
                        trials.c.study_id == study.study_id
                    )
                ).all()
            )
            conn.execute(
                sa.update(trials)
                .where(trials.c.study_id == study.study_id, trials.c.number >= 3)
                .values(state="WAITING")
            )
            conn.execute(
                sa.insert(trial_rungs),
                [
                    {
                        "trial_id": ids[n],
                        "level": 1 if n < 5 else 3,
                        "study_id": study.study_id,
                        "bracket": 0,
                        "value": 0.6 + 0.01 * n,
                        "paused": True,
                    }
                    for n in (3, 4, 5)
                ],
            )
        return study.study_id
    finally:
        storage.close()


def banner_text(driver: Any) -> str:
    found = driver.find_elements("id", BANNER_ID)
    return found[0].text if found else ""


@pytest.mark.slow
def test_the_budget_and_paused_trials_top_the_study_page_and_follow_the_study(
    browser: Any,
    pg_url: str,
    tmp_path: Path,
) -> None:
    name = f"banner-{uuid.uuid4().hex[:6]}"
    study_id = asha_study(pg_url, name)
    server = DashboardProcess("--storage", pg_url, "--port", "0", cwd=tmp_path)
    try:
        base = server.wait_until_serving(timeout=LARGE_PAGE_WAIT_S)
        browser.get(f"{base}/dashboard/studies/{study_id}")
        wait_until(
            browser,
            lambda d: (
                "Budget: 40/100 epochs (60 left)" in banner_text(d)
                and f"{name} (id={study_id})" in d.find_element("tag name", "body").text
            ),
            "the budget line above the study's page",
            BANNER_WAIT_S,
        )
        text = banner_text(browser)
        assert "Paused trials: 3, leading: trial 5 val_accuracy 0.65 at rung 3" in text
        assert "Best finished: trial 2 val_accuracy 0.63" in text
        # Where a user looks first: at the very top, above optuna-dashboard's own bar, which
        # it does not hide.
        line = browser.find_element("id", BANNER_ID).rect
        assert line["y"] == 0 and line["height"] > 0
        for fixed in ("header", ".MuiDrawer-paper"):  # the app bar, the side bar
            assert browser.find_element("css selector", fixed).rect["y"] >= line["height"]
        assert browser.save_screenshot(str(tmp_path / "banner.png"))
        print(f"screenshot: {tmp_path / 'banner.png'}")

        # The study runs on: 10 more epochs spent, trial 5 promoted (no longer paused).
        storage = open_storage(pg_url)
        try:
            budget.reserve_epochs(storage, study_id, 100, 10)
            with storage.transaction() as conn:
                conn.execute(
                    sa.update(trial_rungs)
                    .where(trial_rungs.c.study_id == study_id, trial_rungs.c.level == 3)
                    .values(paused=False)
                )
        finally:
            storage.close()
        wait_until(
            browser,
            lambda d: (
                "Budget: 50/100 epochs (50 left)" in banner_text(d)
                and "Paused trials: 2, leading: trial 4" in banner_text(d)
            ),
            "the line following the study (without a reload)",
            BANNER_WAIT_S,
        )

        # On the study's other pages too; not on the list of studies.
        browser.get(f"{base}/dashboard/studies/{study_id}/trials")
        wait_until(browser, lambda d: "Budget:" in banner_text(d), "the line on the trial list")
        browser.get(f"{base}/dashboard")
        wait_until(
            browser,
            lambda d: (
                name in d.find_element("tag name", "body").text
                and not banner_text(d)
                and d.execute_script("return document.body.style.paddingTop") == ""
            ),
            "the study list without the line (nor its room)",
        )
    finally:
        server.kill()


def status(**changes: Any) -> StudyStatus:
    base: dict[str, Any] = {
        "study": "s",
        "direction": "maximize",
        "metric": "acc",
        "n_trials": None,
        "complete": 1,
        "pruned": 0,
        "failed": 0,
        "running": 2,
        "waiting": 0,
        "paused": 0,
        "budget": None,
        "best": None,
        "live_workers": 2,
        "running_trials": [],
    }
    return StudyStatus(**(base | changes))


def test_the_line_says_budget_paused_best_and_what_runs() -> None:
    assert banner_items(status()) == []  # no budget, no pauses: optuna-dashboard's page alone
    spent = {"epochs": {"budget": 100, "used": 40, "left": 60}}
    items = banner_items(
        status(
            budget=spent,
            paused=3,
            leading_paused=PausedTrial(5, 0.98765, 3),
            best=BestTrial(2, 0.9, {}),
        )
    )
    assert [(i["label"], i["text"]) for i in items] == [
        ("Budget", "40/100 epochs (60 left)"),
        ("Paused trials", "3, leading: trial 5 acc 0.9877 at rung 3 (waits for promotion)"),
        ("Best finished", "trial 2 acc 0.9"),
        ("Now", "2 running, 0 queued, 2 live worker(s)"),
    ]
    over = banner_items(
        status(budget={"epochs": {"budget": 100, "used": 100, "left": 0}}, running=0)
    )
    assert over[-1] == {"label": "Study", "text": "over (hpsearch extend gives it more)"}
    assert over[1] == {"label": "Best finished", "text": "none yet"}
    # Promotion-based ASHA without a budget: the paused trials, none at the moment.
    asha = banner_items(status(), pauses=True)
    assert asha[0] == {"label": "Paused trials", "text": "0"}


def call(app: Any, path: str) -> tuple[str, dict[str, str], bytes]:
    environ = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "HTTP_IF_MODIFIED_SINCE": "x"}
    said: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        said.update(status=status, headers=dict(headers))

    body = b"".join(app(environ, start_response))
    return said["status"], said["headers"], body


def test_the_page_gets_the_script_and_the_line_is_json(tmp_path: Path) -> None:
    """Without a browser: the script is added to optuna-dashboard's page (its length fixed),
    conditional requests are answered in full (a cached page would lack it), other answers
    pass as they are, and a study hpsearch did not make has no line."""
    page = b"<html><head><title>x</title></head><body></body></html>"
    seen: list[dict[str, Any]] = []

    def dashboard(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(environ)
        kind = "text/html" if environ["PATH_INFO"].startswith("/dashboard") else "text/plain"
        start_response("200 OK", [("Content-Type", kind), ("Content-Length", str(len(page)))])
        return [page]

    storage = open_storage(migrated(f"sqlite:///{tmp_path / 'd.db'}"))
    try:
        plain = optuna.create_study(study_name="plain", storage=storage.optuna_storage())
        app = StudyBanner(dashboard, storage)
        status, headers, body = call(app, "/dashboard/studies/1")
        assert (
            status == "200 OK" and f'<script defer src="{SCRIPT}"></script></head>'.encode() in body
        )
        assert headers["Content-Length"] == str(len(body))
        assert "HTTP_IF_MODIFIED_SINCE" not in seen[-1]
        assert call(app, "/api/studies/1")[2] == page
        status, headers, script = call(app, SCRIPT)
        assert headers["Content-Type"] == "application/javascript" and BANNER_ID.encode() in script
        study_id = plain._study_id
        assert call(app, f"/hpsearch/api/studies/{study_id}/progress")[2] == b'{"items": []}'
        assert call(app, "/hpsearch/api/studies/999/progress")[2] == b'{"items": []}'
    finally:
        storage.close()
