"""The promotion query at N trials on PostgreSQL: EXPLAIN (ANALYZE, BUFFERS) and its time.

A study is bulk-written as `bench.systems.large_study` writes it (the rung table of
promotion-based ASHA: every trial at epoch 1, a third at 3, a ninth at 9, 2% paused), then
`VACUUM ANALYZE trial_rungs`. `search.db.pauses.next_promotable`'s statement is explained and
timed (median of 20), with the floor rule and while draining. `--compare PATH` also runs the
statement of another `pauses.py` (e.g. main's, from a `git archive`) on the indexes it was
written for (0006's: the 0008 indexes dropped first), and says whether both pick the same trial.

    python -m bench.systems.promotion_query --trials 20000
    git archive c791ef8 | tar -x -C /tmp/main
    python -m bench.systems.promotion_query --trials 20000 --compare /tmp/main/search/db/pauses.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from typing import Any

import sqlalchemy as sa

from bench.systems.dashboard import make_study
from bench.systems.large_study import add_rungs_and_queue, scratch_database


def explain(engine: sa.Engine, label: str, statement: Any, study_id: int) -> Any:
    compiled = statement.compile(dialect=engine.dialect)
    params = compiled.construct_params({"study": study_id, "eta": 3})
    with engine.connect() as conn:
        for _ in range(3):  # warm
            got = conn.exec_driver_sql(str(compiled), params).first()
        plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + str(compiled), params).all()
        times = []
        for _ in range(20):
            began = time.perf_counter()
            conn.exec_driver_sql(str(compiled), params).first()
            times.append(time.perf_counter() - began)
    times.sort()
    pick = tuple(got) if got else None
    print(
        f"--- {label}: picks {pick}, median {1000 * times[10]:.2f} ms over 20 (load "
        f"{os.getloadavg()[0]:.1f})"
    )
    print("\n".join(r[0] for r in plan), flush=True)
    return pick


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20000)
    parser.add_argument("--compare", help="another pauses.py whose statement to run too")
    args = parser.parse_args()
    from search.db.pauses import _promotable_statement
    from search.db.storage import open_storage

    other = None
    if args.compare:
        spec = importlib.util.spec_from_file_location("compared_pauses", args.compare)
        if spec is None or spec.loader is None:
            raise SystemExit(f"--compare: cannot read {args.compare}")
        other = importlib.util.module_from_spec(spec)
        sys.modules["compared_pauses"] = other
        spec.loader.exec_module(other)
    with scratch_database("promotion") as url:
        began = time.perf_counter()
        study_id, _ = make_study(url, args.trials)
        add_rungs_and_queue(url, study_id)
        storage = open_storage(url)
        engine = storage.engine.execution_options(isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql("VACUUM ANALYZE hpsearch.trial_rungs")
            rows, paused = conn.exec_driver_sql(
                "SELECT count(*), sum(paused::int) FROM hpsearch.trial_rungs"
            ).one()
        print(
            json.dumps(
                {
                    "trials": args.trials,
                    "rung_rows": rows,
                    "paused": paused,
                    "written_s": round(time.perf_counter() - began, 1),
                    "load": os.getloadavg()[0],
                }
            ),
            flush=True,
        )
        picks = [
            explain(engine, f"this code, {rule}", _promotable_statement(True, draining), study_id)
            for rule, draining in (("floor", False), ("draining", True))
        ]
        if other is not None:
            with engine.connect() as conn:
                conn.exec_driver_sql("DROP INDEX IF EXISTS hpsearch.ix_trial_rungs_paused")
                conn.exec_driver_sql("DROP INDEX IF EXISTS hpsearch.ix_trial_rungs_rank")
                conn.exec_driver_sql(
                    "CREATE INDEX IF NOT EXISTS ix_trial_rungs_study "
                    "ON hpsearch.trial_rungs (study_id, bracket, level)"
                )
                conn.exec_driver_sql("ANALYZE hpsearch.trial_rungs")
            theirs = [
                explain(
                    engine,
                    f"{args.compare}, {rule}",
                    other._promotable_statement(True, d),
                    study_id,
                )
                for rule, d in (("floor", False), ("draining", True))
            ]
            print("same pick:", picks == theirs, flush=True)
        storage.close()


if __name__ == "__main__":
    main()
