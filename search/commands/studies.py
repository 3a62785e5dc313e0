"""`hpsearch studies`: every study in the storage, with counts, best value, budget used and last
activity."""

from __future__ import annotations

import argparse
import json
from typing import Any

from search.commands.common import add_storage_flags, storage_url
from search.db.migrate import check_schema
from search.db.storage import open_storage
from search.errors import EXIT_OK
from search.monitor.studies import format_studies, list_studies

__all__ = ["add_parser", "cmd_studies"]


def add_parser(sub: Any) -> None:
    studies = sub.add_parser(
        "studies",
        help="every study: trials by state, best value, budget used, last activity",
        description="List every hpsearch study in the storage: trials by state, the best "
        "value, the epochs budget used (when the config has one) and the last activity.",
    )
    add_storage_flags(studies)
    studies.add_argument("--json", action="store_true", help="one JSON object")
    studies.set_defaults(handler=cmd_studies)


def cmd_studies(args: argparse.Namespace) -> int:
    storage = open_storage(storage_url(args))
    check_schema(storage)
    listed = list_studies(storage)
    print(json.dumps({"studies": listed}) if args.json else format_studies(listed))
    return EXIT_OK
