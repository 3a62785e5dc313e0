"""Pruning: the study's `[pruner]` made into an Optuna pruner, and the decisions taken on a
light, incremental view of the study's reports.

- `pruners`: `make_pruner`, hpsearch's Hyperband;
- `view`: `Pruner`, deciding per report from the rungs it reads incrementally.
"""

from search.pruning.pruners import HyperbandPruner, make_pruner
from search.pruning.view import Pruner

__all__ = ["HyperbandPruner", "Pruner", "make_pruner"]
