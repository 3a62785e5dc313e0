"""How many PostgreSQL connections a fleet of N workers holds: sampled from pg_stat_activity.

    python -m bench.systems.connections --workers 1 4 8 --trials 24

For each N: a fresh database, a study of tiny trials (tests/helpers/tiny_task.py, Hyperband
pruning, so the pruning thread reads too), N `hpsearch worker --device cpu` processes; every
20 ms the connections of the study database are counted (application_name = hpsearch) until the
workers exit. Prints the peak and the mean over the run, in total and per worker. The ceiling
per worker process is the engine's pool: pool_size + max_overflow (search/db/storage.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[2]

from search.db.migrate import upgrade  # noqa: E402
from search.db.storage import engine_kwargs, open_storage  # noqa: E402
from search.study.parse_config import load_config  # noqa: E402
from search.study.studies import create_study  # noqa: E402

CONFIG = """
[study]
name = "connections"
direction = "maximize"
n_trials = {trials}
sampler = "{sampler}"
[pruner]
type = "hyperband"
min_resource = 1
reduction_factor = 2
[task]
name = "tests.helpers.tiny_task:make_task"
epochs = 8
[space]
lr = {{ type = "float", low = 1e-3, high = 1e-1, log = true }}
"""


def measure(admin: str, workers: int, trials: int, sampler: str) -> tuple[int, float]:
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    name = f"hpsearch_bench_{uuid.uuid4().hex[:8]}"
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = engine.url.set(database=name).render_as_string(hide_password=False)
    try:
        storage = open_storage(url, create=True)
        upgrade(storage)
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "study.toml"
            config.write_text(CONFIG.format(trials=trials, sampler=sampler))
            create_study(storage, load_config(config))
            storage.close()
            env = {k: v for k, v in os.environ.items() if not k.startswith("HPSEARCH_")}
            env.update(PYTHONPATH=str(REPO), HPSEARCH_STORAGE=url, OMP_NUM_THREADS="1")
            procs = [
                subprocess.Popen(
                    [sys.executable, "-m", "search", "worker", "--study", "connections"],
                    env=env,
                    cwd=tmp,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for _ in range(workers)
            ]
            counts = []
            with engine.connect() as conn:
                while any(p.poll() is None for p in procs):
                    counts.append(
                        conn.execute(
                            sa.text(
                                "SELECT count(*) FROM pg_stat_activity "
                                "WHERE datname = :d AND application_name = 'hpsearch'"
                            ),
                            {"d": name},
                        ).scalar_one()
                    )
                    time.sleep(0.02)
            assert all(p.returncode == 0 for p in procs), [p.returncode for p in procs]
    finally:
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()
    running = [c for c in counts if c > 0]
    return max(counts), statistics.mean(running) if running else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--sampler", default="tpe")
    parser.add_argument("--admin", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    pool = engine_kwargs("postgresql://x@y/z")
    print(f"pool per process: pool_size {pool['pool_size']} + max_overflow {pool['max_overflow']}")
    print("| workers | peak connections | peak per worker | mean while running | mean per worker |")
    print("| --- | --- | --- | --- | --- |")
    for n in args.workers:
        peak, mean = measure(args.admin, n, args.trials, args.sampler)
        print(f"| {n} | {peak} | {peak / n:.2f} | {mean:.1f} | {mean / n:.2f} |", flush=True)


if __name__ == "__main__":
    main()
