"""`hpsearch compare`: the same search under several strategies at one budget, K repeats each,
then a report (`search.compare`: plan, run, report)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from search.commands.common import (
    add_worker_flags,
    positive_int,
    storage_url,
    worker_options,
)
from search.compare.plan import CompareRequest, parse_strategies, plan_compare
from search.compare.report import attach_report, write_report
from search.compare.run import (
    prepare_studies,
    run_logging_to_file,
    run_studies,
)
from search.db.storage import mask_url, open_storage
from search.study.parse_config import load_config
from search.study.settings import ConfigError
from search.study.studies import StudyRef
from search.worker.launcher import local_devices, run_worker_processes
from search.worker.preflight import check_device, check_task
from search.worker.start import run_worker

__all__ = ["add_parser", "cmd_compare"]


def add_parser(sub: Any) -> None:
    compare = sub.add_parser(
        "compare",
        help="the same search under several strategies at one budget, K repeats each: a report",
        description="For every sampler x pruner, K repeats of the study at a budget of N trials, "
        "each an ordinary study named <name>-<sampler>[-<pruner>]-r<k>; then DIR/report.md, "
        "DIR/report.html, DIR/summary.json and PNG plots. Run it again to finish what is "
        "unfinished. The grid gets the points per parameter that fill the budget (9 -> 3 x 3); "
        "[grid] points is not used.",
    )
    compare.add_argument("config", help="study config (TOML)")
    compare.add_argument(
        "--samplers", default="grid,random,tpe", help="comma-separated (default: grid,random,tpe)"
    )
    compare.add_argument(
        "--pruners",
        help="comma-separated, e.g. none,hyperband,asha (default: the config's [pruner])",
    )
    budget = compare.add_mutually_exclusive_group(required=True)
    budget.add_argument("--budget", type=positive_int, help="trials per study")
    budget.add_argument(
        "--budget-epochs",
        type=positive_int,
        metavar="N",
        help="epochs per study, pruned trials' included: equal compute (with --budget, "
        "strategies that prune get budget x task.epochs)",
    )
    compare.add_argument(
        "--repeats", type=positive_int, default=5, help="studies per strategy (default: 5)"
    )
    compare.add_argument(
        "--workers",
        type=positive_int,
        help="local workers per study (default: one per GPU, else 1)",
    )
    compare.add_argument("--out", required=True, metavar="DIR", help="where the report goes")
    compare.add_argument(
        "--target",
        type=float,
        help="score that counts as reached for 'epochs to target' (default: the 25th "
        "percentile of all runs' final bests, pooled over every strategy)",
    )
    compare.add_argument(
        "--storage",
        help="where the compared studies go (default: sqlite:///DIR/compare.db under --out, "
        "apart from your own studies; $HPSEARCH_STORAGE is not used)",
    )
    compare.add_argument(
        "--schema", help="with --storage (PostgreSQL): the schema the compared studies go to"
    )
    add_worker_flags(compare, keep=False)
    compare.set_defaults(handler=cmd_compare)


def _own_storage(out_dir: Path) -> str:
    return f"sqlite:///{(out_dir / 'compare.db').absolute()}"


def compare_storage_url(args: argparse.Namespace, out_dir: Path) -> str:
    """--storage (with --schema), else a SQLite file of its own under --out: the compared
    studies never land in the user's own hpsearch.db (nor in $HPSEARCH_STORAGE's database);
    --schema alone is a ConfigError."""
    if args.storage is None:
        if args.schema is not None:
            raise ConfigError(
                f"--schema {args.schema}: give --storage too (without it, the compared studies "
                f"go to their own SQLite file, {out_dir / 'compare.db'}, which has no schemas)"
            )
        return _own_storage(out_dir)
    return storage_url(args)


def cmd_compare(args: argparse.Namespace) -> int:
    """Validate everything (ConfigError, exit 2, nothing written), create or find the studies,
    run the unfinished ones, write the report and attach it to every study."""
    options = worker_options(args)
    out_dir = Path(args.out)
    url = compare_storage_url(args, out_dir)
    devices = local_devices(args.workers)
    for device in sorted(set(devices)):
        check_device(device)
    config = load_config(args.config)
    strategies = parse_strategies(args.samplers, args.pruners, config)
    budget_epochs = args.budget_epochs
    pruning = [s.label for s in strategies if s.pruner != "none"]
    if budget_epochs is None and pruning:
        # Pruning saves epochs; at a budget in trials it could not spend them on more
        # configurations. Strategies are compared at the compute of --budget full trials.
        budget_epochs = args.budget * config.task.epochs
        print(
            f"compare: {', '.join(pruning)} prune: every strategy gets the same compute, "
            f"{args.budget} trials x {config.task.epochs} epochs = {budget_epochs} epochs",
            file=sys.stderr,
        )
    runs = plan_compare(config, strategies, args.budget, args.repeats, budget_epochs=budget_epochs)
    budget = args.budget or max(1, (budget_epochs or 0) // config.task.epochs)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir}: exists and is not a directory")
    check_task(config)
    if url == _own_storage(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    storage = open_storage(url, create=True)
    try:
        refs = prepare_studies(storage, runs, getattr(args, "argv", None) or sys.argv[1:])
    finally:
        storage.close()
    logs = out_dir / "logs"
    per_study = f"{budget_epochs} epochs" if budget_epochs else f"{budget} trials"
    print(
        f"compare: {len(strategies)} strategies x {args.repeats} repeats of {per_study} "
        f"({len(runs)} studies named {config.study.name}-<strategy>-r<k>, in "
        f"{mask_url(url)}); worker logs in {logs}",
        file=sys.stderr,
    )

    def run_study(ref: StudyRef) -> int:
        log_path = logs / f"{ref.name}.log"
        if len(devices) > 1:
            on_gpus = all(d.startswith("cuda") for d in devices)
            return run_worker_processes(
                url, ref.name, devices, options.argv(), restart_failed=on_gpus, log_path=log_path
            )
        device = devices[0]
        return run_logging_to_file(
            lambda: run_worker(open_storage(url), ref.name, device, options), log_path
        )

    code = run_studies(url, runs, refs, run_study, repeats=args.repeats)
    if code != 0:
        print(
            "compare: stopped before every study finished; the same command finishes them",
            file=sys.stderr,
        )
        return code
    request = CompareRequest(
        config_path=str(args.config),
        config=config,
        strategies=tuple(strategies),
        budget=budget,
        repeats=args.repeats,
        out_dir=out_dir,
        target=args.target,
        budget_epochs=budget_epochs,
    )
    storage = open_storage(url)
    try:
        written = write_report(storage, request, runs, refs)
        attach_report(storage, refs, written, options.artifacts)
    finally:
        storage.close()
    print(f"compare: report in {written.markdown} and {written.html}")
    for line in written.conclusions:
        print(f"  {line}")
    return 0
