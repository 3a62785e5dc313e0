"""`hpsearch dashboard` in a real browser: Debian's headless Chromium, driven by Selenium
through Debian's chromedriver (no browser download: both paths are given, and Selenium
Manager is told to stay offline; the `browser` fixture, `tests.helpers.browser`).

The study has complete and pruned trials with intermediate values; the page must show its
name, its trial count and the metric's name on the history chart. Screenshots are saved in
the test's temporary directory (their paths are printed: `pytest -s` shows them).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from search.db.storage import open_storage
from search.study.note import save_study_note
from search.study.parse_config import load_config
from search.study.studies import create_study
from tests.helpers.browser import LARGE_PAGE_WAIT_S, wait_until
from tests.helpers.configs import write_config
from tests.helpers.dashboard_process import DashboardProcess
from tests.helpers.postgres import fresh_database

pytestmark = pytest.mark.slow

PASSWORD = "Br0wser-secret"
N_TRIALS = 12
LARGE_TRIALS = 10_000
LARGE_CHART_WAIT_S = 60
"""Not the 10 s target (bench/systems/dashboard.py measures it: 9 s at load 4-6 on this 2-core
machine): room for a loaded one. Before the page was fed a summary, it was not drawn in 120 s
at load 12-20, 19 s at load 2.5."""


def make_study(url: str, name: str, workdir: Path) -> int:
    """An hpsearch study with complete and pruned trials (every third is pruned at epoch 1)."""
    storage = open_storage(url)
    try:
        study, _ = create_study(storage, load_config(write_config(workdir, name, N_TRIALS)))
        save_study_note(storage, study, ["create", f"{name}.toml", "--storage", url])
        optuna_study = optuna.load_study(study_name=name, storage=storage.optuna_storage())
        lr = FloatDistribution(1e-4, 3e-1, log=True)
        for i in range(N_TRIALS):
            pruned = i % 3 == 2
            values = {epoch: 0.5 + 0.03 * epoch + 0.01 * i for epoch in range(1, 5)}
            if pruned:
                values = {1: values[1]}
            optuna_study.add_trial(
                create_trial(
                    state=TrialState.PRUNED if pruned else TrialState.COMPLETE,
                    value=values[max(values)],
                    params={"lr": 10 ** (-4 + 3 * i / N_TRIALS)},
                    distributions={"lr": lr},
                    intermediate_values=values,
                )
            )
        return study.study_id
    finally:
        storage.close()


def test_the_dashboard_page_shows_the_study_in_chromium(
    browser: Any, pg_url: str, tmp_path: Path
) -> None:
    name = f"browser-{uuid.uuid4().hex[:6]}"
    url = sa.engine.make_url(pg_url).set(password=PASSWORD).render_as_string(hide_password=False)
    study_id = make_study(url, name, tmp_path)
    server = DashboardProcess("--storage", url, "--port", "0", cwd=tmp_path)
    try:
        base = server.wait_until_serving()

        browser.get(f"{base}/dashboard/studies/{study_id}")
        y_titles = wait_until(
            browser,
            lambda d: [
                e.text
                for e in d.find_elements("css selector", ".js-plotly-plot .ytitle")
                if e.text == "val_accuracy"
            ],
            "the history chart with val_accuracy on its axis",
        )
        assert y_titles
        page = browser.find_element("tag name", "body").text
        assert f"{name} (id={study_id})" in page
        assert "History" in page
        history = tmp_path / "dashboard-history.png"
        assert browser.save_screenshot(str(history))
        print(f"screenshot: {history}")

        browser.get(f"{base}/dashboard/studies/{study_id}/trials")
        wait_until(
            browser,
            lambda d: f"{N_TRIALS} Trials" in d.find_element("tag name", "body").text,
            f"the trial list ({N_TRIALS} Trials)",
        )
        trials_page = browser.find_element("tag name", "body").text
        assert "Pruned" in trials_page and "Complete" in trials_page
        assert PASSWORD not in trials_page and PASSWORD not in browser.page_source
        trial_list = tmp_path / "dashboard-trials.png"
        assert browser.save_screenshot(str(trial_list))
        print(f"screenshot: {trial_list}")
        assert history.stat().st_size > 10_000 and trial_list.stat().st_size > 10_000

        browser.get(f"{base}/dashboard/studies/{study_id}/note")
        wait_until(
            browser,
            lambda d: "Created by" in d.find_element("tag name", "body").text,
            "the study's note",
        )
        note = browser.find_element("tag name", "body").text
        assert "postgres:***@127.0.0.1" in note and PASSWORD not in note
    finally:
        server.kill()


def legend_of_intermediate_values(driver: Any) -> list[str]:
    return [
        e.get_attribute("textContent") or ""
        for e in driver.find_elements("css selector", "#graph-intermediate-values .legendtext")
    ]


def test_paused_trials_curves_are_in_the_intermediate_values_chart(
    browser: Any, pg_url: str, tmp_path: Path
) -> None:
    """An ASHA study's paused trials are WAITING in Optuna's table, with the values they
    reported: optuna-dashboard's chart left them out (issue 30: 2 of 18 shown, those running)."""
    name = f"paused-{uuid.uuid4().hex[:6]}"
    study_id = make_study(pg_url, name, tmp_path)
    storage = open_storage(pg_url)
    try:
        optuna_study = optuna.load_study(study_name=name, storage=storage.optuna_storage())
        lr = FloatDistribution(1e-4, 3e-1, log=True)
        for i in range(3):
            optuna_study.add_trial(
                create_trial(
                    state=TrialState.RUNNING,
                    params={"lr": 1e-3 * (i + 1)},
                    distributions={"lr": lr},
                    intermediate_values={1: 0.6 + 0.01 * i, 2: 0.7 + 0.01 * i},
                )
            )
        with storage.transaction() as conn:  # paused at a rung, as search.db.pauses leaves them
            conn.execute(
                sa.text("UPDATE trials SET state = 'WAITING' WHERE study_id = :s AND number >= :n"),
                {"s": study_id, "n": N_TRIALS},
            )
    finally:
        storage.close()
    server = DashboardProcess("--storage", pg_url, "--port", "0", cwd=tmp_path)
    try:
        base = server.wait_until_serving(timeout=LARGE_PAGE_WAIT_S)  # a busy CI host
        browser.get(f"{base}/dashboard/studies/{study_id}")
        paused = [f"trial #{n} (paused)" for n in range(N_TRIALS, N_TRIALS + 3)]
        legend = wait_until(
            browser,
            lambda d: (
                (names := legend_of_intermediate_values(d))
                and all(p in names for p in paused)
                and names
            ),
            "the paused trials' curves in the intermediate-values chart",
        )
        # the others as optuna-dashboard draws them: one named line per trial
        assert "trial #0" in [x.strip() for x in legend] and len(legend) == N_TRIALS + 3
        assert browser.save_screenshot(str(tmp_path / "paused.png"))
    finally:
        server.kill()


HISTORY_POINTS = """
for (const plot of document.querySelectorAll('.js-plotly-plot')) {
  const y = plot.querySelector('.ytitle'), x = plot.querySelector('.xtitle');
  if (y && y.textContent === 'val_accuracy' && x && x.textContent === 'Trial'
      && document.querySelector('#graph-intermediate-values .scatterlayer .trace'))
    return plot.querySelectorAll('.scatterlayer .point').length;
}
return 0;
"""
"""The points of the history chart once it shows the metric and the intermediate values their
curves (0 until then)."""


@pytest.mark.postgres
def test_a_study_of_10000_trials_opens_with_every_trial_reachable(
    browser: Any, tmp_path: Path
) -> None:
    """Issue 29: the study page of 10,000 trials is drawn (a summary of its trials, said on
    the page), and the trial list has every trial, a trial left out of the summary among them;
    moving between them within the page switches between the summary and every trial."""
    import time

    from bench.systems.dashboard import make_study as make_large_study

    with fresh_database() as url:
        study_id, _ = make_large_study(url, LARGE_TRIALS)  # bulk: seconds
        server = DashboardProcess("--storage", url, "--port", "0", cwd=tmp_path)
        try:
            base = server.wait_until_serving(timeout=LARGE_PAGE_WAIT_S)
            # the server has read the study, as it does in the background when it starts
            assert server.get(f"/api/studies/{study_id}?after={LARGE_TRIALS}")[0] == 200

            began = time.monotonic()
            browser.get(f"{base}/dashboard/studies/{study_id}")
            points = wait_until(
                browser,
                lambda d: d.execute_script(HISTORY_POINTS),
                "the history chart with val_accuracy on its axis, and the intermediate values",
                LARGE_CHART_WAIT_S,
            )
            print(f"10,000 trials: the study page drawn in {time.monotonic() - began:.1f} s")
            status, body = server.get(f"/api/studies/{study_id}?after=0&hpsearch_summary=1")
            summary = {t["number"] for t in json.loads(body)["trials"]}
            assert status == 200 and 300 < len(summary) < 1000
            assert points == len(summary)  # pruned trials included: every trial has a value
            banner = wait_until(
                browser,
                lambda d: d.find_element("id", "hpsearch-summary").text,
                "the banner saying what the page shows",
            )
            assert f"This page shows {len(summary)} of the study's 10,000 trials" in banner
            assert "every trial (10,000)" in banner
            link = browser.find_element("css selector", "#hpsearch-summary a")
            trial_list = link.get_attribute("href")
            assert trial_list.endswith(f"/dashboard/studies/{study_id}/trials")
            assert browser.save_screenshot(str(tmp_path / "large-history.png"))

            # within the page (the drawer): the trial list gets every trial, and the study's
            # page its summary again
            drawer = "a[href$='/dashboard/studies/{}{}']:not(#hpsearch-summary a)"
            browser.find_element("css selector", drawer.format(study_id, "/trials")).click()
            wait_until(
                browser,
                lambda d: (
                    f"{LARGE_TRIALS} Trials" in d.find_element("tag name", "body").text
                    and not d.find_elements("id", "hpsearch-summary")
                ),
                f"the trial list of every trial ({LARGE_TRIALS} Trials), no banner",
                LARGE_PAGE_WAIT_S,
            )
            browser.find_element("css selector", drawer.format(study_id, "")).click()
            wait_until(
                browser,
                lambda d: (
                    d.execute_script(HISTORY_POINTS) == len(summary)
                    and d.find_elements("id", "hpsearch-summary")
                ),
                "the study's page from its summary again",
                LARGE_PAGE_WAIT_S,
            )

            left_out = next(n for n in range(4321, LARGE_TRIALS) if n not in summary)
            browser.get(f"{trial_list}?numbers={left_out}")
            wait_until(
                browser,
                lambda d: (
                    f"{LARGE_TRIALS} Trials" in (text := d.find_element("tag name", "body").text)
                    and f"Trial {left_out} (trial_id=" in text
                    and "Intermediate Values" in text
                ),
                f"trial {left_out} in the list of every trial",
                LARGE_PAGE_WAIT_S,
            )
            assert not browser.find_elements("id", "hpsearch-summary")
            assert browser.save_screenshot(str(tmp_path / "large-trial.png"))
        finally:
            server.kill()
