"""What `hpsearch run` says at its end: the counts, the best trial, where the results are, and
what to run next.

    study 'digits' finished: 20 trials (13 complete, 6 pruned, 1 failed)
      best: trial 7  val_accuracy 0.9778  params {"lr": 0.0031, ...}
    results: sqlite:///hpsearch.db; checkpoints: the best trial's final weights (...), those of
      trials paused when the study ended (...), in hpsearch.db.artifacts/; the others deleted
    next: hpsearch trials --study digits (every trial) | hpsearch best --study digits (params to
          reuse, --weights) | hpsearch dashboard (charts) | hpsearch compare ...

Stopped (Ctrl-C), it counts every trial that exists (queued ones included), says that the same
command continues the study, and names the leading paused trial beside the best complete one:

    study 'digits' stopped: 10 trials so far (0 complete, 6 paused, 4 queued)
      continue: run the same command again (or hpsearch worker --study digits)
      best: none yet (no complete trial)
      leading paused: trial 3  val_accuracy 0.947222 at rung 3 (not finished: waits for promotion)
"""

from __future__ import annotations

import shlex

from search.db.storage import Storage
from search.monitor.status import StudyStatus, format_best, format_leading_paused

__all__ = ["artifacts_place", "run_summary"]


def artifacts_place(storage: Storage, directory: str | None) -> str:
    """Where the study's checkpoints (and attached reports) are kept, in words."""
    if directory:
        return f"{directory}/"
    if storage.is_postgres:
        return "in the database"
    db = storage.sqlite_path()
    return f"{db}.artifacts/" if db is not None else "beside the database"


def _in(place: str) -> str:
    return place if place.startswith(("in ", "beside ")) else f"in {place}"


def run_summary(
    status: StudyStatus,
    storage: Storage,
    artifacts: str | None,
    *,
    default_storage: bool,
    already: bool = False,
) -> str:
    """The closing lines of `hpsearch run` (`already`: the study was finished before this run;
    `default_storage`: no --storage or --schema, so the next commands need none)."""
    name = status.study
    counts = ", ".join(
        f"{getattr(status, k)} {k}"
        for k in ("complete", "pruned", "failed")
        if getattr(status, k) or k == "complete"
    )
    state = "was already finished" if already else "finished" if status.done else "stopped"
    storage_flag = "" if default_storage else " --storage URL"
    study = shlex.quote(name)
    if status.done or already:
        head = f"{status.finished_text.replace('finished', 'trials')} ({counts})"
        kept = (
            "the best trial's final weights (hpsearch best --weights), those of trials paused "
            "at a rung or cut by the budget when the study ended (a raised budget goes on with "
            "them) and reports, "
            f"{_in(artifacts_place(storage, artifacts))}; the other ended trials' are deleted "
            "(hpsearch delete removes the rest with the study)"
        )
    else:  # stopped early: what exists, not only what finished
        unfinished = ", ".join(
            f"{getattr(status, k)} {k}"
            for k in ("running", "paused", "waiting")
            if getattr(status, k)
        )
        # `waiting` is queued trials (sampled ahead, or handed back with their checkpoint).
        unfinished = unfinished.replace("waiting", "queued")
        # Every trial that exists: a trial handed back at Ctrl-C is queued with its checkpoint.
        total = status.finished + status.running + status.paused + status.waiting
        head = f"{total} trials so far ({counts}{', ' if unfinished else ''}{unfinished})"
        kept = (
            f"{artifacts_place(storage, artifacts)} (the unfinished trials' checkpoints are "
            "kept: the same command continues the study where it stopped)"
        )
    lines = [
        f"study {name!r} {state}: {head}",
        format_best(status),
        f"results: {storage.safe_url}; checkpoints: {kept}",
        f"next: hpsearch trials --study {study}{storage_flag} (every trial) | hpsearch best "
        f"--study {study}{storage_flag} (params to reuse, --weights) | hpsearch dashboard"
        f"{storage_flag} (charts in a browser) | hpsearch compare CONFIG --samplers random,tpe "
        "--budget N --repeats K --out DIR (strategies side by side)",
    ]
    leading = format_leading_paused(status)
    if leading is not None and not (status.done or already):
        lines.insert(2, leading)
    if not (status.done or already):
        lines.insert(
            1,
            "  continue: run the same command again (or hpsearch worker --study "
            f"{study}{storage_flag})",
        )
    if already:
        lines.append(
            f"nothing was run: to search again, give the config a new study name (or remove "
            f"this one: hpsearch delete --study {study}{storage_flag})"
        )
    return "\n".join(lines)
