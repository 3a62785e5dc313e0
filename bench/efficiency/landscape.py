"""Where early epochs mislead on LCBench, measured on random configurations, not on a search.

For each instance, `--configs` configurations drawn uniformly from LCBench's space (the same
draw as `design.random_config`, seed 0) are read through the surrogate at every epoch. Per
ASHA rung (1, 3, 9, 27 epochs; eta 3) it prints:

- ``rho``: Spearman's rank correlation of the values at the rung with the final values (all
  configurations): how well the rung ranks configurations overall;
- ``rule``: the statistic `search/pruning/adaptive.py` acts on, as the study would see it:
  among the configurations in the top third at this rung (the ones ASHA promotes), the rank
  correlation of their values here and at the next rung;
- ``best``: where the configurations with the best `--best` finals rank at the rung: the
  median share of configurations that are better there (0.00: at the top; above 0.67 = 1 -
  1/eta: ASHA's first rung would not promote them, drawn at random).

For rungs 1 and 3, `probe_recall`: whether a handful of trials trained past them without
pausing (12, to rung 9) could tell that the rung loses the best configurations.

An instance whose best finals sit below the top third at the first rungs (``best`` > 0.33) is
one where ASHA throws away the configurations that would have won when the sampler proposes
them, however well the rung ranks the rest; ``rule`` there can be as high as on an instance
where the rungs hold, since the statistic only sees configurations that were promoted.

    python -m bench.efficiency.landscape                     # the 24 development instances
    python -m bench.efficiency.landscape --instances 189862,189906 --configs 1000 --json out.json

Only the development instances may be run (`design.dev_instances`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from typing import Any

import numpy as np

from bench.efficiency.design import dev_instances, random_config, suite_arguments
from bench.stamp import write_json
from search.pruning.adaptive import spearman

RUNGS = (1, 3, 9, 27)
ETA = 3


def top_share(values: np.ndarray, eta: int = ETA) -> np.ndarray:
    """Which of `values` are in their top 1/eta (what a rung promotes)."""
    return values >= np.quantile(values, 1 - 1 / eta)


def landscape(
    curves: np.ndarray, *, best: int = 6, rungs: tuple[int, ...] = RUNGS, eta: int = ETA
) -> dict[str, dict[str, float]]:
    """Per rung (epochs), ``rho``, ``rule`` and ``best`` (the module's docstring) for
    `curves`: one row per configuration, one column per epoch, higher is better.

    The first configuration starts worst and ends best; the rest keep their order:

    >>> curves = np.array([[1, 1, 1, 9], [2, 2, 2, 2], [3, 3, 3, 3], [4, 4, 4, 4], [5, 5, 5, 5]])
    >>> landscape(curves, best=1, rungs=(1, 2), eta=2)["1"]
    {'rho': 0.0, 'rule': 1.0, 'best': 0.8}
    """
    final = curves[:, -1]
    top_final = np.argsort(-final, kind="stable")[:best]
    out: dict[str, dict[str, float]] = {}
    for i, rung in enumerate(rungs):
        here = curves[:, rung - 1]
        above = curves[:, (rungs[i + 1] if i + 1 < len(rungs) else curves.shape[1]) - 1]
        promoted = top_share(here, eta)
        share_better = [float((here > here[j]).mean()) for j in top_final]
        out[str(rung)] = {
            "rho": round(spearman(here.tolist(), final.tolist()), 2),
            "rule": round(spearman(here[promoted].tolist(), above[promoted].tolist()), 2),
            "best": round(statistics.median(share_better), 2),
        }
    return out


def probe_recall(
    curves: np.ndarray,
    rung: int,
    *,
    reference: int = 9,
    probes: int = 12,
    draws: int = 400,
    eta: int = ETA,
    seed: int = 1,
) -> dict[str, float]:
    """Whether a few unpaused trials could tell that `rung` throws away the best: ``recall``,
    the share of the top 1/eta at epoch `reference` (all configurations) that rung `rung`
    would promote (top 1/eta there); ``final``, the same for the top 1/(eta**2) of the finals;
    ``alarm``, how often `probes` configurations drawn at random, trained to `reference` without
    pausing, would see fewer than half of their own top 1/eta promoted at `rung` (`draws`
    draws), the signal such a rule would act on.

    >>> curves = np.array([[c, c, c, c] for c in range(9)], dtype=float)   # the order holds
    >>> probe_recall(curves, 1, reference=3, probes=9, draws=10)
    {'recall': 1.0, 'final': 1.0, 'alarm': 0.0}
    """
    here = curves[:, rung - 1]
    promoted = top_share(here, eta)
    ref = curves[:, reference - 1]
    final = curves[:, -1]
    top_ref = top_share(ref, eta)
    top_final = top_share(final, eta**2)
    rng = np.random.default_rng(seed)
    alarms = 0
    for _ in range(draws):
        drawn = rng.choice(len(curves), probes, replace=False)
        best = drawn[np.argsort(-ref[drawn], kind="stable")[: max(1, probes // eta)]]
        alarms += bool(promoted[best].mean() < 0.5)
    return {
        "recall": round(float(promoted[top_ref].mean()), 2),
        "final": round(float(promoted[top_final].mean()), 2),
        "alarm": round(alarms / draws, 2),
    }


def instance_curves(instance: str, configs: int, data: str | None, metric: str) -> np.ndarray:
    """`configs` random configurations' curves on an LCBench instance (higher is better)."""
    from bench.efficiency.lcbench import LCBench

    bench = LCBench(instance, data, metric=metric)
    rng = np.random.default_rng(0)
    return np.array([bench.curve(random_config(rng)).accuracy for _ in range(configs)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    suite_arguments(parser)
    parser.add_argument("--configs", type=int, default=600)
    parser.add_argument("--best", type=int, default=6, help="the best finals followed")
    parser.add_argument("--data", default=None, help="YAHPO data (default $YAHPO_DATA)")
    parser.add_argument("--json", default=None, help="write the table here")
    args = parser.parse_args(argv)
    instances = dev_instances(parser, args.instances)
    if args.configs < 2 * ETA or not 1 <= args.best <= args.configs:
        parser.error("--configs must be at least 6 and --best between 1 and --configs")
    warnings.simplefilter("ignore")
    head = " | ".join(f"{r}: rho / rule / best" for r in RUNGS)
    probes = " | ".join(f"{r}: recall / final / alarm" for r in (1, 3))
    print(f"| instance | {head} | {probes} |", flush=True)
    print("| --- |" + " --- |" * (len(RUNGS) + 2), flush=True)
    table: dict[str, Any] = {}
    for instance in instances:
        curves = instance_curves(instance, args.configs, args.data, args.metric)
        table[instance] = row = landscape(curves, best=args.best)
        for rung in (1, 3):
            row[str(rung)]["probes"] = probe_recall(curves, rung)
        cells = " | ".join(
            f"{row[str(r)]['rho']:.2f} / {row[str(r)]['rule']:.2f} / {row[str(r)]['best']:.2f}"
            for r in RUNGS
        )
        probes = " | ".join(
            "{recall:.2f} / {final:.2f} / {alarm:.2f}".format(**row[str(r)]["probes"])
            for r in (1, 3)
        )
        print(f"| {instance} | {cells} | {probes} |", flush=True)
    if args.json:
        settings = {"configs": args.configs, "best": args.best, "metric": args.metric}
        write_json(args.json, {"settings": settings, "instances": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
