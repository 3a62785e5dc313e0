"""A study of 20,000 trials on PostgreSQL: what the commands, the sampler and the hot queries cost.

The study is written in bulk (`bench.systems.dashboard.make_study`: 5 params, Hyperband-shaped
curves, provenance attributes), plus the rung table promotion-based ASHA keeps (every trial at
epoch 1, a third at 3, a ninth at 9, a few of them paused) and a few queued trials, then
ANALYZEd. Measured on it, each `--repeats` times (the median is printed):

- the commands as a user runs them (a process each: `status`, `status --json`, `studies`,
  `workers`), wall seconds including Python's start, and the same reads in this process
  (`status_s_in_process`); a `status --watch` refresh (the status read and its lines);
- the sampler: the mirror's first read of the study (once per worker process), then per trial
  the incremental refresh and one TPE (multi-fidelity, as the study's config says) sample;
- EXPLAIN (ANALYZE, BUFFERS) of the promotion query (`search.db.pauses.next_promotable`) and of
  the claim (`search.db.claims`, inside a transaction rolled back).

    python -m bench.systems.large_study                       # 20,000 trials
    python -m bench.systems.large_study --trials 1000,10000 --no-explain
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from bench.systems.dashboard import ADMIN_URL, make_study


def add_rungs_and_queue(url: str, study_id: int, n_waiting: int = 8) -> None:
    """The rung table of promotion-based ASHA for every trial (eta 3: epoch 1, 3, 9) and
    `n_waiting` queued trials, as a running study has them."""
    from search.db.storage import open_storage
    from search.db.tables import trial_intermediate_values, trial_rungs, trials

    storage = open_storage(url)
    with storage.transaction() as conn:
        curves: dict[int, dict[int, float]] = {}
        rows = conn.execute(
            sa.select(
                trial_intermediate_values.c.trial_id,
                trial_intermediate_values.c.step,
                trial_intermediate_values.c.intermediate_value,
            )
            .join(trials, trials.c.trial_id == trial_intermediate_values.c.trial_id)
            .where(trials.c.study_id == study_id)
        )
        for trial_id, step, value in rows:
            curves.setdefault(trial_id, {})[step] = value
        rungs = []
        for trial_id, curve in curves.items():
            for level in (1, 3, 9):
                if level in curve:
                    paused = level == max(curve) and level < 9 and trial_id % 50 == 0
                    rungs.append(
                        {
                            "trial_id": trial_id,
                            "level": level,
                            "study_id": study_id,
                            "bracket": 0,
                            "value": curve[level],
                            "paused": paused,
                        }
                    )
        conn.execute(sa.insert(trial_rungs), rungs)
        top = conn.execute(
            sa.select(sa.func.max(trials.c.number)).where(trials.c.study_id == study_id)
        ).scalar_one()
        conn.execute(
            sa.insert(trials),
            [
                {"number": top + 1 + i, "study_id": study_id, "state": "WAITING"}
                for i in range(n_waiting)
            ],
        )
    with storage.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("ANALYZE")
    storage.close()


def command_s(url: str, argv: list[str], repeats: int) -> float:
    """Median wall seconds of `hpsearch ARGV --storage URL` in a process of its own."""
    env = dict(os.environ)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "search", *argv, "--storage", url],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        times.append(time.perf_counter() - started)
    return round(statistics.median(times), 3)


def in_process(url: str, name: str, repeats: int) -> dict[str, float]:
    """The status read (what `status` and each `--watch` refresh do), in this process."""
    from search.db.storage import open_storage
    from search.monitor.status import study_status
    from search.monitor.watch import format_live
    from search.study.studies import open_study

    storage = open_storage(url)
    study = open_study(storage, name)
    status_times, watch_times = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        study_status(storage, study)
        status_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        format_live(study_status(storage, study))
        watch_times.append(time.perf_counter() - started)
    storage.close()
    return {
        "status_s_in_process": round(statistics.median(status_times), 3),
        "watch_refresh_s": round(statistics.median(watch_times), 3),
    }


def sampler_cost(url: str, name: str, samples: int) -> dict[str, float]:
    """The mirror's first read, then per trial its refresh and one TPE sample."""
    import optuna

    from search.db.storage import open_storage
    from search.sampling.mirror import StudyMirror
    from search.sampling.samplers import make_sampler, suggest
    from search.study.studies import open_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(url)
    study = open_study(storage, name)
    mirror = StudyMirror(storage, study)
    started = time.perf_counter()
    mirror.refresh()
    first = time.perf_counter() - started
    number = len(mirror.get_all_trials(study.study_id))
    times = []
    for i in range(samples):
        started = time.perf_counter()
        mirror.refresh()
        trial = optuna.Trial(
            mirror.study(make_sampler(study.config, number + i)), mirror.new_trial(number + i)
        )
        for p in study.config.space:
            suggest(trial, p)
        times.append(time.perf_counter() - started)
        mirror.take_sampled()
    storage.close()
    return {
        "mirror_first_read_s": round(first, 2),
        "sample_ms_per_trial": round(1000 * statistics.median(times), 1),
        "sample_ms_min_max": [round(1000 * min(times), 1), round(1000 * max(times), 1)],
    }


def explain(url: str, study_id: int) -> dict[str, str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the promotion query and the claim (rolled back)."""
    from search.db.claims import _claim_statement_postgresql, utcnow_naive
    from search.db.pauses import _promotable_statement
    from search.db.storage import open_storage

    storage = open_storage(url)
    plans = {}
    dialect = storage.engine.dialect
    statements = {
        "promotion": (_promotable_statement(True, False), {"study": study_id, "eta": 3}),
        "claim": (
            _claim_statement_postgresql(True),
            {"study": study_id, "claimer": "bench", "started": utcnow_naive()},
        ),
    }
    for label, (statement, params) in statements.items():
        compiled = statement.compile(dialect=dialect)
        with storage.engine.connect() as conn:
            trans = conn.begin()
            rows = conn.exec_driver_sql(
                "EXPLAIN (ANALYZE, BUFFERS) " + str(compiled),
                compiled.construct_params(params),
            ).all()
            trans.rollback()
        plans[label] = "\n".join(r[0] for r in rows)
    storage.close()
    return plans


@contextlib.contextmanager
def scratch_database(purpose: str) -> Iterator[str]:
    """URL of a new empty PostgreSQL database for one benchmark run, dropped after it."""
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    database = f"hpsearch_bench_{purpose}_{uuid.uuid4().hex[:6]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{database}"'))
    try:
        yield admin.url.set(database=database).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()


def run(n_trials: int, repeats: int, samples: int, with_explain: bool) -> dict[str, Any]:
    with scratch_database("large") as url:
        began = time.perf_counter()
        study_id, name = make_study(url, n_trials)
        add_rungs_and_queue(url, study_id)
        result: dict[str, Any] = {
            "trials": n_trials,
            "written_s": round(time.perf_counter() - began, 1),
            "load": os.getloadavg()[0],
        }
        for label, argv in {
            "status_s": ["status", "--study", name],
            "status_json_s": ["status", "--study", name, "--json"],
            "studies_s": ["studies"],
            "workers_s": ["workers"],
        }.items():
            result[label] = command_s(url, argv, repeats)
        result.update(in_process(url, name, repeats))
        result.update(sampler_cost(url, name, samples))
        print(json.dumps(result), flush=True)
        if with_explain:
            for label, plan in explain(url, study_id).items():
                print(f"--- EXPLAIN {label} at {n_trials} trials\n{plan}", flush=True)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="20000", help="study sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=5, help="TPE samples timed per size")
    parser.add_argument("--no-explain", action="store_true")
    args = parser.parse_args()
    for n in args.trials.split(","):
        run(int(n), args.repeats, args.samples, not args.no_explain)


if __name__ == "__main__":
    main()
