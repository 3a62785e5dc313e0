"""Pruning: the study's `[pruner]` made into an Optuna pruner, and the decisions taken on a
light, incremental view of the study's reports.

- `pruners`: `make_pruner`, hpsearch's Hyperband;
- `pruner`: `Pruner`, deciding per report from the rungs it reads incrementally;
- `storage`: `PruningStorage`, the study as Optuna's pruners read it (the trial cache);
- `promotion`: promotion-based ASHA's rule alone (`Rungs`, `RungTable`): which paused trial a
  free worker resumes (the database side: `search.db.pauses`; the worker's:
  `search.worker.budget_and_promotion`);
- `adaptive`: the rung rule (a rung that ranks trials unlike the next one is retired).
"""

from search.pruning.promotion import Paused, Rungs, RungTable
from search.pruning.pruner import Pruner
from search.pruning.pruners import HyperbandPruner, make_pruner

__all__ = ["HyperbandPruner", "Paused", "Pruner", "RungTable", "Rungs", "make_pruner"]
