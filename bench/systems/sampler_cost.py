"""The default sampler's cost per trial as a study grows, on the path workers take.

A study of N trials as promotion ASHA (min 1, eta 3, rungs 1, 3, 9, 27, 50) leaves them is
written in bulk into a fresh database (PostgreSQL by default, `--storage sqlite` for a file),
over LCBench's space (7 parameters, 3 of them integers), plus 8 running trials; values are
synthetic (a smooth function of the parameters plus noise): what is measured is the sampler's
work, not what it finds. The study's config is the default search: TPE + ASHA with an epoch
budget, so `make_sampler` builds TPE across fidelities with the bounded view
(search/sampling/bounded.py) and Optuna's TPE made faster (search/sampling/fast_tpe.py).

Each side (`--code`: a checkout of hpsearch per side, the first one labelled "before" when two
are given) samples in a process of its own, as a worker does in `TrialSampler._sample_in_memory`:
one `StudyMirror` (search/sampling/mirror.py) read once, then per trial its refresh,
`make_sampler`, an `optuna.Trial` on the mirror and one suggest per parameter. Between two
samples a finished trial is written (the study moves on, the next refresh reads it). Each
sample's CPU time (`time.process_time`, steadier than wall time on a shared machine) and wall
time are taken; the first sample of a process (the mirror's first read of the study is apart,
but the bounded view's index is built there) is printed apart from the rest. The sides take
turns per size on the same database (the second sees `--samples` more trials).

    git archive main | tar -x -C /tmp/main    # the code before, as a side
    python -m bench.systems.sampler_cost --sizes 1000,5000,10000,20000 --code /tmp/main,.
    python -m bench.systems.sampler_cost --sizes 10000 --samples 5 --profile
    python -m bench.systems.sampler_cost --sizes 300,1000 --samples 8 --rounds 7 --code /tmp/main,.

`--rounds R`: the sides take turns R times per size, and the median of each side's per-round
medians and of the per-round ratios (after / before) are printed: on a machine whose speed
drifts over a minute, sides measured one right after the other are the fairer comparison.

`--profile`: cProfile of the samples after the first, printed by each side.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

SPACE: dict[str, BaseDistribution] = {
    "batch_size": IntDistribution(16, 512, log=True),
    "learning_rate": FloatDistribution(1e-4, 1e-1, log=True),
    "max_dropout": FloatDistribution(0.0, 1.0),
    "max_units": IntDistribution(64, 1024, log=True),
    "momentum": FloatDistribution(0.1, 0.99),
    "num_layers": IntDistribution(1, 5),
    "weight_decay": FloatDistribution(1e-5, 1e-1),
}
RUNGS = (1, 3, 9, 27, 50)
RUNNING = 8


def _draw(rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, d in SPACE.items():
        assert isinstance(d, FloatDistribution | IntDistribution)
        if d.log:
            x = math.exp(rng.uniform(math.log(d.low), math.log(d.high)))
        else:
            x = rng.uniform(d.low, d.high)
        out[name] = min(d.high, max(d.low, round(x))) if isinstance(d, IntDistribution) else x
    return out


def _quality(p: dict[str, Any]) -> float:
    return (
        90
        - 8 * (math.log10(p["learning_rate"]) + 2.5) ** 2
        - 5 * p["max_dropout"]
        - 3 * abs(p["num_layers"] - 2)
    )


def asha_trial(rng: random.Random, params: dict[str, Any] | None = None) -> FrozenTrial:
    """One finished trial as ASHA leaves it: a third of the trials at each rung go on."""
    p = params or _draw(rng)
    q = _quality(p)
    reports: dict[int, float] = {}
    for step in RUNGS:
        reports[step] = q - 20 / step + rng.gauss(0, 1)
        if rng.random() > 1 / 3:
            break
    done = RUNGS[-1] in reports
    return create_trial(
        state=TrialState.COMPLETE if done else TrialState.PRUNED,
        value=reports[RUNGS[-1]] if done else None,
        params=p,
        distributions=SPACE,
        intermediate_values=reports,
    )


def config(name: str) -> Any:
    """The default search (TPE + ASHA, an epoch budget) on LCBench's space."""
    from search.study.parse_config import parse_config

    space = {
        name: {
            "type": "int" if isinstance(d, IntDistribution) else "float",
            "low": d.low,
            "high": d.high,
            "log": d.log,
        }
        for name, d in SPACE.items()
    }
    return parse_config(
        {
            "study": {
                "name": name,
                "direction": "maximize",
                "sampler": "tpe",
                "seed": 0,
                "budget_epochs": 10**9,
            },
            "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "bench.efficiency.task:make_task", "epochs": RUNGS[-1]},
            "space": space,
        }
    )


def write_trials(storage: Any, study_id: int, trials: list[FrozenTrial], first: int) -> None:
    """`trials` into the study's tables in one transaction, numbered from `first`."""
    import sqlalchemy as sa
    from optuna.distributions import distribution_to_json

    from search.db.tables import trial_intermediate_values, trial_params, trial_values
    from search.db.tables import trials as trials_table

    as_json = {k: distribution_to_json(d) for k, d in SPACE.items()}
    start = datetime.datetime(2026, 1, 1)
    with storage.transaction() as conn:
        rows = [
            {
                "number": first + i,
                "study_id": study_id,
                "state": t.state.name,
                "datetime_start": start,
                "datetime_complete": start if t.state.is_finished() else None,
            }
            for i, t in enumerate(trials)
        ]
        ids = (
            conn.execute(
                sa.insert(trials_table).returning(
                    trials_table.c.trial_id, sort_by_parameter_order=True
                ),
                rows,
            )
            .scalars()
            .all()
        )
        params, values, curves = [], [], []
        for trial_id, t in zip(ids, trials, strict=True):
            params += [
                {
                    "trial_id": trial_id,
                    "param_name": k,
                    "param_value": SPACE[k].to_internal_repr(v),
                    "distribution_json": as_json[k],
                }
                for k, v in t.params.items()
            ]
            if t.value is not None:
                values.append(
                    {"trial_id": trial_id, "objective": 0, "value": t.value, "value_type": "FINITE"}
                )
            curves += [
                {
                    "trial_id": trial_id,
                    "step": step,
                    "intermediate_value": v,
                    "intermediate_value_type": "FINITE",
                }
                for step, v in t.intermediate_values.items()
            ]
        for table, batch in (
            (trial_params, params),
            (trial_values, values),
            (trial_intermediate_values, curves),
        ):
            if batch:
                conn.execute(sa.insert(table), batch)


def make_study(url: str, n: int, seed: int = 0) -> str:
    """A study of `n` finished trials and `RUNNING` running ones at `url`; its name."""
    from search.db.migrate import upgrade
    from search.db.storage import open_storage
    from search.study.studies import create_study

    storage = open_storage(url, create=True)
    upgrade(storage)
    name = f"sampler-cost-{n}"
    ref, _ = create_study(storage, config(name))
    rng = random.Random(seed)
    for first in range(0, n, 5000):
        batch = [asha_trial(rng) for _ in range(min(5000, n - first))]
        write_trials(storage, ref.study_id, batch, first)
    running = [
        create_trial(state=TrialState.RUNNING, params=_draw(rng), distributions=SPACE)
        for _ in range(RUNNING)
    ]
    write_trials(storage, ref.study_id, running, n)
    storage.close()
    return name


@contextlib.contextmanager
def database(kind: str) -> Iterator[str]:
    """URL of a new empty database for one size, dropped (deleted) after it."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/study.db"
        return
    from bench.systems.large_study import scratch_database

    with scratch_database("sampler") as url:
        yield url


def measure(url: str, name: str, samples: int, profile: bool) -> dict[str, Any]:
    """One side: the worker's sampling steps, `samples` trials one after another."""
    import cProfile
    import pstats
    import time
    import warnings

    import optuna

    from search.db.storage import open_storage
    from search.sampling.mirror import StudyMirror
    from search.sampling.samplers import make_sampler, suggest
    from search.study.studies import open_study

    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(url)
    study = open_study(storage, name)
    mirror = StudyMirror(storage, study)
    c0 = time.process_time()
    mirror.refresh()
    first_read = time.process_time() - c0
    number = len(mirror.get_all_trials(study.study_id))
    rng = random.Random(number)
    cpu: list[float] = []
    wall: list[float] = []
    prof = cProfile.Profile() if profile else None
    for i in range(samples):
        if prof is not None and i > 0:
            prof.enable()
        c0, w0 = time.process_time(), time.perf_counter()
        mirror.refresh()
        trial = optuna.Trial(
            mirror.study(make_sampler(study.config, number)), mirror.new_trial(number)
        )
        params = {p.name: suggest(trial, p) for p in study.config.space}
        mirror.take_sampled()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        if prof is not None and i > 0:
            prof.disable()
        write_trials(storage, study.study_id, [asha_trial(rng, params)], number)
        number += 1
    storage.close()
    if prof is not None:
        stats = pstats.Stats(prof, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(30)
        stats.sort_stats("tottime").print_stats(20)
    return {
        "first_read_cpu_ms": round(first_read * 1000, 1),
        "first_cpu_ms": round(cpu[0] * 1000, 1),
        "cpu_ms": round(statistics.median(cpu[1:] or cpu) * 1000, 1),
        "cpu_ms_range": [round(min(cpu[1:] or cpu) * 1000, 1), round(max(cpu) * 1000, 1)],
        "wall_ms": round(statistics.median(wall[1:] or wall) * 1000, 1),
    }


def side(code: Path, url: str, name: str, samples: int, profile: bool) -> dict[str, Any]:
    """`measure` in a process of its own, with hpsearch imported from `code`."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    argv = [sys.executable, str(Path(__file__).resolve()), "--measure", url, name]
    argv += ["--samples", str(samples)] + (["--profile"] if profile else [])
    out = subprocess.run(argv, env=env, cwd=code, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def commit_of(code: Path) -> str:
    got = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    )
    return got.stdout.strip() if got.returncode == 0 else code.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--code", default=".", help="checkouts, comma-separated: one per side")
    parser.add_argument("--storage", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--rounds", type=int, default=1, help="sides in turn this many times per size (paired)"
    )
    parser.add_argument("--measure", nargs=2, metavar=("URL", "STUDY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(*args.measure, args.samples, args.profile)), flush=True)
        return 0
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    codes = [Path(c).resolve() for c in args.code.split(",")]
    labels = ["before", "after"] if len(codes) == 2 else [commit_of(c) for c in codes]
    print(
        "| trials | code | per sample, CPU ms (median; min-max) | wall ms | first sample, CPU ms "
        "| mirror's first read, CPU ms | load |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in (int(x) for x in args.sizes.split(",")):
        with database(args.storage) as url:
            name = make_study(url, n)
            rounds: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
            for _ in range(args.rounds):
                for label, code in zip(labels, codes, strict=True):
                    r = side(code, url, name, args.samples, args.profile)
                    rounds[label].append(r)
                    low, high = r["cpu_ms_range"]
                    print(
                        f"| {n:,} | {label} ({commit_of(code)}) | {r['cpu_ms']} ({low}-{high}) | "
                        f"{r['wall_ms']} | {r['first_cpu_ms']} | {r['first_read_cpu_ms']} | "
                        f"{os.getloadavg()[0]:.1f} |",
                        flush=True,
                    )
            if args.rounds > 1:
                for label in labels:
                    cpu = statistics.median(r["cpu_ms"] for r in rounds[label])
                    print(
                        f"| {n:,} | {label}: median of {args.rounds} rounds | {cpu:.1f} | | | | |"
                    )
                if len(labels) == 2:
                    # Each round's sides ran one after the other: their ratio is paired.
                    before, after = rounds.values()
                    ratios = [a["cpu_ms"] / b["cpu_ms"] for b, a in zip(before, after, strict=True)]
                    print(
                        f"| {n:,} | after / before, median of the rounds' ratios | "
                        f"{statistics.median(ratios):.3f} "
                        f"({min(ratios):.3f}-{max(ratios):.3f}) | | | | |",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
