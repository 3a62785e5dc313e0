"""Sampling: the study's sampler, and the queue of sampled trials workers claim from.

- `samplers`: `make_sampler`, seeds, the samplers that learn from results;
- `sample_ahead`: `TrialSampler`, one process at a time topping the queue up;
  `queue_first_trials`, what `create` queues;
- `mirror`: `StudyMirror`, the study's trials in memory for TPE, CMA-ES and GP;
- `setup`: `set_up_study`, where a study begins (created, noted, first trials queued);
- `hedge`: now and then a trial of a TPE + ASHA study drawn at random and first judged at the
  third rung, the gap to the next growing from 10 to 40 trials while hedges lose (against a
  model and rungs that settle on what starts fast).
"""

from search.sampling.mirror import StudyMirror
from search.sampling.sample_ahead import TrialSampler, queue_first_trials
from search.sampling.samplers import derived_seed, make_sampler
from search.sampling.setup import set_up_study

__all__ = [
    "StudyMirror",
    "TrialSampler",
    "derived_seed",
    "make_sampler",
    "queue_first_trials",
    "set_up_study",
]
