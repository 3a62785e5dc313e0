"""`hpsearch compare`: the same search under several strategies at one budget, K repeats each.

- `plan`: the strategies and the studies (`plan_compare`), nothing touched;
- `run`: the studies created, then run by local workers in turn;
- `report`: collection, statistics, plots and the Markdown/HTML report.
"""

from search.compare.plan import CompareRequest, CompareRun, Strategy, plan_compare
from search.compare.report import write_report
from search.compare.run import prepare_studies, run_studies

__all__ = [
    "CompareRequest",
    "CompareRun",
    "Strategy",
    "plan_compare",
    "prepare_studies",
    "run_studies",
    "write_report",
]
