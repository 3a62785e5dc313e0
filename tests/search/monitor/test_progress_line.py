"""The live line of `hpsearch run --workers N` on a terminal: under ASHA it shows the paused
trials and the one leading them, not only "no best yet" while most trials wait at a rung."""

from __future__ import annotations

from search.monitor.progress import progress_text
from search.monitor.status import BestTrial, PausedTrial, StudyStatus


def _status(best: BestTrial | None, leading: PausedTrial | None, paused: int) -> StudyStatus:
    return StudyStatus(
        study="digits",
        direction="maximize",
        metric="val_accuracy",
        n_trials=None,
        complete=0 if best is None else 1,
        pruned=2,
        failed=0,
        running=2,
        waiting=0,
        paused=paused,
        budget=None,
        best=best,
        live_workers=2,
        running_trials=[],
        leading_paused=leading,
    )


def test_the_line_names_the_leading_paused_trial_before_any_trial_finished() -> None:
    text = progress_text(_status(None, PausedTrial(7, 0.98611, 9), paused=18))
    assert text == (
        "2 finished (2 pruned), 2 running, 18 paused | leading paused 0.9861 (trial 7, rung 9)"
    )


def test_the_line_shows_the_best_finished_trial_beside_the_leading_paused_one() -> None:
    best = BestTrial(4, 0.95, {"lr": 0.01})
    text = progress_text(_status(best, PausedTrial(7, 0.98611, 9), paused=3))
    assert text.endswith(
        "3 paused | best val_accuracy 0.95 (trial 4) | leading paused 0.9861 (trial 7, rung 9)"
    )
    assert progress_text(_status(best, None, paused=0)) == (
        "3 finished (2 pruned), 2 running | best val_accuracy 0.95 (trial 4)"
    )
