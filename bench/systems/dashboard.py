"""The dashboard on a large study: API time and size, and when (whether) the page is usable.

A study of N trials (default 10,000) is written straight into Optuna's tables (COPY), shaped
like an hpsearch study after Hyperband: 5 params, 12 provenance attributes per trial, one
intermediate value per epoch (a third of the trials complete 9 epochs, the others are pruned
after 1 or 3). It is an hpsearch study (created by `create_study`, with its note).

The servers run side by side on it, in processes of their own: plain optuna-dashboard (its own
command, `optuna-dashboard URL`, as a user starts it), `hpsearch dashboard`, and with --before
DIR the `hpsearch dashboard` of another checkout. For each:

- the study's API answer (`/api/studies/ID`, every trial): seconds and bytes, asked cold (the
  server's first), again at once (optuna-dashboard's own cache of the trial list, 10 s for
  large studies), and after that cache expired; then what an open page asks every few seconds
  once that cache expired: the trials after those it has (`after=N`, all finished here) and,
  where the page shows a summary of the trials (`search/monitor/dashboard_summary.py`), that
  summary again (`after=0&hpsearch_summary=1`); with `Accept-Encoding: gzip` as browsers send;
- the page in headless Chromium (Debian's, through Selenium and Debian's chromedriver): seconds
  (and the browser's CPU seconds) until the history chart shows the metric on its axis and the
  intermediate-values chart a curve, the points on the history chart then, and the seconds
  until the trial list shows "N Trials", each capped at --page-wait-s.

    python -m bench.systems.dashboard  # 1,000 then 10,000 trials (~15 minutes)
    python -m bench.systems.dashboard --trials 2000 --page-wait-s 60
    mkdir /tmp/before && git archive main | tar -x -C /tmp/before
    python -m bench.systems.dashboard --sides "hpsearch dashboard" --before /tmp/before
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any

import sqlalchemy as sa

ADMIN_URL = os.environ.get(
    "HPSEARCH_BENCH_ADMIN", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
"""A role that may create and drop the benchmark's database (one of its own, dropped after)."""
EPOCHS = 9
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def make_study(url: str, n_trials: int, seed: int = 0) -> tuple[int, str]:
    """An hpsearch study of `n_trials` finished trials, bulk-inserted; returns (id, name)."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
        distribution_to_json,
    )

    from search.db.migrate import upgrade
    from search.db.storage import open_storage
    from search.db.tables import (
        trial_intermediate_values,
        trial_params,
        trial_user_attributes,
        trial_values,
        trials,
    )
    from search.study.note import save_study_note
    from search.study.parse_config import parse_config
    from search.study.studies import create_study

    name = f"large-{n_trials}"
    config = parse_config(
        {
            "study": {"name": name, "n_trials": n_trials, "sampler": "tpe"},
            "pruner": {"type": "hyperband", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": EPOCHS},
            "space": {
                "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-2, "log": True},
                "batch_size": {"type": "categorical", "choices": [32, 64, 128]},
                "dropout": {"type": "float", "low": 0.0, "high": 0.5},
                "width": {"type": "int", "low": 8, "high": 64, "log": True},
            },
        }
    )
    storage = open_storage(url, create=True)
    upgrade(storage)
    study, _ = create_study(storage, config)
    save_study_note(storage, study, ["create", "large.toml"])
    dists = {
        "lr": FloatDistribution(1e-4, 1e-1, log=True),
        "weight_decay": FloatDistribution(1e-6, 1e-2, log=True),
        "batch_size": CategoricalDistribution([32, 64, 128]),
        "dropout": FloatDistribution(0.0, 0.5),
        "width": IntDistribution(8, 64, log=True),
    }
    dist_json = {k: distribution_to_json(d) for k, d in dists.items()}
    rng = random.Random(seed)
    start = datetime.datetime(2026, 1, 1)
    trial_rows, shapes = [], []
    for number in range(n_trials):
        epochs = EPOCHS if number % 3 == 0 else rng.choice([1, 3])
        began = start + datetime.timedelta(seconds=20 * number)
        trial_rows.append(
            {
                "number": number,
                "study_id": study.study_id,
                "state": "COMPLETE" if epochs == EPOCHS else "PRUNED",
                "datetime_start": began,
                "datetime_complete": began + datetime.timedelta(seconds=5 * epochs),
            }
        )
        shapes.append(epochs)
    with storage.transaction() as conn:
        ids = (
            conn.execute(
                sa.insert(trials).returning(trials.c.trial_id, sort_by_parameter_order=True),
                trial_rows,
            )
            .scalars()
            .all()
        )
        params, values, intermediate, attrs = [], [], [], []
        for trial_id, epochs in zip(ids, shapes, strict=True):
            quality = rng.random()
            scores = [0.5 + 0.45 * quality * (1 - 0.6 ** (e + 1)) for e in range(epochs)]
            values.append(
                {"trial_id": trial_id, "objective": 0, "value": scores[-1], "value_type": "FINITE"}
            )
            intermediate += [
                {
                    "trial_id": trial_id,
                    "step": e + 1,
                    "intermediate_value": s,
                    "intermediate_value_type": "FINITE",
                }
                for e, s in enumerate(scores)
            ]
            sampled = {
                "lr": 10 ** rng.uniform(-4, -1),
                "weight_decay": 10 ** rng.uniform(-6, -2),
                "batch_size": float(rng.randrange(3)),  # categorical: the choice's index
                "dropout": rng.uniform(0, 0.5),
                "width": float(round(2 ** rng.uniform(3, 6))),
            }
            params += [
                {
                    "trial_id": trial_id,
                    "param_name": k,
                    "param_value": v,
                    "distribution_json": dist_json[k],
                }
                for k, v in sampled.items()
            ]
            provenance = {
                "hostname": f"gpu-{trial_id % 8:02d}",
                "worker_id": f"gpu-{trial_id % 8:02d}-{trial_id % 4}",
                "device_name": "NVIDIA H100 80GB HBM3",
                "precision": "bf16",
                "torch_version": "2.13.0",
                "cuda_version": "12.8",
                "git_commit": "02278de" + "0" * 33,
                "git_dirty": False,
                "data_fingerprint": "sha256:" + "ab" * 16,
                "epochs_trained": epochs,
                "wall_seconds": 5.0 * epochs,
                "peak_memory_bytes": 1_234_567_890,
            }
            attrs += [
                {"trial_id": trial_id, "key": k, "value_json": json.dumps(v)}
                for k, v in provenance.items()
            ]
        for table, rows in (
            (trial_values, values),
            (trial_params, params),
            (trial_intermediate_values, intermediate),
            (trial_user_attributes, attrs),
        ):
            copy_rows(conn, table, rows)
    storage.close()
    return study.study_id, name


def copy_rows(conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """`rows` into `table` with PostgreSQL's COPY: 10,000 trials' 200,000 rows in seconds (an
    INSERT per row, what executemany sends, took most of a minute on a busy machine)."""
    if not rows:
        return
    columns = list(rows[0])
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    names = ", ".join(columns)
    with cursor.copy(f"COPY {table.name} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row[c] for c in columns])


class Server:
    """A dashboard command in its own process, on a free port."""

    def __init__(
        self, label: str, argv: list[str], port: int, env: dict[str, str], cwd: str | None = None
    ) -> None:
        self.label, self.port = label, port
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"{label} did not start") from None
                time.sleep(0.2)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_answer(base: str, study_id: int, after: int = 0, summary: bool = False) -> dict[str, Any]:
    query = f"?after={after}" if after or summary else ""
    query += "&hpsearch_summary=1" if summary else ""
    request = urllib.request.Request(
        f"{base}/api/studies/{study_id}{query}", headers={"Accept-Encoding": "gzip"}
    )
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as answer:
        body = answer.read()
        encoding = answer.headers.get("Content-Encoding")
    seconds = time.perf_counter() - began
    raw = gzip.decompress(body) if encoding == "gzip" else body
    n = len(json.loads(raw)["trials"])
    return {"s": round(seconds, 2), "bytes": len(raw), "sent_bytes": len(body), "trials": n}


def measure_api(server: Server, study_id: int) -> dict[str, Any]:
    cold = api_answer(server.base, study_id)
    cached = api_answer(server.base, study_id)
    time.sleep(11)  # optuna-dashboard keeps a large study's trial list for 10 s
    expired = api_answer(server.base, study_id)
    time.sleep(11)
    # what an open page asks every few seconds: the trials after those it has, all finished here
    refresh = api_answer(server.base, study_id, after=expired["trials"])
    time.sleep(11)
    # what an open study page asks every few seconds where it shows a summary of the trials
    summary = api_answer(server.base, study_id, summary=True)
    return {
        "cold": cold,
        "cached": cached,
        "expired": expired,
        "refresh": refresh,
        "summary_refresh": summary,
    }


def measure_page(server: Server, study_id: int, n_trials: int, wait_s: float) -> dict[str, Any]:
    """Seconds until the history chart shows the metric (and the intermediate-values chart its
    curves), and until the trial list shows "N Trials", each in a fresh browser, with the
    browser's CPU seconds until then (what a quiet machine would need, about); None where it
    did not within `wait_s` (a renderer busy drawing does not even answer the driver then)."""
    chart = (
        "return Array.from(document.querySelectorAll('.js-plotly-plot .ytitle'))"
        ".some(e => e.textContent === 'val_accuracy') && "
        "!!document.querySelector('#graph-intermediate-values .scatterlayer .trace')"
    )
    trial_list = f"return document.body.innerText.includes('{n_trials} Trials')"
    base = f"{server.base}/dashboard/studies/{study_id}"
    history_s, history_cpu, points = time_page(f"{base}", chart, wait_s, HISTORY_POINTS)
    list_s, list_cpu, _ = time_page(f"{base}/trials", trial_list, wait_s)
    return {
        "cap_s": wait_s,
        "history_chart_s": history_s,
        "history_chart_browser_cpu_s": history_cpu,
        "history_chart_points": points,
        "trial_list_s": list_s,
        "trial_list_browser_cpu_s": list_cpu,
    }


def _group_cpu_s(group: int) -> float:
    """CPU seconds (user + system) of the live processes of a process group."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # pgrp
            total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return total / tick


HISTORY_POINTS = """
for (const plot of document.querySelectorAll('.js-plotly-plot')) {
  const y = plot.querySelector('.ytitle'), x = plot.querySelector('.xtitle');
  if (y && y.textContent === 'val_accuracy' && x && x.textContent === 'Trial')
    return plot.querySelectorAll('.scatterlayer .point').length;
}
return null;
"""
"""The trials drawn on the history chart (a summary of them, or every one)."""


def time_page(
    url: str, shown: str, wait_s: float, then: str = "return null"
) -> tuple[float | None, float | None, Any]:
    """(seconds, the browser's CPU seconds, what the script `then` returns after) from
    navigation until the script `shown` returns true in the page; Nones if not within `wait_s`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # never download a browser
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-crash-reporter",
    ):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1000")
    # Its own process group: whatever the browser leaves behind is killed with it.
    service = Service(executable_path=CHROMEDRIVER, popen_kw={"start_new_session": True})
    driver = webdriver.Chrome(service=service, options=options)
    group = service.process.pid
    client = driver.command_executor.client_config
    cpu_before = _group_cpu_s(group)
    began = time.perf_counter()
    try:
        driver.set_page_load_timeout(wait_s)
        driver.set_script_timeout(10)
        client.timeout = wait_s + 10
        driver.get(url)
        client.timeout = 10  # a renderer too busy to answer: ask again, until the deadline
        deadline = began + wait_s
        while time.perf_counter() < deadline:
            try:
                if driver.execute_script(shown):
                    seconds = time.perf_counter() - began
                    cpu = _group_cpu_s(group) - cpu_before
                    return round(seconds, 1), round(cpu, 1), driver.execute_script(then)
            except Exception:  # the renderer too busy to answer
                pass
            time.sleep(0.2)
        return None, None, None
    except Exception:  # the page did not even load within wait_s
        return None, None, None
    finally:
        # A headless renderer left behind keeps eating the machine's cores; one too busy to
        # answer does not quit when asked.
        with contextlib.suppress(Exception):
            driver.quit()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trials", default="1000,10000", help="study sizes, comma-separated (default: 1000,10000)"
    )
    parser.add_argument("--page-wait-s", type=float, default=120.0)
    parser.add_argument("--no-browser", action="store_true", help="the API only")
    parser.add_argument(
        "--sides",
        default="optuna-dashboard,hpsearch dashboard",
        help="which servers, comma-separated (default: both; with --before, "
        "'hpsearch dashboard (before)' too)",
    )
    parser.add_argument(
        "--before",
        metavar="DIR",
        help="a checkout of an earlier commit (git worktree add, git archive): its `hpsearch "
        "dashboard` is measured too, side by side, as 'hpsearch dashboard (before)'",
    )
    args = parser.parse_args()
    sides = args.sides.split(",")
    if args.before and BEFORE not in sides:
        sides.append(BEFORE)
    summary = [
        run(int(n), args.page_wait_s, not args.no_browser, sides, args.before)
        for n in args.trials.split(",")
    ]
    print(json.dumps(summary, indent=1))


BEFORE = "hpsearch dashboard (before)"


def run(
    n_trials: int, page_wait_s: float, browser: bool, sides: list[str], before: str | None = None
) -> dict[str, Any]:
    """The servers on one study of `n_trials`, in a database of its own (dropped after)."""
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    database = f"hpsearch_bench_dashboard_{uuid.uuid4().hex[:6]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{database}"'))
    url = admin.url.set(database=database).render_as_string(hide_password=False)
    servers: list[Server] = []
    try:
        began = time.perf_counter()
        study_id, name = make_study(url, n_trials)
        print(f"study {name}: {n_trials} trials written in {time.perf_counter() - began:.1f} s")
        env = {k: v for k, v in os.environ.items() if not k.startswith("HPSEARCH_")}
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = repo
        bin_dir = os.path.dirname(sys.executable)
        plain_port, ours_port = free_port(), free_port()
        commands = {
            "optuna-dashboard": [
                os.path.join(bin_dir, "optuna-dashboard"),
                url,
                "--port",
                str(plain_port),
                "--server",
                "wsgiref",
                "--quiet",
            ],
            "hpsearch dashboard": [
                sys.executable,
                "-m",
                "search",
                "dashboard",
                "--storage",
                url,
                "--port",
                str(ours_port),
            ],
        }
        ports = {"optuna-dashboard": plain_port, "hpsearch dashboard": ours_port}
        envs = {label: env for label in commands}
        if before:
            ports[BEFORE] = free_port()
            commands[BEFORE] = [*commands["hpsearch dashboard"][:-1], str(ports[BEFORE])]
            envs[BEFORE] = {**env, "PYTHONPATH": os.path.abspath(before)}
        results: dict[str, Any] = {}
        for label, argv in commands.items():
            if label not in sides:
                continue
            print(f"{label}: load average {os.getloadavg()}", flush=True)
            cwd = before if label == BEFORE else None  # `python -m` reads its cwd first
            server = Server(label, argv, ports[label], envs[label], cwd)
            servers.append(server)
            try:
                results[label] = {"api": measure_api(server, study_id)}
                print(label, "api", json.dumps(results[label]["api"]), flush=True)
                if browser:
                    page = measure_page(server, study_id, n_trials, page_wait_s)
                    results[label]["page"] = page
                    print(label, "page", json.dumps(page), flush=True)
            finally:
                server.stop()
        return {"trials": n_trials, "results": results}
    finally:
        for server in servers:
            server.stop()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
