"""`hpsearch estimate`: the training memory of a study's configurations before launch, and
(`--measure`) the efficiency study of one configuration. torch loads only when a command runs.
"""

from search.estimate.estimate import estimate_memory, measure_techniques, run_estimate

__all__ = ["estimate_memory", "measure_techniques", "run_estimate"]
