"""`hpsearch try CONFIG --trial STUDY:N | --best STUDY`: a study's trial trained again by hand.

The trial's params become ``--set`` flags (`search.study.reuse.flag_value`, read back exactly),
before the user's own ``--set``, which win; `hpsearch try` checks them all against CONFIG's
``[space]`` as usual. Only the study's database is read.
"""

from __future__ import annotations

import argparse
import sys

from search.commands.common import storage_url
from search.db.migrate import check_schema
from search.db.storage import open_storage
from search.db.trial_table import read_trials
from search.study.reuse import flag_value
from search.study.settings import ConfigError
from search.study.studies import open_study

__all__ = ["parse_trial_ref", "study_trial_overrides"]


def parse_trial_ref(text: str) -> tuple[str, int]:
    """``STUDY:N`` -> (study, N); the study's name may itself contain ':'."""
    name, sep, number = text.rpartition(":")
    if not sep or not name or not number.strip().isdigit():
        raise ConfigError(f"--trial {text!r}: expected STUDY:N, e.g. --trial digits:12")
    return name, int(number)


def study_trial_overrides(args: argparse.Namespace) -> list[str]:
    """``NAME=VALUE`` for every param of the trial `--trial`/`--best` names."""
    from search.commands.best import find_best

    wanted = parse_trial_ref(args.trial) if args.trial else None
    name = wanted[0] if wanted else args.best
    storage = open_storage(storage_url(args))
    try:
        check_schema(storage)
        study = open_study(storage, name)
        if wanted is None:
            row = find_best(storage, study)
        else:
            rows = {r.number: r for r in read_trials(storage, study.study_id)}
            row = rows.get(wanted[1])
            if row is None:
                last = max(rows) if rows else None
                have = f"its trials are 0..{last}" if last is not None else "it has no trials"
                raise ConfigError(
                    f"--trial {args.trial}: study {name!r} has no trial {wanted[1]} ({have})"
                )
    finally:
        storage.close()
    if not row.params:
        raise ConfigError(f"trial {row.number} of study {name!r} has no params yet")
    print(
        f"trial {row.number} of study {name!r} ({row.state.lower()}, value "
        f"{row.value if row.value is not None else '-'})",
        file=sys.stderr,
    )
    return [f"{k}={flag_value(v)}" for k, v in row.params.items()]
