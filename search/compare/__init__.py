"""`hpsearch compare`: the same search under several strategies at one budget, K repeats each.

- `plan`: the strategies and the studies (`plan_compare`), nothing touched;
- `run`: the studies created, then run by local workers in turn;
- `collect`: every study's finished trials; `statistics`: bests, intervals, rank tests,
  epochs to target; `plots`: the PNGs; `report`: report.md, report.html, summary.json, and
  their attachment to the studies.
"""

from search.compare.plan import CompareRequest, CompareRun, Strategy, plan_compare
from search.compare.report import attach_report, write_report
from search.compare.run import prepare_studies, run_studies

__all__ = [
    "CompareRequest",
    "CompareRun",
    "Strategy",
    "attach_report",
    "plan_compare",
    "prepare_studies",
    "run_studies",
    "write_report",
]
