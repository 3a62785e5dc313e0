"""The study page of a large study fed a bounded summary of its trials; every trial still listed.

optuna-dashboard's study page loads every trial of the study (params, intermediate values,
attributes) and draws every one: at 10,000 trials its answer is 24 MB of JSON that takes
seconds to build, and the browser takes longer still to draw it (bench/BENCHMARKS.md, "Dashboard
at 10,000 trials"). Past `SUMMARY_ABOVE` trials, `hpsearch dashboard` feeds the study's top page
(history, intermediate values, timeline, best trials) and its analytics page a summary instead:

- the `BEST` best complete trials (the Pareto front, up to `BEST`, for several objectives) and
  every trial that was a new best when it finished, so that the history chart's best-value line
  is the study's own;
- the `LATEST` latest trials (the timeline's range) and every running trial;
- the `PAUSED` leading paused trials (WAITING with reported values: an ASHA study's candidates
  for promotion), ranked by their last reported value;
- every k-th trial by number, k such that this sample has about `SAMPLE` trials: the shape of
  the whole study on the history chart.

At 10,000 trials that is about 600 trials, whatever the study's size. The page says so in a
banner, with a link to the trial list, which (like every other page) still loads every trial;
`/dashboard/studies/ID/trials?numbers=N` opens trial N.

How it is fed: the page's script (`search/monitor/dashboard_frontend.py`) asks
`/api/studies/ID?after=0&hpsearch_summary=1` on those two pages. `TrialSummary` answers that
with optuna-dashboard's own answer (everything but the trials, which optuna-dashboard computes
as always: best trials, search spaces, attribute names, note) and the summary's trials in
optuna-dashboard's own serialization, and says what it left out in the `X-Hpsearch-Summary`
header, which the banner shows. Every other request goes to optuna-dashboard as it is, with the
study's trial count in `X-Hpsearch-Trials` (the page's script uses it to switch between the
summary and every trial as the user moves between pages).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from optuna.trial import FrozenTrial, TrialState

__all__ = [
    "BEST",
    "LATEST",
    "PAUSED",
    "SAMPLE",
    "SUMMARY_ABOVE",
    "TrialSummary",
    "TrialsShown",
    "summarize_trials",
]

logger = logging.getLogger("search.monitor.dashboard")

SUMMARY_ABOVE = 2000
"""Studies with more trials than this get a summary on their top and analytics pages."""
BEST = 100
"""The best complete trials in the summary (for several objectives: BEST of the Pareto front)."""
LATEST = 100
"""The latest trials in the summary (the timeline shows the last 100)."""
PAUSED = 50
"""The leading paused trials in the summary."""
SAMPLE = 300
"""About this many trials sampled evenly by number (the history chart's shape)."""

SUMMARY_PARAMETER = "hpsearch_summary"
SUMMARY_HEADER = "X-Hpsearch-Summary"
TRIALS_HEADER = "X-Hpsearch-Trials"

_STUDY_PATH = re.compile(r"^/api/studies/(\d+)$")


@dataclass(frozen=True)
class TrialsShown:
    """Which trials a summary shows (their numbers, ascending) and why, in words."""

    numbers: list[int]
    total: int
    description: str


def summarize_trials(
    trials: Sequence[FrozenTrial], directions: Sequence[str], front: Iterable[int] = ()
) -> TrialsShown:
    """The trials of the summary (see the module's docstring) out of `trials` (sorted by
    number, as Optuna returns them); `directions` as optuna-dashboard names them ("minimize",
    "maximize"), `front` the Pareto front's numbers when there are several objectives."""
    shown: set[int] = set()
    parts: list[str] = []
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.values]
    if len(directions) == 1:
        sign = -1.0 if directions[0] == "maximize" else 1.0
        ranked = sorted(complete, key=lambda t: (sign * t.values[0], t.number))
        best = [t.number for t in ranked[:BEST]]
        records, incumbent = [], math.inf
        for t in complete:  # in the order of their numbers
            if sign * t.values[0] < incumbent:
                incumbent = sign * t.values[0]
                records.append(t.number)
        shown.update(best, records)
        parts.append(f"the {len(best)} best")
        parts.append(f"every new best ({len(records)})")
    else:
        best = sorted(front)[:BEST]
        shown.update(best)
        parts.append(f"{len(best)} of the Pareto front")
    latest = [t.number for t in trials[-LATEST:]]
    shown.update(latest)
    parts.append(f"the {len(latest)} latest")
    running = [t.number for t in trials if t.state == TrialState.RUNNING]
    shown.update(running)
    if running:
        parts.append(f"every running one ({len(running)})")
    paused = [t for t in trials if t.state == TrialState.WAITING and t.intermediate_values]
    if paused:
        sign = -1.0 if directions[0] == "maximize" else 1.0
        leaders = sorted(paused, key=lambda t: (sign * _last_value(t), t.number))[:PAUSED]
        shown.update(t.number for t in leaders)
        parts.append(f"the {len(leaders)} leading paused ones")
    every = max(1, math.ceil(len(trials) / SAMPLE))
    shown.update(t.number for t in trials[::every])
    parts.append(f"every {_ordinal(every)} trial")
    total = len(trials)
    description = (
        f"This page shows {len(shown):,} of the study's {total:,} trials: "
        + ", ".join(parts[:-1])
        + f" and {parts[-1]}. The trial list has every trial."
    )
    return TrialsShown(sorted(shown), total, description)


def _last_value(trial: FrozenTrial) -> float:
    value = trial.intermediate_values[max(trial.intermediate_values)]
    return value if not math.isnan(value) else math.inf


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class TrialSummary:
    """WSGI middleware: `/api/studies/ID?after=0&hpsearch_summary=1` answered with a summary of
    the trials of a study of more than `SUMMARY_ABOVE` trials (optuna-dashboard's answer with
    the summary's trials); every other request goes to optuna-dashboard (`bottle_app`), study
    answers with the trial count in a header.

    It uses optuna-dashboard's (0.21) cached trial list and its trial serialization, which are
    private: `available` is False when they are not there, and then every request goes to
    optuna-dashboard as it is (the page's script then never gets a summary).
    """

    def __init__(self, bottle_app: Any, optuna_storage: Any, above: int = SUMMARY_ABOVE) -> None:
        self.app, self.storage, self.above = bottle_app, optuna_storage, above
        self._trials, self._serialize = _optuna_dashboard_internals()
        self.available = (
            self._trials is not None and getattr(bottle_app, "_inmemory_cache", None) is not None
        )

    def trials(self, study_id: int) -> list[FrozenTrial]:
        """The study's trials, from optuna-dashboard's cache (what its own answer reads)."""
        assert self._trials is not None
        return self._trials(self.app._inmemory_cache, self.storage, study_id)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        found = _STUDY_PATH.match(environ.get("PATH_INFO", ""))
        if not self.available or found is None or environ.get("REQUEST_METHOD") != "GET":
            return self.app(environ, start_response)
        study_id = int(found[1])
        query = parse_qs(environ.get("QUERY_STRING", ""))
        try:
            if query.get(SUMMARY_PARAMETER) and query.get("after", ["0"]) == ["0"]:
                trials = self.trials(study_id)
                if len(trials) > self.above:
                    return self._summary(environ, start_response, study_id, trials)
        except KeyError:  # no such study: optuna-dashboard's 404
            return self.app(environ, start_response)

        def with_count(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if status.startswith("200"):
                headers = [*headers, (TRIALS_HEADER, str(len(self.trials(study_id))))]
            return start_response(status, headers, exc_info)

        return self.app(environ, with_count)

    def _summary(
        self,
        environ: dict[str, Any],
        start_response: Callable[..., Any],
        study_id: int,
        trials: list[FrozenTrial],
    ) -> Any:
        # optuna-dashboard's own answer with none of its trials (`after` past the last one):
        # best trials, search spaces, attribute names, note, computed as it always does
        answer: dict[str, Any] = {}

        def remember(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            answer.update(status=status, headers=headers)
            return lambda data: answer.setdefault("written", []).append(data)

        inner = dict(environ, QUERY_STRING=f"after={len(trials)}")
        body = self.app(inner, remember)
        try:
            data = b"".join([*answer.get("written", []), *body])
        finally:
            if hasattr(body, "close"):
                body.close()
        if not answer["status"].startswith("200"):
            start_response(answer["status"], answer["headers"])
            return [data]
        study = json.loads(data)
        front = [t["number"] for t in study.get("best_trials", [])]
        shown = summarize_trials(trials, study["directions"], front)
        system_attrs = self.storage.get_study_system_attrs(study_id)
        assert self._serialize is not None
        by_number = {t.number: t for t in trials}
        study["trials"] = [
            self._serialize(study_id, by_number[n], system_attrs) for n in shown.numbers
        ]
        data = json.dumps(study).encode()
        start_response(
            "200 OK",
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(data))),
                (SUMMARY_HEADER, shown.description),
                (TRIALS_HEADER, str(shown.total)),
            ],
        )
        return [data]


def _optuna_dashboard_internals() -> tuple[Callable[..., Any] | None, Callable[..., Any] | None]:
    """optuna-dashboard's cached trial list and trial serialization (0.21), or Nones."""
    try:
        from optuna_dashboard._serializer import serialize_frozen_trial
        from optuna_dashboard._storage import get_trials
    except ImportError:
        logger.debug("optuna-dashboard's internals moved: large studies' pages load every trial")
        return None, None
    return get_trials, serialize_frozen_trial
