"""`hpsearch migrate` (the one command that runs DDL; roles) and `hpsearch delete` (a study)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from search.commands.common import add_storage_flags, artifacts_dir, storage_url
from search.db.fleet import count_workers
from search.db.liveness import live_workers
from search.db.migrate import (
    autovacuum_on,
    check_schema,
    current_revision,
    table_count,
    upgrade,
)
from search.db.roles import VIEWER_ROLE, WORKER_ROLE, RoleNames, grant_roles
from search.db.storage import Storage, open_storage
from search.errors import EXIT_OK
from search.monitor.run_summary import artifacts_place
from search.monitor.status import study_status
from search.monitor.workers import delete_study
from search.study.settings import ConfigError
from search.study.studies import StudyRef, open_study
from search.worker.artifacts import artifact_store_for, existing_directory

__all__ = ["add_parser", "cmd_delete", "cmd_migrate"]


def add_parser(sub: Any) -> None:
    migrate = sub.add_parser(
        "migrate",
        help="bring Optuna's and hpsearch's tables up to date (the one command that runs DDL)",
    )
    add_storage_flags(migrate)
    migrate.add_argument(
        "--create-roles",
        action="store_true",
        help="also create the worker role (reads and writes rows, no DDL) and the read-only "
        "viewer role; LOGIN with the password in $HPSEARCH_WORKER_PASSWORD / "
        "$HPSEARCH_VIEWER_PASSWORD (or *_FILE), else NOLOGIN",
    )
    migrate.add_argument("--worker-role", default=WORKER_ROLE, help=f"(default: {WORKER_ROLE})")
    migrate.add_argument("--viewer-role", default=VIEWER_ROLE, help=f"(default: {VIEWER_ROLE})")
    migrate.set_defaults(handler=cmd_migrate)

    delete = sub.add_parser(
        "delete", help="delete a study: its trials, workers, leases and checkpoints"
    )
    delete.add_argument("--study", required=True, help="study name")
    add_storage_flags(delete)
    delete.add_argument(
        "--artifacts",
        help="the directory its workers kept checkpoints in, if any (default: "
        "$HPSEARCH_ARTIFACTS, else the database, or DB.artifacts/ beside a SQLite file)",
    )
    delete.add_argument("--force", action="store_true", help="even while live workers are on it")
    delete.add_argument(
        "--yes", action="store_true", help="do not ask (needed where stdin is not a terminal)"
    )
    delete.set_defaults(handler=cmd_delete)


def cmd_migrate(args: argparse.Namespace) -> int:
    storage = open_storage(storage_url(args), create=True)
    roles = RoleNames(args.worker_role, args.viewer_role)
    roles.check()
    before, tables_before = current_revision(storage), table_count(storage)
    revision = upgrade(storage)
    created = table_count(storage) - tables_before
    if before is None and tables_before == 0:
        done = f"created Optuna's schema and hpsearch's tables ({created} tables)"
    elif before != revision:
        done = f"upgraded hpsearch's tables from revision {before or 'none'} to {revision}"
        done += f", {created} tables created" if created else ""
    elif created:
        done = f"created {created} missing tables"
    else:
        done = "nothing to change"
    print(
        f"{storage.safe_url}: {done}; Optuna's schema and hpsearch's tables are up to date "
        f"({revision})"
    )
    if storage.is_postgres:
        # Tables a migration added are granted to the roles that exist; --create-roles makes them.
        for line in grant_roles(storage, roles, create=args.create_roles):
            print(line)
        if not autovacuum_on(storage):
            print(AUTOVACUUM_OFF, file=sys.stderr)
    elif args.create_roles:
        print("--create-roles: a SQLite file has no roles; nothing to do")
    return EXIT_OK


AUTOVACUUM_OFF = (
    "warning: autovacuum is off on this PostgreSQL server: the workers' updates leave dead rows "
    "and the planner no statistics, so every study gets slower as the database fills (2.5x "
    "measured after 60 studies); turn it on (PostgreSQL's default) or run VACUUM ANALYZE now "
    "and then"
)


def cmd_delete(args: argparse.Namespace) -> int:
    storage = open_storage(storage_url(args))
    check_schema(storage)
    study = open_study(storage, args.study)
    artifacts = artifacts_dir(args.artifacts)
    store = artifact_store_for(storage, existing_directory(artifacts) if artifacts else None)
    if not args.force and live_workers(storage, study.study_id):
        delete_study(storage, study, store)  # refuses, naming the live workers
    what = _what_goes(storage, study, artifacts)
    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError(f"delete would remove {what}: pass --yes to delete without asking")
        answer = input(f"This removes {what}.\nDelete it? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return EXIT_OK
    print(delete_study(storage, study, store, force=args.force))
    return EXIT_OK


def _what_goes(storage: Storage, study: StudyRef, artifacts: str | None) -> str:
    """What deleting `study` removes, in words."""
    status = study_status(storage, study)
    states = ("complete", "pruned", "failed", "running", "waiting", "paused")
    counts = {k: getattr(status, k) for k in states}
    trials = sum(counts.values())
    registered = count_workers(storage, study.study_id)
    by_state = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    return (
        f"study {study.name!r} from {storage.safe_url}: {trials} trials"
        f"{f' ({by_state})' if by_state else ''}, {registered} worker records, its leases and "
        f"its checkpoints ({artifacts_place(storage, artifacts)})"
    )
