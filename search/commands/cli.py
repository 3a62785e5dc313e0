"""The `hpsearch` command line: the parser built from the command modules, and the dispatch.

Each command module (`COMMAND_MODULES`) owns its subcommands: ``add_parser(subparsers)`` adds
them, each with ``set_defaults(handler=...)``, the function that runs it. A new command is a
new module in this package and one entry in that list.

Exit codes: 0 done; 1 runtime failure; 2 bad input (config, storage URL, unreachable database,
unknown study); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from search.commands import (
    best,
    compare,
    dashboard,
    enqueue,
    estimate,
    export,
    extend,
    migrate,
    run,
    slurm,
    status,
    studies,
    trials,
    try_,
    worker,
)
from search.commands.common import Parser
from search.db.roles import refused_write
from search.db.storage import StorageError
from search.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_INTERRUPTED, RuntimeFailure
from search.study.settings import ConfigError
from search.terminal import OncePerProcess, TerminalLogHandler

__all__ = ["COMMAND_MODULES", "build_parser", "entry_point", "installed_version", "main"]

COMMAND_MODULES = (
    run,
    worker,
    try_,
    status,
    trials,
    best,
    enqueue,
    extend,
    studies,
    dashboard,
    migrate,
    estimate,
    compare,
    slurm,
    export,
)
"""The command modules, in the order `hpsearch --help` lists their commands."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="hpsearch",
        description="Hyperparameter search for PyTorch training on one or many GPU machines.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--version",
        action="version",
        version=f"hpsearch {installed_version()}",
        help="the installed version",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMAND_MODULES:
        module.add_parser(sub)
    _describe_every_command(sub)
    return parser


EXIT_CODES = {
    "dashboard": "exit codes: 0 stopped (Ctrl-C or SIGTERM); 2 bad input (host, port, storage)",
    "status": "exit codes: 0 done (--watch: the study finished, or Ctrl-C/SIGTERM); 2 bad input "
    "(unknown study, storage URL, unreachable database)",
    "worker": "exit codes: 0 the study is done, or SIGTERM (the trial handed back); 1 runtime "
    "failure (this machine cannot train, the database or study is gone); 2 bad input (unknown "
    "study, device, storage URL); 130 Ctrl-C (the trial handed back)",
}
"""Each command's exit codes, where they differ from `DEFAULT_EXIT_CODES`."""
DEFAULT_EXIT_CODES = (
    "exit codes: 0 done; 1 runtime failure; 2 bad input (config, arguments, storage URL, "
    "unreachable database, unknown study); 130 interrupted"
)


def _describe_every_command(sub: Any) -> None:
    """Every subcommand's --help opens with what it does and ends with its exit codes."""
    helps = {action.dest: action.help for action in sub._choices_actions}
    for name, command in sub.choices.items():
        if command.description is None and helps.get(name):
            what = helps[name]
            command.description = what[0].upper() + what[1:] + "."
        if command.epilog is None:
            command.epilog = EXIT_CODES.get(name, DEFAULT_EXIT_CODES)


def installed_version() -> str:
    """The installed distribution's version (pyproject's, once `pip install` has run)."""
    try:
        return importlib.metadata.version("hpsearch")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed: run from a source tree)"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # for the study's note
    except SystemExit as exc:  # --help, or a bad command line (already reported)
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    _setup_logging(args.verbose)
    try:
        return args.handler(args)
    except (ConfigError, StorageError) as exc:
        print(f"hpsearch: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RuntimeFailure as exc:
        print(f"hpsearch: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:
        refused = refused_write(exc)  # a role without the rights: the wrong role, bad input
        if refused is None:
            raise
        print(f"hpsearch: error: {refused}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("hpsearch: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def entry_point() -> None:
    """The `hpsearch` program: `main`, then exit without tearing the interpreter down.

    By the time `main` returns, every result is committed and the connections are closed, so
    the one or two seconds Python spends unloading torch and friends buy nothing; they are
    seconds a spot instance's notice does not have.
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _setup_logging(verbose: bool) -> None:
    # On a terminal a log line first erases the live status line, which is drawn again below.
    handler = TerminalLogHandler(sys.stderr)
    handler.addFilter(OncePerProcess("precision "))  # said by every trial: once per worker
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(message)s",
        datefmt="%H:%M:%S",
        handlers=[handler],
    )
    logging.getLogger("optuna").setLevel(logging.WARNING)
    for noisy in ("alembic", "sqlalchemy", "accelerate"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not verbose:
        # When the database cuts a connection mid-statement, SQLAlchemy's pool logs a traceback
        # as it fails to roll the connection back; the worker has already said it in one line
        # ("database unreachable (...)" or "the database does not exist"). --verbose shows it.
        logging.getLogger("sqlalchemy.pool").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", module="optuna")
