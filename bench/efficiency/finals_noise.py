"""How far apart a peer's finals fall on seeds alone, beside a strategy's distance from it.

Issue 27's finals target reads "a final mean no worse than plain TPE's minus 0.5 points on at
least 22 of 24 instances", which `bench.efficiency` counts on the seeds of one run. Whether a
count like 17 of 24 says the strategy ends worse depends on how far two means of the same
method fall apart on different seeds. Read from the `--cache` of `python -m bench.efficiency`
(nothing is run here; a study missing from it is named with the command that makes it), per
development instance, for n = `--seeds`:

- the peer against itself: its mean final on seeds n..2n-1 counted against its mean on seeds
  0..n-1 as the suite counts a strategy (within the tolerance or not), and a one-sided Welch
  t-test of whether the second ends worse than the first by more than the tolerance;
- `--strategy` on seeds 0..n-1 against the peer on seeds 0..n-1: the suite's count, and the
  same test (p < `--alpha`).

    python -m bench.efficiency --suite dev --seeds 20 --metric val_cross_entropy \\
        --strategies optuna-tpe --no-reference --jobs 2 \\
        --cache bench/results/efficiency-lcbench-dev.jsonl
    python -m bench.efficiency.finals_noise --metric val_cross_entropy --seeds 10 \\
        --cache bench/results/efficiency-lcbench-dev.jsonl

The tolerance per metric is `bench.efficiency.targets.tpe_tolerance`'s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

from bench.efficiency.runner import (
    DEV_INSTANCES,
    Job,
    _cache_key,
    _final,
    _maximize,
    _read_cache,
    bad_input,
)
from bench.efficiency.targets import tpe_tolerance
from bench.stamp import unwritable, write_json


def finals(
    cache: dict[str, Any], strategy: str, instance: str, seeds: int, metric: str, budget: int
) -> list[float] | str:
    """The strategy's best fully trained value per seed, higher is better (cross-entropy
    negated), or the first missing study's description."""
    maximize = _maximize(metric)
    out = []
    for seed in range(seeds):
        job = Job("lcbench", instance, strategy, seed, budget, 1, None, None, 0.0, metric)
        run = cache.get(_cache_key(job))
        if run is None:
            return f"{instance} {strategy} seed {seed}"
        value = _final(run, maximize)
        if value is None:
            return f"{instance} {strategy} seed {seed} (trained no trial fully)"
        out.append(value if maximize else -value)
    return out


def worse_by_more_than(a: list[float], b: list[float], tolerance: float, alpha: float) -> bool:
    """Whether `a` ends below `b` by more than `tolerance`, on a one-sided Welch t-test.

    >>> worse_by_more_than([1.0, 1.1, 0.9], [5.0, 5.1, 4.9], 0.5, 0.05)
    True
    >>> worse_by_more_than([4.8, 5.0, 4.9], [5.0, 5.1, 4.9], 0.5, 0.05)
    False
    """
    from scipy import stats

    shifted = [x + tolerance for x in a]
    return bool(stats.ttest_ind(shifted, b, equal_var=False, alternative="less").pvalue < alpha)


def compare(
    cache: dict[str, Any],
    instances: list[str],
    metric: str,
    seeds: int,
    strategy: str,
    peer: str,
    budget: int,
    alpha: float,
) -> dict[str, Any] | str:
    """The table's rows and counts (module docstring), or what is missing from the cache."""
    rows, counts = {}, {"peer_within": 0, "within": 0, "worse": [], "peer_worse": []}
    for instance in instances:
        p = finals(cache, peer, instance, 2 * seeds, metric, budget)
        s = finals(cache, strategy, instance, seeds, metric, budget)
        for got in (p, s):
            if isinstance(got, str):
                return got
        assert not isinstance(p, str) and not isinstance(s, str)
        first, second = p[:seeds], p[seeds:]
        reference = statistics.mean(first)
        tol = tpe_tolerance(metric, reference)
        row = {
            "peer_first": reference,
            "peer_second": statistics.mean(second),
            "strategy": statistics.mean(s),
            "tolerance": tol,
            # the second half read as the suite reads a strategy
            "peer_within": statistics.mean(second) >= reference - tol,
            "within": statistics.mean(s) >= reference - tol,
            "peer_worse": worse_by_more_than(second, first, tol, alpha),
            "worse": worse_by_more_than(s, first, tol, alpha),
        }
        counts["peer_within"] += row["peer_within"]
        counts["within"] += row["within"]
        for key in ("worse", "peer_worse"):
            if row[key]:
                counts[key].append(instance)
        rows[instance] = row
    return {"instances": rows, "counts": counts}


def _bad(message: str) -> int:
    return bad_input(message, "bench.efficiency.finals_noise")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="the JSON-lines cache of bench.efficiency")
    parser.add_argument("--metric", default="val_accuracy")
    parser.add_argument(
        "--seeds", type=int, default=10, help="the strategy's seeds; the peer's are twice as many"
    )
    parser.add_argument("--strategy", default="default")
    parser.add_argument("--peer", default="optuna-tpe")
    parser.add_argument("--budget-epochs", type=int, default=5000)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.seeds < 2:
        return _bad("--seeds must be at least 2")
    wrong = unwritable("--json", args.json) if args.json else None
    if wrong:
        return _bad(wrong)
    try:
        cache = _read_cache(args.cache)
    except (OSError, ValueError) as exc:
        return _bad(f"--cache: {exc}")
    got = compare(
        cache,
        DEV_INSTANCES,
        args.metric,
        args.seeds,
        args.strategy,
        args.peer,
        args.budget_epochs,
        args.alpha,
    )
    if isinstance(got, str):
        return _bad(
            f"not in {args.cache}: {got} (run python -m "
            f"bench.efficiency --suite dev --seeds {2 * args.seeds} --metric {args.metric} "
            f"--strategies {args.peer},{args.strategy} --no-reference --cache {args.cache}; "
            f"the strategy needs only the first {args.seeds})"
        )
    n = args.seeds
    neg = " (negated)" if not _maximize(args.metric) else ""
    print(f"{args.metric}{neg}, {args.budget_epochs} epochs; tolerance as the suite counts it")
    print(
        f"| instance | {args.peer} seeds 0-{n - 1} | seeds {n}-{2 * n - 1} | within | worse | "
        f"{args.strategy} seeds 0-{n - 1} | within | worse |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    yes = {True: "yes", False: ""}
    for instance, r in got["instances"].items():
        print(
            f"| {instance} | {r['peer_first']:.4g} | {r['peer_second']:.4g} | "
            f"{yes[r['peer_within']] or 'no'} | {yes[r['peer_worse']]} | {r['strategy']:.4g} | "
            f"{yes[r['within']] or 'no'} | {yes[r['worse']]} |"
        )
    c, k = got["counts"], len(got["instances"])
    print(
        f"\n{args.peer} against itself (seeds {n}-{2 * n - 1} counted against seeds 0-{n - 1}): "
        f"within the tolerance on {c['peer_within']}/{k}; worse by more than it (one-sided "
        f"Welch, p < {args.alpha}) on {len(c['peer_worse'])}/{k} {' '.join(c['peer_worse'])}"
    )
    print(
        f"{args.strategy} against {args.peer} (seeds 0-{n - 1} each): within the tolerance on "
        f"{c['within']}/{k}; worse by more than it on {len(c['worse'])}/{k} "
        f"{' '.join(c['worse'])}"
    )
    if args.json:
        write_json(args.json, {"settings": vars(args), **got})
    return 0


if __name__ == "__main__":
    sys.exit(main())
