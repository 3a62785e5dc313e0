"""The note optuna-dashboard shows on a study's page: its config and the command that made it.

Written once, by `hpsearch create` or `run` when they create the study, as optuna-dashboard's
own `save_note` stores it (a Markdown note kept in the study's system attributes; the
dashboard's `get_note` reads it back in the tests).
Every argument of the command line passes through `mask_url`, so a `--storage` URL with a
password shows `***`; the storage is shown masked too.

A study with a budget or paused trials gets a progress line right under the heading, kept up
to date by the workers (`refresh_progress_line`, whenever they publish the study's user
attributes `budget` and `paused trials`, at most every 5 s), so the dashboard shows it first
rather than in "Study User Attributes" far down the page.

Example of a note's head::

    ## digits

    **Budget**: 120/300 epochs (180 left) · **paused trials**: 7

    Created by `hpsearch create examples/digits.toml --storage postgresql+psycopg://ml:***@db/hp`
"""

from __future__ import annotations

import datetime
import json
import shlex
import socket
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from search.db.statements import upsert_attributes
from search.db.storage import Storage, mask_url
from search.db.tables import study_system_attributes
from search.study.reuse import as_toml
from search.study.settings import StudyConfig
from search.study.spending import budget_line, budget_spent
from search.study.studies import StudyRef

__all__ = [
    "command_line",
    "config_toml",
    "progress_line",
    "refresh_progress_line",
    "save_study_note",
    "study_note",
]

# optuna-dashboard's note, as its `save_note` stores it: a version and the Markdown body in
# chunks of at most 2045 characters, all study system attributes.
_NOTE_VERSION = "dashboard:note_ver"
_NOTE_CHUNK = "dashboard:note_str:"
_CHUNK_CHARS = 2045
_PROGRESS_STARTS = ("**Budget**:", "**Paused trials**:")


def progress_line(budget: str | None, paused: int | None) -> str:
    """'**Budget**: 120/300 epochs (180 left) · **paused trials**: 7' (either part alone)."""
    if budget is not None:
        line = f"**Budget**: {budget}"
        return line if paused is None else f"{line} · **paused trials**: {paused}"
    return f"**Paused trials**: {paused}"


def refresh_progress_line(conn: Connection, study_id: int, line: str) -> None:
    """Put `line` under the heading of the study's note (replacing the progress line there),
    in the transaction `conn`, which holds the study's lock (writers take turns). The rest
    of the note, edits made in the dashboard included, stays as it is; nothing is written
    when the line is unchanged."""
    attrs = _note_attrs(conn, study_id)
    body = _note_body(attrs)
    lines = body.split("\n") if body else []
    at = next((i for i, x in enumerate(lines) if x.startswith(_PROGRESS_STARTS)), None)
    if at is not None:
        if lines[at] == line:
            return
        lines[at] = line
    elif lines and lines[0].startswith("#"):
        lines[1:1] = ["", line]
    else:
        lines[0:0] = [line, ""]
    _write_note(conn, study_id, "\n".join(lines), attrs)


def _note_attrs(conn: Connection, study_id: int) -> dict[str, Any]:
    """The study's note as stored: its version and its chunks, by key."""
    t = study_system_attributes.c
    rows = conn.execute(
        sa.select(t.key, t.value_json).where(t.study_id == study_id, t.key.like("dashboard:note%"))
    ).all()
    return {key: json.loads(value) for key, value in rows}


def _note_body(attrs: dict[str, Any]) -> str:
    chunks = [k for k in attrs if k.startswith(_NOTE_CHUNK)]
    return "".join(attrs[f"{_NOTE_CHUNK}{i}"] for i in range(len(chunks)))


def _write_note(conn: Connection, study_id: int, body: str, attrs: dict[str, Any]) -> None:
    """Store `body` as the study's note over the one stored (`attrs`), as optuna-dashboard's
    `save_note` does: chunks of at most 2045 characters, the old ones past the new end blanked,
    the version one up (the dashboard's editor checks it)."""
    old_chunks = sum(1 for k in attrs if k.startswith(_NOTE_CHUNK))
    new = {
        f"{_NOTE_CHUNK}{i}": body[start : start + _CHUNK_CHARS]
        for i, start in enumerate(range(0, len(body), _CHUNK_CHARS))
    }
    new.update({f"{_NOTE_CHUNK}{i}": "" for i in range(len(new), old_chunks)})
    new[_NOTE_VERSION] = int(attrs.get(_NOTE_VERSION, 0)) + 1
    upsert_attributes(conn, study_system_attributes, study_id, new)


def command_line(argv: Sequence[str]) -> str:
    """`hpsearch ARGS...` as typed, every password masked, quoted for a shell."""
    return shlex.join(["hpsearch", *(mask_url(arg) for arg in argv)])


def config_toml(config: StudyConfig) -> str:
    """The study's stored config (every default filled in), as TOML."""
    lines: list[str] = []
    for section, values in config.to_dict().items():
        if isinstance(values, list):  # [[study.enqueue]] tables
            lines.extend(as_toml(table, "[[study.enqueue]]") + "\n" for table in values)
            continue
        lines.append(f"[{section}]")
        for key, value in values.items():
            if value is not None:  # TOML has no null: a missing key means the default
                lines.append(f"{_key(key)} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def study_note(study: StudyRef, storage: Storage, argv: Sequence[str]) -> str:
    """The Markdown note for a study created by the command `argv` (without the program)."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    s = study.config.study
    s_paused = study.config.pruner.pauses
    spent = budget_spent(s, 0, None)
    progress = (
        progress_line(None if spent is None else budget_line(spent), 0 if s_paused else None)
        + "\n\n"
        if spent is not None or s_paused
        else ""
    )
    return (
        f"## {study.name}\n\n"
        f"{progress}"
        f"Created by `{command_line(argv)}` on {socket.gethostname()}, {when}.\n\n"
        f"Storage: `{storage.safe_url}`. Metric: `{s.metric}` ({s.direction}), "
        f"{_limits(study)}, sampler `{s.sampler}`, pruner `{study.config.pruner.type}`. "
        "Each trial's user attributes say what made it (host, device, code version) and, "
        "for a trial that continued another worker's work, `resumed_from`.\n\n"
        f"{_progress(study)}"
        f"{_pausing(study)}"
        "### Config\n\n"
        f"```toml\n{config_toml(study.config)}```\n"
    )


def _limits(study: StudyRef) -> str:
    """'30 trials', 'budget 5000 epochs, 12 h', or both: whichever is reached first."""
    s = study.config.study
    parts = [] if s.n_trials is None else [f"{s.n_trials} trials"]
    if s.budget_epochs is not None:
        parts.append(f"budget {s.budget_epochs} epochs")
    if s.budget_hours is not None:
        parts.append(f"budget {s.budget_hours:g} h")
    return " or ".join(parts) + (" (whichever comes first)" if len(parts) > 1 else "")


def _pausing(study: StudyRef) -> str:
    if not study.config.pruner.pauses:
        return ""
    return (
        "Promotion-based ASHA: a trial pauses at each rung and is resumed (on any worker) "
        "once it ranks in the top 1/reduction_factor there. **A paused trial shows as WAITING "
        "here**, with the system attribute `hpsearch:paused_at` (its rung, in epochs); the "
        "study's user attribute `paused trials` counts them. When the study ends, paused "
        "trials end PRUNED with their last value.\n\n"
    )


def _progress(study: StudyRef) -> str:
    if not study.config.study.has_budget:
        return ""
    return (
        "**Budget used and left**: the line at the top of this note, and the study's user "
        "attribute `budget` (Study User Attributes, below), written by the workers as they "
        "train (at most every 5 s; reload the page); `hpsearch status --study NAME` reads it "
        "live.\n\n"
    )


def save_study_note(storage: Storage, study: StudyRef, argv: Sequence[str]) -> None:
    """Write the study's note (shown by optuna-dashboard on the study's page) in the
    dashboard's format, without importing optuna-dashboard: its package loads its web app,
    and with it scikit-learn, SciPy and pandas (about 1 s of every `create`)."""
    body = study_note(study, storage, argv)
    with storage.transaction() as conn:
        _write_note(conn, study.study_id, body, _note_attrs(conn, study.study_id))


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, dict):
        items = ", ".join(
            f"{_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None
        )
        return f"{{ {items} }}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    # JSON spells strings, numbers and booleans as TOML does.
    return json.dumps(value)
