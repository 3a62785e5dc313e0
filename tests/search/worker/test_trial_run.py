"""How a trial function's outcome becomes the trial's recorded end."""

from __future__ import annotations

import math

import pytest

from search.worker.trial import TrialEnd, TrialOutcome, trial_end


@pytest.mark.parametrize(
    ("outcome", "reported", "expected"),
    [
        (TrialOutcome("completed", 0.93), {1: 0.9, 2: 0.93}, TrialEnd("COMPLETE", 0.93)),
        # A pruned trial keeps its last score, as Optuna's tell() records it.
        (TrialOutcome("pruned", None), {1: 0.4, 3: 0.5}, TrialEnd("PRUNED", 0.5)),
        (TrialOutcome("pruned", 0.45), {1: 0.4}, TrialEnd("PRUNED", 0.45)),
        (TrialOutcome("pruned", None), {}, TrialEnd("PRUNED", None)),
        (
            TrialOutcome("diverged", None, reason="loss is nan at epoch 2, step 7"),
            {1: 0.3},
            TrialEnd("FAIL", None, "loss is nan at epoch 2, step 7"),
        ),
        (
            TrialOutcome("failed", 0.7, reason="ValueError: bad label"),
            {1: 0.7},
            TrialEnd("FAIL", None, "ValueError: bad label"),
        ),
        (TrialOutcome("failed"), {}, TrialEnd("FAIL", None, "the trial ended failed")),
        # No usable result is no result, whatever the trial function said.
        (
            TrialOutcome("completed", math.nan),
            {},
            TrialEnd("FAIL", None, "the trial's value is nan"),
        ),
        (
            TrialOutcome("completed", math.inf),
            {},
            TrialEnd("FAIL", None, "the trial's value is inf"),
        ),
        # An infinite score at a pruned rung is still a (terrible) score.
        (TrialOutcome("pruned", -math.inf), {}, TrialEnd("PRUNED", -math.inf)),
    ],
)
def test_a_trials_end(
    outcome: TrialOutcome, reported: dict[int, float], expected: TrialEnd
) -> None:
    assert trial_end(outcome, reported) == expected
