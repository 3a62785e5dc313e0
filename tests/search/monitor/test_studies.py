"""`hpsearch studies`: every study of a storage, on both backends."""

from __future__ import annotations

import json

import pytest

from search.commands import main as hpsearch
from search.db import fenced_writes
from search.db.storage import open_storage
from search.study.studies import create_study
from tests.helpers.configs import make_config
from tests.helpers.dispatch import claim_a_new_trial, register


def test_studies_lists_every_study_with_counts_best_and_last_activity(
    storage_url: str, study_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = open_storage(storage_url)
    done, fresh = f"{study_name}-done", f"{study_name}-fresh"
    ref, _ = create_study(storage, make_config(done, n_trials=3))
    create_study(storage, make_config(fresh, n_trials=5))
    register(storage, ref.study_id, f"w-{study_name[-6:]}", grace_s=60)
    for value in (0.25, 0.75):
        claim = claim_a_new_trial(storage, ref.study_id, f"w-{study_name[-6:]}")
        fenced_writes.finish(storage, claim, "COMPLETE", value, {}, intermediate={1: value})
    claim_a_new_trial(storage, ref.study_id, f"w-{study_name[-6:]}")  # one running

    assert hpsearch(["studies", "--storage", storage_url, "--json"]) == 0
    listed = {s["study"]: s for s in json.loads(capsys.readouterr().out)["studies"]}
    assert listed[done]["complete"] == 2 and listed[done]["running"] == 1
    assert listed[done]["best"] == 0.75 and listed[done]["epochs_trained"] == 2
    assert listed[done]["last_activity"] is not None
    assert listed[fresh]["complete"] == 0 and listed[fresh]["best"] is None
    assert listed[fresh]["last_activity"] is None

    assert hpsearch(["studies", "--storage", storage_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    # Other tests' studies share the session's database: one with an epoch budget adds the
    # "budget used" column (a "-" for studies without one).
    budgeted = any(s["budget_epochs"] is not None for s in listed.values())
    assert lines[0].split() == [
        "study", "done", "complete", "pruned", "failed", "running", "waiting", "best",
        *(["budget", "used"] if budgeted else []), "last", "activity",
    ]  # fmt: skip
    (row,) = [line for line in lines if line.startswith(done)]
    assert row.split()[:9] == [done, "2/3", "2", "0", "0", "1", "0", "val_accuracy", "0.75"]
    assert row.endswith("s ago")
    (row,) = [line for line in lines if line.startswith(fresh)]
    assert row.split()[1] == "0/5" and row.split()[7] == "-" and row.endswith("never")
