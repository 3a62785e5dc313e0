"""The promotion rule of promotion-based ASHA (search/pruning/promotion.py): no database."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from search.pruning.promotion import Paused, Rungs, RungTable, promotable_count


def test_rung_levels_lie_below_the_full_budget_in_every_bracket() -> None:
    rungs = Rungs(min_resource=1, reduction_factor=3, max_resource=27, brackets=4)
    assert rungs.levels(0) == [1, 3, 9]
    assert rungs.levels(1) == [3, 9]
    assert rungs.levels(3) == []  # the bracket that trains every trial fully
    assert rungs.max_brackets() == 4
    assert rungs.next_level(0, 3) == 9
    assert rungs.next_level(0, 9) == 27
    # 50 epochs, eta 3: rungs 1, 3, 9, 27; the trial completes at 50.
    assert Rungs(1, 3, 50).levels(0) == [1, 3, 9, 27]


def test_brackets_are_drawn_by_trial_number_with_hyperbands_weights() -> None:
    rungs = Rungs(min_resource=1, reduction_factor=3, max_resource=27, brackets=4)
    drawn = Counter(rungs.bracket_of(n, seed=0) for n in range(4900))
    # Hyperband's bracket sizes 27 : 12 : 6 : 4 (of 49).
    for bracket, size in enumerate((27, 12, 6, 4)):
        assert drawn[bracket] / 4900 == pytest.approx(size / 49, abs=0.03)
    assert rungs.bracket_of(17, seed=0) == rungs.bracket_of(17, seed=0)  # every worker agrees
    assert Rungs(1, 3, 27).bracket_of(17) == 0  # ASHA: one bracket


def test_only_the_top_floor_n_over_eta_are_promotable() -> None:
    table = RungTable(maximize=True)
    for trial_id, value in enumerate([0.1, 0.2]):
        table.record(trial_id, 0, 1, value)
    # Two trials at a rung with eta 3: none may pass yet (the first trials never pass free).
    assert not table.is_promotable(0, 1, 0.2, reduction_factor=3)
    table.record(2, 0, 1, 0.3)
    assert table.is_promotable(0, 1, 0.3, reduction_factor=3)
    assert not table.is_promotable(0, 1, 0.2, reduction_factor=3)
    for trial_id, value in enumerate([0.05, 0.06, 0.07], start=3):
        table.record(trial_id, 0, 1, value)
    # Six recorded: the top two. A trial that ranked poorly at first is promotable later.
    assert table.is_promotable(0, 1, 0.2, reduction_factor=3)
    assert not table.is_promotable(0, 1, 0.1, reduction_factor=3)
    # Another bracket's rung of the same level is another table.
    assert table.recorded(1, 1) == 0


def test_minimize_ranks_the_lowest_first_and_nan_last() -> None:
    table = RungTable(maximize=False)
    for trial_id, value in enumerate([3.0, 1.0, 2.0, math.nan, 5.0, 4.0]):
        table.record(trial_id, 0, 2, value)
    assert table.is_promotable(0, 2, 1.0, reduction_factor=3)
    assert table.is_promotable(0, 2, 2.0, reduction_factor=3)
    assert not table.is_promotable(0, 2, 3.0, reduction_factor=3)
    assert not table.is_promotable(0, 2, math.nan, reduction_factor=3, draining=True)


def test_recording_a_trial_again_replaces_its_value() -> None:
    table = RungTable(maximize=True)
    table.record(1, 0, 1, 0.5)
    table.record(1, 0, 1, 0.9)
    assert table.recorded(0, 1) == 1
    assert table.rank(0, 1, 0.6) == 1


def test_a_trial_arriving_at_a_rung_goes_on_at_once_when_it_ranks_in_the_top() -> None:
    table = RungTable(maximize=True)
    for trial_id, value in enumerate([0.1, 0.2]):
        table.record(trial_id, 0, 1, value)
    # Counted with the two before it, the third ranks first of three.
    assert table.goes_on(2, 0, 1, 0.3, reduction_factor=3)
    assert not table.goes_on(2, 0, 1, 0.15, reduction_factor=3)


def test_the_highest_rung_is_resumed_first_then_the_best_value() -> None:
    table = RungTable(maximize=True)
    for trial_id in range(9):
        table.record(trial_id, 0, 1, trial_id / 10)
    for trial_id in (6, 7, 8):
        table.record(trial_id, 0, 3, trial_id / 10)
    paused = [
        Paused(trial_id=7, bracket=0, level=1, value=0.7),
        Paused(trial_id=6, bracket=0, level=1, value=0.6),
        Paused(trial_id=8, bracket=0, level=3, value=0.8),
        Paused(trial_id=2, bracket=0, level=1, value=0.2),
    ]
    best = table.next_to_resume(paused, reduction_factor=3)
    assert best is not None and best.trial_id == 8  # top 1 of 3 at rung 3
    rest = [p for p in paused if p.trial_id != 8]
    best = table.next_to_resume(rest, reduction_factor=3)
    assert best is not None and best.trial_id == 7  # top 3 of 9 at rung 1: 8, 7, 6
    assert table.next_to_resume([paused[3]], reduction_factor=3) is None
    assert table.next_to_resume([], reduction_factor=3) is None


def test_draining_promotes_the_last_trials_of_a_small_rung() -> None:
    assert promotable_count(2, 3) == 0
    assert promotable_count(2, 3, draining=True) == 1
    assert promotable_count(9, 3, draining=True) == 3
    table = RungTable(maximize=True)
    table.record(1, 0, 3, 0.4)
    table.record(2, 0, 3, 0.5)
    paused = [Paused(1, 0, 3, 0.4), Paused(2, 0, 3, 0.5)]
    assert table.next_to_resume(paused, reduction_factor=3) is None
    best = table.next_to_resume(paused, reduction_factor=3, draining=True)
    assert best is not None and best.trial_id == 2
