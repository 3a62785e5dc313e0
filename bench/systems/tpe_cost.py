"""fast_tpe's Gaussian masses against the ones before them, paired in one process.

A study of N trials as promotion ASHA leaves them (`bench.systems.sampler_cost`'s synthetic
LCBench study, SQLite) is read once into a `StudyMirror`; then the next trial's sampling
(`make_sampler`, one suggest per parameter: TPE across fidelities, as a worker samples) runs
`--rounds` times in each of two modes, in turn (the order swapped every round):

- `before`: TPE as `search.sampling.fast_tpe` was at e24adaa: Optuna's `_log_gauss_mass` and
  `_log_gauss_mass_unique` (over fast_tpe's `log_ndtr`, the array path at any size) and a
  trial's values read one by one;
- `after`: fast_tpe as it is (`log_gauss_mass`, `log_gauss_mass_unique`, Optuna's per-element
  `log_ndtr` below `_FEW` elements, the values read at once).

The study does not change between samples, so both modes sample the very same trial (checked:
the same params) and each round's two CPU times (`time.process_time`) are a pair; the median of
the pairs' ratios is robust to a machine whose speed drifts within a minute, which a comparison
of two processes run one after the other is not.

    python -m bench.systems.tpe_cost --sizes 300,1000 --rounds 40
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np


@contextlib.contextmanager
def before() -> Iterator[None]:
    """fast_tpe as it was before the Gaussian masses went into it."""
    from optuna.samplers._tpe import _truncnorm
    from optuna.samplers._tpe import probability_distributions as distributions

    from search.sampling import fast_tpe

    def internal_repr_one_by_one(
        self: Any, trials: list[Any], search_space: dict[str, Any], study: Any
    ) -> dict[str, np.ndarray]:
        if self._multivariate is not False or len(search_space) != 1:
            return super(fast_tpe.TPESampler, self)._get_internal_repr(trials, search_space, study)
        ((name, distribution),) = search_space.items()
        internal = distribution.to_internal_repr
        values = [internal(p[name]) for p in [t.params for t in trials] if name in p]
        return {name: np.asarray(values)}

    saved = (
        _truncnorm._log_gauss_mass,
        distributions._log_gauss_mass_unique,
        fast_tpe._FEW,
        fast_tpe.TPESampler._get_internal_repr,
        fast_tpe.installed,
    )
    _truncnorm._log_gauss_mass = fast_tpe._ORIGINAL_MASS
    distributions._log_gauss_mass_unique = fast_tpe._ORIGINAL_MASS_UNIQUE
    fast_tpe._FEW = 0
    fast_tpe.TPESampler._get_internal_repr = internal_repr_one_by_one  # type: ignore[method-assign]
    fast_tpe.installed = lambda: True  # the split memo stays on, as it was
    try:
        yield
    finally:
        (
            _truncnorm._log_gauss_mass,
            distributions._log_gauss_mass_unique,
            fast_tpe._FEW,
            fast_tpe.TPESampler._get_internal_repr,
            fast_tpe.installed,
        ) = saved


def measure(n: int, rounds: int) -> dict[str, Any]:
    import optuna

    from bench.systems.sampler_cost import database, make_study
    from search.db.storage import open_storage
    from search.sampling.mirror import StudyMirror
    from search.sampling.samplers import make_sampler, suggest
    from search.study.studies import open_study

    with database("sqlite") as url:
        name = make_study(url, n)
        storage = open_storage(url)
        study = open_study(storage, name)
        mirror = StudyMirror(storage, study)
        mirror.refresh()
        number = len(mirror.get_all_trials(study.study_id))

        def sample() -> tuple[float, dict[str, Any]]:
            sampler = make_sampler(study.config, number)  # installs fast_tpe
            c0 = time.process_time()
            trial = optuna.Trial(mirror.study(sampler), mirror.new_trial(number))
            params = {p.name: suggest(trial, p) for p in study.config.space}
            cpu = time.process_time() - c0
            mirror.take_sampled()
            return cpu, params

        sample()  # the bounded view's index and the like: built once, by neither mode
        cpu: dict[str, list[float]] = {"before": [], "after": []}
        seen: dict[str, dict[str, Any]] = {}
        for r in range(rounds):
            for mode in ("before", "after") if r % 2 == 0 else ("after", "before"):
                with before() if mode == "before" else contextlib.nullcontext():
                    t, params = sample()
                cpu[mode].append(t)
                if seen.setdefault(mode, params) != params:
                    raise AssertionError(f"{mode} sampled {params}, then {seen[mode]}")
        storage.close()
    if seen["before"] != seen["after"]:
        raise AssertionError(f"the modes sampled differently: {seen}")
    ratios = [a / b for a, b in zip(cpu["after"], cpu["before"], strict=True)]
    return {
        "trials": n,
        "before_cpu_ms": round(1000 * statistics.median(cpu["before"]), 2),
        "after_cpu_ms": round(1000 * statistics.median(cpu["after"]), 2),
        "ratio": round(statistics.median(ratios), 3),
        "ratio_quartiles": [round(q, 3) for q in statistics.quantiles(ratios, n=4)[::2]],
        "same_params": True,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="300,1000")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(
        "| trials | before, CPU ms a sample | after | after / before (median of pairs; quartiles) |"
    )
    print("| --- | --- | --- | --- |")
    for n in (int(x) for x in args.sizes.split(",")):
        r = measure(n, args.rounds)
        q1, q3 = r["ratio_quartiles"]
        print(
            f"| {n:,} | {r['before_cpu_ms']} | {r['after_cpu_ms']} | {r['ratio']} ({q1}-{q3}) |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
