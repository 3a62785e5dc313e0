"""Search efficiency: epochs trained until a study first reaches the target, per strategy.

    python bench/efficiency.py                       # 5 seeds, about 20 minutes on 2 busy cores
    python bench/efficiency.py --seeds 2 --budget 12 --epochs 9 --no-variants   # a smoke run

Built on `hpsearch compare`'s own pieces (search.compare.plan plans the studies,
search.compare.report reads them back): random without pruning, random + Hyperband, TPE
without, TPE + Hyperband and grid, each `--seeds` times (independent seeds) at the same budget
of trials, on a task where tuning matters (bench/efficiency_task.py: an MLP on 600 digits
images; the learning rate ranges over five decades, a bad one costs tens of points). Then,
with the same target, a few settings of TPE + Hyperband (min_resource, reduction factor, TPE's
random startup trials), to choose the defaults from numbers.

The target is compare's rule, fixed before any strategy's epochs are counted: the 25th
percentile of the final bests of every run of the five main strategies, pooled. Epochs to
target counts every epoch of every trial finished up to the first complete trial that reached
it; a run that never reached it counts as infinite in the median. Workers run in this process,
one study at a time, without checkpoints, on SQLite in a temporary directory (or --storage).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import search.sampling.samplers
from search.compare.collect import RunResult, collect
from search.compare.plan import CompareRequest, Strategy, plan_compare
from search.compare.run import prepare_studies
from search.compare.statistics import pooled_target, summarize
from search.db.storage import open_storage
from search.monitor.status import study_status
from search.study.config import PrunerSettings, StudyConfig, parse_config
from search.worker.loop import Worker

MAIN = [
    Strategy("random", "none"),
    Strategy("random", "hyperband"),
    Strategy("tpe", "none"),
    Strategy("tpe", "hyperband"),
    Strategy("grid", "none"),
]
VARIANTS = [
    # (min_resource, reduction_factor, TPE startup trials); (1, 3, 10) is the main run's.
    (1, 3, 5),
    (3, 3, 10),
]


def bench_config(name: str, epochs: int, budget: int) -> StudyConfig:
    return parse_config(
        {
            "study": {"name": name, "n_trials": budget, "sampler": "random", "seed": 0},
            "pruner": {"type": "hyperband", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "bench.efficiency_task:make_task", "epochs": epochs},
            "space": {
                "lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
                "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
                "width": {"type": "int", "low": 8, "high": 128, "log": True},
                "dropout": {"type": "float", "low": 0.0, "high": 0.5},
            },
        }
    )


def run_all(url: str, config: StudyConfig, strategies: list[Strategy], seeds: int, budget: int):
    runs = plan_compare(config, strategies, budget, seeds)
    storage = open_storage(url, create=True)
    refs = prepare_studies(storage, runs, sys.argv[1:])
    for i, (run, ref) in enumerate(zip(runs, refs, strict=True), start=1):
        started = time.monotonic()
        code = Worker(storage, ref, device="cpu", progress=False).run()
        status = study_status(storage, ref)
        if code != 0 or status.finished < budget:
            sys.exit(f"{run.name}: the worker stopped early (exit {code}); no measurement")
        print(
            f"  [{i}/{len(runs)}] {run.name}: {time.monotonic() - started:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    results = collect(storage, runs, refs)
    storage.close()
    return runs, results


def describe(results: list[RunResult], target: float) -> dict[str, Any]:
    to_target = [r.epochs_to(target) for r in results]
    finite = [v for v in to_target if v is not None]
    as_inf = [math.inf if v is None else v for v in to_target]
    median = float(np.median(as_inf))
    bests = [r.best for r in results if r.best is not None]
    return {
        "epochs_to_target": to_target,
        "median": None if math.isinf(median) else median,
        # Nearest ranks, so that a run that never reached the target stays infinite.
        "q25": float(np.quantile(as_inf, 0.25, method="lower")),
        "q75": float(np.quantile(as_inf, 0.75, method="higher")),
        "min": min(finite) if finite else None,
        "max": max(finite) if finite else None,
        "reached": len(finite),
        "runs": len(results),
        "final_best_median": float(np.median(bests)) if bests else None,
        "final_best_mean": float(np.mean(bests)) if bests else None,
        "final_bests": [r.best for r in results],
        "epochs_trained_median": float(np.median([r.epochs for r in results])),
    }


def fmt(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isinf(v)):
        return "not reached"
    return f"{v:g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=20, help="trials per study")
    parser.add_argument("--epochs", type=int, default=27, help="epochs of a full trial")
    parser.add_argument("--storage", help="default: SQLite in a temporary directory")
    parser.add_argument("--out", default="bench/efficiency-results.json")
    parser.add_argument("--no-variants", action="store_true", help="only the five strategies")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.storage or f"sqlite:///{tmp}/efficiency.db"
        config = bench_config("eff", args.epochs, args.budget)
        print("main strategies:", file=sys.stderr)
        _, results = run_all(url, config, MAIN, args.seeds, args.budget)
        maximize = True
        target = pooled_target([r.best for r in results if r.best is not None], maximize)
        table = {
            s.label: describe([r for r in results if r.label == s.label], target) for s in MAIN
        }
        request = CompareRequest(
            config_path="bench/efficiency.py",
            config=config,
            strategies=tuple(MAIN),
            budget=args.budget,
            repeats=args.seeds,
            out_dir=Path(tmp),
            target=target,
        )
        tests = summarize(results, request, config.space, None)["tests"]
        variants: dict[str, Any] = {}
        if not args.no_variants:
            for min_resource, factor, startup in VARIANTS:
                label = f"tpe-hyperband m{min_resource} r{factor} s{startup}"
                print(f"variant {label}:", file=sys.stderr)
                name = f"eff-m{min_resource}r{factor}s{startup}"
                variant = dataclasses.replace(
                    bench_config(name, args.epochs, args.budget),
                    pruner=PrunerSettings(
                        type="hyperband", min_resource=min_resource, reduction_factor=factor
                    ),
                )
                saved = search.sampling.samplers.STARTUP_TRIALS["tpe"]
                search.sampling.samplers.STARTUP_TRIALS["tpe"] = startup
                try:
                    _, vresults = run_all(
                        url, variant, [Strategy("tpe", "hyperband")], args.seeds, args.budget
                    )
                finally:
                    search.sampling.samplers.STARTUP_TRIALS["tpe"] = saved
                variants[label] = describe(vresults, target)
    elapsed = time.monotonic() - started

    base, best = table["random"], table["tpe-hyperband"]
    ratio = (
        base["median"] / best["median"]
        if base["median"] is not None and best["median"] is not None
        else None
    )
    out = {
        "command": " ".join(["python", *sys.argv]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}",
        "seeds": args.seeds,
        "budget": args.budget,
        "epochs": args.epochs,
        "target": target,
        "target_rule": "25th percentile of the final bests of all runs of the five strategies",
        "strategies": table,
        "variants": variants,
        "ratio_random_over_tpe_hyperband": ratio,
        "tests": tests,
        "elapsed_s": round(elapsed, 1),
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")

    print(f"\ntarget val_accuracy {target:.4g}; {args.seeds} seeds; {elapsed / 60:.1f} min\n")
    print(
        "| strategy | epochs to target: median | IQR | min..max | reached | final best median "
        "| epochs trained (median per study) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, d in {**table, **variants}.items():
        print(
            f"| {label} | {fmt(d['median'])} | {fmt(d['q25'])}..{fmt(d['q75'])} | "
            f"{fmt(d['min'])}..{fmt(d['max'])} | {d['reached']}/{d['runs']} | "
            f"{d['final_best_median']:.4f} | {d['epochs_trained_median']:g} |"
        )
    print(f"\nrandom / tpe-hyperband median epochs to target: {fmt(ratio)}")
    for t in tests:
        print(
            f"{t['a']} vs {t['b']}: final bests p = {t['p']:.3g} (Holm {t['p_holm']:.3g}), "
            f"first better in {t['a_better_share']:.0%}"
        )


if __name__ == "__main__":
    main()
