"""`hpsearch dashboard`: optuna-dashboard on the study database, with the artifact store."""

from __future__ import annotations

import argparse
from typing import Any

from search.commands.common import add_storage_flags, artifacts_dir, from_value_error, storage_url
from search.monitor.dashboard import host_name, port_number, serve

__all__ = ["add_parser", "cmd_dashboard"]


def add_parser(sub: Any) -> None:
    dashboard = sub.add_parser(
        "dashboard",
        help="optuna-dashboard on the storage, with the trials' checkpoints and reports",
        description="Serve optuna-dashboard on the study database, with the artifact store "
        "the workers write (kept checkpoints and attached reports open from the page). It has "
        "no authentication and can change and delete studies: it listens on 127.0.0.1 unless "
        "--host says otherwise (and then warns); with a read-only database role it only shows. "
        "Ctrl-C (or SIGTERM) stops it with exit code 0. Exit codes: 0 stopped, 2 bad input "
        "(port, host, storage, unreachable database, missing --artifacts directory).",
    )
    add_storage_flags(dashboard)
    dashboard.add_argument(
        "--host",
        default="127.0.0.1",
        type=from_value_error(host_name),
        help="address to listen on (default: 127.0.0.1, this machine only; any other warns "
        "that the dashboard has no authentication)",
    )
    dashboard.add_argument(
        "--port",
        default=8080,
        type=from_value_error(port_number),
        help="port to listen on (default: 8080; 0: any free port, printed)",
    )
    dashboard.add_argument(
        "--artifacts",
        help="the directory workers were given with --artifacts, where checkpoints and reports "
        "are (default: $HPSEARCH_ARTIFACTS, else the PostgreSQL database itself, or "
        "DB.artifacts/ beside a SQLite file)",
    )
    dashboard.set_defaults(handler=cmd_dashboard)


def cmd_dashboard(args: argparse.Namespace) -> int:
    return serve(storage_url(args), args.host, args.port, artifacts_dir(args.artifacts))
