"""MLflow: each trial one run of the experiment, under the study's parent run.

Runs are found by tag, not remembered: the trial's run carries ``hpsearch.trial_key`` =
``<study uid>/<number>``, the study's parent run ``hpsearch.study_key`` = ``<study uid>``. So
whichever worker trains a trial, on whichever machine, and `hpsearch export` later, write to
the same run. A trial's run is created only by the worker holding the trial (or by an
export). The study's parent run may be created by several workers starting together: each
waits a second after creating it, looks again, keeps the earliest and deletes its own if it is
not that one.

What appears: params (the trial's), the study's metric at every epoch (step = epoch), status
FINISHED (complete), KILLED (pruned, with ``hpsearch.pruned_at_epoch``) or FAILED (with
``hpsearch.fail_reason``), ``hpsearch.state``, and the provenance tags ``hpsearch.hostname``,
``hpsearch.device_name``, ``hpsearch.precision``, ``hpsearch.git_commit``,
``hpsearch.data_fingerprint``, ``hpsearch.hpsearch_version``, ``hpsearch.torch_version`` ...

Credentials: MLflow's own MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME/PASSWORD (the URI in
the config never holds a password).
"""

from __future__ import annotations

import os
import time
from typing import Any

from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException, RestException
from mlflow.tracking import MlflowClient

from search.db.storage import mask_url
from search.study.settings import MlflowSettings
from search.study.studies import StudyRef
from search.tracking.base import Tracker, study_params
from search.tracking.records import KEY_TAG, STUDY_KEY_TAG, TrialEnded, TrialStarted, trial_key

__all__ = ["QUICK_FAIL_ENV", "MlflowTracker"]

QUICK_FAIL_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
"""MLflow's request settings in a worker (unless set already): a failed request is retried by
the worker's sender, not inside MLflow's client for minutes."""

PARENT_TAG = "mlflow.parentRunId"
STATUS = {
    "complete": RunStatus.to_string(RunStatus.FINISHED),
    "pruned": RunStatus.to_string(RunStatus.KILLED),
    "failed": RunStatus.to_string(RunStatus.FAILED),
}
RUNNING = RunStatus.to_string(RunStatus.RUNNING)


class MlflowTracker(Tracker):
    name = "mlflow"

    def __init__(
        self, settings: MlflowSettings, study: StudyRef, *, quick_fail: bool = False
    ) -> None:
        if quick_fail:
            # One try per request, 10 s at most: the worker's sender retries, on its thread.
            # MLflow reads these from the environment only: set for the whole (worker) process.
            for name, value in QUICK_FAIL_ENV.items():
                os.environ.setdefault(name, value)
        # Not a "View run" line on stdout per finished run: the worker logs what it does.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        self.client = MlflowClient(tracking_uri=settings.uri)
        self.study = study
        self.experiment = settings.experiment or study.name
        self.where = f"at {mask_url(settings.uri)} (experiment {self.experiment!r})"
        self._experiment_id: str | None = None
        self._parent: str | None = None
        self._runs: dict[int, str] = {}
        self._metric = study.config.study.metric

    # -- Tracker ------------------------------------------------------------------------------

    def start_trial(self, started: TrialStarted) -> None:
        parent = self._parent_run()
        run_id = self._find(KEY_TAG, started.key)
        if run_id is None:  # a new run: nothing to compare with
            # Only the worker holding the trial's lease (or one export) creates it.
            run_id = self.client.create_run(
                self._experiment(),
                start_time=_ms(started.started_at),
                tags={
                    KEY_TAG: started.key,
                    PARENT_TAG: parent,
                    "hpsearch.study": self.study.name,
                    "hpsearch.trial_number": str(started.number),
                },
                run_name=f"trial {started.number}",
            ).info.run_id
            status, params, tags, have = RUNNING, {}, {PARENT_TAG: parent}, set()
        else:  # resumed, or exported again: only what the run lacks
            run = self.client.get_run(run_id)
            status, params, tags = run.info.status, run.data.params, run.data.tags
            have = {m.step for m in self.client.get_metric_history(run_id, self._metric)}
        self._runs[started.number] = run_id
        if started.running and status != RUNNING:
            self.client.update_run(run_id, status=RUNNING)  # resumed: running again
        new_tags = {**started.tags, PARENT_TAG: parent}
        if started.running:
            new_tags["hpsearch.state"] = "running"
        self._log(
            run_id,
            metrics=[
                Metric(self._metric, float(v), _ms(started.started_at), int(step))
                for step, v in sorted(started.reported.items())
                if int(step) not in have
            ],
            params=[Param(k, _text(v, 6000)) for k, v in started.params.items() if k not in params],
            tags={k: v for k, v in new_tags.items() if tags.get(k) != v},
        )

    def log_epochs(self, number: int, points: list[tuple[int, float, float]]) -> None:
        run_id = self._runs.get(number) or self._find(KEY_TAG, self._key(number))
        if run_id is None:
            raise LookupError(f"trial {number} has no run (its start was not recorded)")
        self._log(
            run_id, metrics=[Metric(self._metric, float(v), _ms(at), e) for e, v, at in points]
        )

    def end_trial(self, ended: TrialEnded) -> None:
        runs = self._search(KEY_TAG, self._key(ended.number))
        run_id = self._runs.pop(ended.number, None) or (runs[0].info.run_id if runs else None)
        if run_id is None:
            raise LookupError(f"trial {ended.number} has no run (its start was not recorded)")
        for extra in runs:
            # A stopped worker's request that landed late (it created the run after the next
            # worker looked): the run that ends the trial has every value; the extra goes.
            if extra.info.run_id != run_id:
                self.client.delete_run(extra.info.run_id)
        run = self.client.get_run(run_id)
        tags = {**ended.tags, "hpsearch.state": ended.state}
        pruned_at = ended.pruned_at
        if ended.state == "pruned" and pruned_at is None:  # ended by the study's end
            steps = [m.step for m in self.client.get_metric_history(run_id, self._metric)]
            pruned_at = max(steps, default=None)
        if pruned_at is not None:
            tags["hpsearch.pruned_at_epoch"] = str(pruned_at)
        if ended.reason:
            tags["hpsearch.fail_reason"] = _text(ended.reason, 5000)
        self._log(run_id, tags={k: v for k, v in tags.items() if run.data.tags.get(k) != v})
        if run.info.status != STATUS[ended.state]:
            self.client.set_terminated(run_id, STATUS[ended.state], end_time=_ms(ended.ended_at))

    def hand_back(self, number: int, why: str) -> None:
        run_id = self._runs.pop(number, None) or self._find(KEY_TAG, self._key(number))
        if run_id is not None:  # the run stays RUNNING: the trial is not over
            self._log(run_id, tags={"hpsearch.state": f"handed back ({why})"})

    def end_study(self) -> None:
        parent = self._parent_run()
        if self.client.get_run(parent).info.status != STATUS["complete"]:
            self.client.set_terminated(parent, STATUS["complete"])

    def is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, RestException):  # the server answered: retry only its own troubles
            status = exc.get_http_status_code()
            return status >= 500 or status == 429
        # Connection refused, timed out, reset: MlflowException (its retries spent) or raw.
        return isinstance(exc, (MlflowException, OSError, ConnectionError, TimeoutError)) or (
            type(exc).__module__.startswith(("requests", "urllib3"))
        )

    # -- runs ---------------------------------------------------------------------------------

    def _key(self, number: int) -> str:
        return trial_key(self.study.uid, number)

    def _experiment(self) -> str:
        if self._experiment_id is None:
            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                try:
                    self._experiment_id = self.client.create_experiment(self.experiment)
                except RestException as exc:  # created at the same moment by another worker
                    if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                        raise
                    found = self.client.get_experiment_by_name(self.experiment)
            if found is not None:
                if found.lifecycle_stage == "deleted":
                    raise ValueError(  # refused for good, not retried
                        f"experiment {self.experiment!r} is deleted: restore it, or choose "
                        "another tracking.mlflow.experiment"
                    )
                self._experiment_id = found.experiment_id
        assert self._experiment_id is not None
        return self._experiment_id

    def _parent_run(self) -> str:
        if self._parent is None:
            self._parent = self._find(STUDY_KEY_TAG, self.study.uid) or self._create_once(
                STUDY_KEY_TAG,
                self.study.uid,
                lambda: self.client.create_run(
                    self._experiment(),
                    tags={STUDY_KEY_TAG: self.study.uid, "hpsearch.study": self.study.name},
                    run_name=f"study {self.study.name}",
                ),
                params=study_params(self.study),
                settle_s=1.0,  # the workers of a study start together: let theirs appear
            )
        return self._parent

    def _search(self, tag: str, value: str) -> list[Any]:
        runs = self.client.search_runs(
            [self._experiment()], filter_string=f"tags.`{tag}` = '{value}'", max_results=50
        )
        return sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))

    def _find(self, tag: str, value: str) -> str | None:
        runs = self._search(tag, value)
        return runs[0].info.run_id if runs else None

    def _create_once(
        self,
        tag: str,
        value: str,
        create: Any,
        params: dict[str, Any] | None = None,
        settle_s: float = 0.0,
    ) -> str:
        """Create the run tagged `tag` = `value`; if another writer created one at the same
        moment, every writer keeps the earliest and the others' are deleted."""
        created = create().info.run_id
        if params:
            self._log(created, params=[Param(k, _text(v, 6000)) for k, v in params.items()])
        if settle_s:
            time.sleep(settle_s)
        keep = self._find(tag, value) or created
        if keep != created:
            self.client.delete_run(created)
        return keep

    def _log(
        self,
        run_id: str,
        *,
        metrics: list[Metric] | None = None,
        params: list[Param] | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        tag_list = [RunTag(k, v) for k, v in (tags or {}).items()]
        # A batch holds at most 1000 metrics, 100 params, 100 tags.
        while metrics or params or tag_list:
            self.client.log_batch(
                run_id,
                metrics=(metrics or [])[:1000],
                params=(params or [])[:100],
                tags=tag_list[:100],
            )
            metrics, params, tag_list = (metrics or [])[1000:], (params or [])[100:], tag_list[100:]


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _text(value: Any, limit: int) -> str:
    return str(value)[:limit]
