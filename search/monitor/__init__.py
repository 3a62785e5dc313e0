"""Watching studies and the fleet, read-only: `hpsearch status` (and `--watch`), `hpsearch
workers`, the progress line of `run`, and optuna-dashboard with the trials' artifacts.

- `status`: `study_status`, the counts, the best trial, who runs what;
- `watch`: the status, live; `progress`: the line below local workers' logs;
- `workers`: every worker of every machine, and deleting a study;
- `dashboard`: optuna-dashboard on the study database.
"""

from search.monitor.dashboard import serve
from search.monitor.progress import StudyProgress
from search.monitor.status import format_status, study_status
from search.monitor.watch import watch
from search.monitor.workers import delete_study, list_workers

__all__ = [
    "StudyProgress",
    "delete_study",
    "format_status",
    "list_workers",
    "serve",
    "study_status",
    "watch",
]
