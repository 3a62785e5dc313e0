"""A screenshot of the MLflow UI showing a study's runs, for README's "Tracking" section.

Starts a real `mlflow server` (PostgreSQL backend store, a fresh database), runs a small
study with `[tracking] mlflow` (one worker, tests/helpers/tiny_task.py, median pruning, one
trial preempted by SIGTERM and resumed by a second worker), opens the experiment's page in
headless Chromium and saves what it renders:

    python -m bench.systems.mlflow_screenshot --out docs/mlflow-runs.png
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path

from mlflow.tracking import MlflowClient

from search.db.storage import open_storage
from search.study.studies import create_study
from tests.helpers.postgres import fresh_database, migrated
from tests.helpers.trackers import (
    MlflowServer,
    run_study_with_a_preempted_trial,
    tracked_config,
)

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def screenshot(url: str, out: Path, wait_for: str) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download a browser
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1600,900",
    ):
        options.add_argument(argument)
    service = Service(executable_path=CHROMEDRIVER, popen_kw={"start_new_session": True})
    driver = webdriver.Chrome(service=service, options=options)
    try:
        driver.get(url)
        deadline = time.monotonic() + 90
        while wait_for not in driver.find_element("tag name", "body").text:
            if time.monotonic() > deadline:
                raise SystemExit(f"the MLflow UI did not show {wait_for!r} at {url}")
            time.sleep(0.5)
        # The assistant panel closed, the study's parent run expanded to show its trials.
        driver.execute_script(
            "document.querySelector('button[aria-label=Close]')?.click();"
            "const a = [...document.querySelectorAll('a')]"
            "  .find(a => a.textContent.startsWith('study '));"
            "let row = a; for (let i = 0; i < 6 && !row.querySelector('button'); i++)"
            "  row = row.parentElement;"
            "row.querySelector('button').click();"
        )
        time.sleep(3)  # rows and columns settle
        driver.save_screenshot(str(out))
        # The chart view: every trial's curve, step = epoch.
        driver.execute_script(
            "document.querySelector('input[name=runs-view-mode][value=CHART]')"
            "  .closest('label').click();"
        )
        time.sleep(5)
        driver.save_screenshot(str(out.with_name(out.stem + "-charts.png")))
    finally:
        try:
            driver.quit()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(service.process.pid, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/mlflow-runs.png"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mlflow-screenshot-"))
    name = f"digits-demo-{uuid.uuid4().hex[:4]}"
    with fresh_database() as backend, fresh_database() as study_db:
        url = migrated(study_db)
        server = MlflowServer(backend, root)
        server.start()
        try:
            storage = open_storage(url)
            config = tracked_config(name, {"mlflow": {"uri": server.uri}}, n_trials=8)
            study, _ = create_study(storage, config)
            run_study_with_a_preempted_trial(storage, study)
            storage.close()
            client = MlflowClient(server.uri)
            experiment = client.get_experiment_by_name(name)
            runs = client.search_runs([experiment.experiment_id])
            print(f"{len(runs)} runs: {sorted(r.info.run_name for r in runs)}")
            args.out.parent.mkdir(parents=True, exist_ok=True)
            screenshot(
                f"{server.uri}/#/experiments/{experiment.experiment_id}/runs",
                args.out,
                wait_for="9 matching runs",
            )
        finally:
            server.stop()
            shutil.rmtree(root, ignore_errors=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
