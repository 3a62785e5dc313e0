"""The `hpsearch` command line: one module per command group, each with its parser and action.

- `cli`: the parser built from every command module, the dispatch, exit codes;
- `common`: the flags several commands share and the environment defaults;
- `run` (run, create), `worker`, `try_` (try), `status` (status, workers), `dashboard`,
  `migrate` (migrate, delete), `estimate`, `compare`, `slurm` (an sbatch job array of
  workers), `export` (a study's trials into MLflow or W&B).

A new command: a module here with ``add_parser(subparsers)`` (its subparser, with
``set_defaults(handler=...)``) and an entry in `search.commands.cli.COMMAND_MODULES`.
"""

from search.commands.cli import entry_point, main

__all__ = ["entry_point", "main"]
