"""A fleet of workers on one PostgreSQL through PgBouncer (transaction pooling): the default
strategy (TPE + ASHA + an epoch budget) on LCBench's surrogate, every epoch sleeping for the
surrogate's recorded runtime times `--time-scale`, and `--kill` of the workers SIGKILLed at
random while the study runs.

    python -m bench.systems.fleet --workers 64 --budget 3000 --time-scale 0.002
    python -m bench.systems.fleet --workers 64 --kill 8 --budget 3000 --time-scale 0.002

A fresh database on the local server (`--admin`), a PgBouncer in front of it
(tests/helpers/pgbouncer.py, the pgbouncer_url fixture's), the study created as `hpsearch
create` does (bench/efficiency/real_path.py's config) and `--workers` real `Worker`s, one
process each (forked from a server that imported hpsearch and the surrogate once, so that 64
start-ups do not take the machine's two cores for minutes), each with its own engine through
PgBouncer, a `SurrogateTrial` of the efficiency bench as the trial function. Every 0.5 s the
server's connections to the database (pg_stat_activity) and PgBouncer's pool (SHOW POOLS) are
read; at random points between 20% and 70% of the budget, `--kill` live workers get SIGKILL
(not replaced: their trials come back to the others after `--grace-s`).

At the end, from the database and the trial functions' log (each run of a trial logs its start
and every epoch, with its pid): the epoch counter against the budget, epochs reported (steps in
the database) and trained (logged), nothing RUNNING or WAITING, trial numbers without a gap, no
trial trained by two processes at once (tests/soak/chaos.py's overlap check), every worker
exited 0 but the killed. It prints a summary; anomalies are listed, and exit 1 if any.
tests/bench/test_fleet.py runs a small one.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DEFAULT_INSTANCE = "189906"
"""An LCBench development instance (bench/efficiency's default)."""

MONITOR = "hpsearch-fleet-monitor"
"""application_name of this script's own connections to the study database."""

PRELOAD = [
    "bench.efficiency.real_path",
    "bench.efficiency.lcbench",
    "search.worker.loop",
    "search.study.studies",
    "search.db.storage",
    "optuna",
    "yahpo_gym",
    "onnxruntime",
]
"""What the fork server imports once, before any worker forks from it."""


WORKER_EVENTS = {
    "self-fenced": "no heartbeat has reached the database for",
    "trial lost": "was taken over by another worker",
    "worker reaped": "went silent for longer than its grace period",
}
"""What a worker logs when its heartbeat did not get through in time (it stops its trial), when
its trial went to another worker, and when it queued a silent worker's trial again."""


# -- a worker process ------------------------------------------------------------------------------


class LoggedTrial:
    """A trial function that logs each run's start and every epoch it trained, in the format
    of tests/soak/chaos.py (trial key, pid, the run's start, time, event), to one file all the
    workers append to (a line is one write, O_APPEND)."""

    def __init__(self, inner: Any, path: str) -> None:
        self.inner = inner
        self.fh = open(path, "a", buffering=1)  # noqa: SIM115 (the process's lifetime)

    def _log(self, number: int, start: float, event: str, epoch: int = 0) -> None:
        line = {"x": number, "pid": os.getpid(), "start": start, "t": time.time()}
        self.fh.write(json.dumps({**line, "event": event, "epoch": epoch}) + "\n")

    def __call__(self, run: Any) -> Any:
        start = time.time()
        self._log(run.number, start, "start")
        # A trial stopped by the self-fence and going on in this worker comes back with the run
        # it was handed: its report is this wrapper already.
        report = getattr(run.report, "__wrapped__", run.report)

        def logged(epoch: int, value: float) -> bool:
            self._log(run.number, start, "epoch", epoch)  # trained (slept for), now reported
            return bool(report(epoch, value))

        logged.__wrapped__ = report  # type: ignore[attr-defined]
        run.report = logged
        return self.inner(run)


def _worker_process(
    url: str,
    study: str,
    instance: str,
    data: str | None,
    time_scale: float,
    tmp: str,
    grace_s: float,
) -> None:
    """One worker: a real `Worker` through PgBouncer, the surrogate as its trial function."""
    import logging

    from bench.efficiency.real_path import EpochLog, SurrogateTrial
    from search.db.storage import open_storage
    from search.study.studies import open_study
    from search.worker.loop import Worker

    logging.basicConfig(
        filename=os.path.join(tmp, f"worker-{os.getpid()}.log"),
        level=logging.INFO,
        format="%(asctime)s %(name)s %(message)s",
    )
    storage = open_storage(url)
    epochs = EpochLog(os.path.join(tmp, f"epochs-{os.getpid()}.log"))
    trial = LoggedTrial(SurrogateTrial(instance, data, time_scale, epochs), f"{tmp}/runs.jsonl")
    worker = Worker(
        storage, open_study(storage, study), run_trial=trial, grace_s=grace_s, progress=False
    )
    try:
        code = worker.run()
    finally:
        epochs.close()
        storage.close()
    sys.exit(code)


# -- the run ---------------------------------------------------------------------------------------


@dataclass
class Fleet:
    """What one run did and found."""

    workers: int
    budget: int
    time_scale: float
    instance: str
    pgbouncer: dict[str, str]
    grace_s: float
    wall_s: float = 0.0
    started_s: float = 0.0
    """Seconds until every worker had registered (0: not all did)."""
    states: Counter[str] = field(default_factory=Counter)
    trials: int = 0
    numbers_ok: bool = False
    epochs_counter: int = 0
    """The study's epoch counter (study_budgets.epochs_used) at the end."""
    epochs_reported: int = 0
    """Intermediate values in the database: (trial, epoch) pairs reported."""
    epochs_trained: int = 0
    """Epochs the trial functions trained (logged), repeats after a kill included."""
    epochs_repeated: int = 0
    """Epochs a trial trained again: its worker was killed before that epoch's report."""
    gaps: list[str] = field(default_factory=list)
    overlapping_runs: list[str] = field(default_factory=list)
    exit_codes: Counter[int] = field(default_factory=Counter)
    killed: list[int] = field(default_factory=list)
    """The pids killed."""
    killed_trials: dict[int, str] = field(default_factory=dict)
    """Trial number each killed worker held -> its state, last epoch and claims at the end."""
    fail_reasons: dict[int, str] = field(default_factory=dict)
    peak_server_connections: int = 0
    mean_server_connections: float = 0.0
    peak_clients: int = 0
    peak_waiting_clients: int = 0
    max_wait_ms: float = 0.0
    events: Counter[str] = field(default_factory=Counter)
    """What the workers' logs say happened: self-fences, trials lost, workers reaped."""
    rss_mib: list[float] = field(default_factory=list)
    pss_mib: list[float] = field(default_factory=list)
    load: str = ""
    ended: bool = True

    def anomalies(self) -> list[str]:
        """What a user would call wrong; empty when the run kept every guarantee."""
        found = []
        if not self.ended:
            found.append("the study did not end in time")
        if self.epochs_counter != self.budget:
            found.append(f"epoch counter {self.epochs_counter} != budget {self.budget}")
        if self.epochs_trained > self.budget:
            found.append(f"{self.epochs_trained} epochs trained > budget {self.budget}")
        if self.epochs_reported > self.budget:
            found.append(f"{self.epochs_reported} epochs reported > budget {self.budget}")
        if (
            not self.killed
            and not self.events
            and not (self.epochs_reported == self.epochs_trained == self.budget)
        ):  # without a death (real, or a silent worker's) every epoch counts once
            found.append(
                f"no worker died, yet reported {self.epochs_reported} / trained "
                f"{self.epochs_trained} / budget {self.budget} differ"
            )
        for state in ("RUNNING", "WAITING", "FAIL"):
            if self.states.get(state):
                found.append(f"{self.states[state]} trial(s) {state} at the end")
        if not self.numbers_ok:
            found.append("trial numbers are not 0..n-1 (a gap or a number twice)")
        found += [f"steps not 1..k: {g}" for g in self.gaps]
        found += [f"trained by two processes at once: {o}" for o in self.overlapping_runs]
        bad = {c: n for c, n in self.exit_codes.items() if c not in (0, -signal.SIGKILL)}
        if bad or self.exit_codes.get(-signal.SIGKILL, 0) != len(self.killed):
            found.append(f"worker exit codes {dict(self.exit_codes)}")
        pool = int(self.pgbouncer["default_pool_size"])
        if self.peak_server_connections > pool:
            found.append(f"{self.peak_server_connections} server connections > pool {pool}")
        return found

    def summary(self) -> str:
        done = self.states.get("COMPLETE", 0) + self.states.get("PRUNED", 0)
        rss = (
            f"{statistics.mean(self.rss_mib):.0f} MiB RSS (max {max(self.rss_mib):.0f}), "
            f"{statistics.mean(self.pss_mib):.0f} MiB PSS per worker"
            if self.rss_mib
            else "not sampled"
        )
        lines = [
            f"workers {self.workers} ({len(self.killed)} killed with SIGKILL), LCBench "
            f"{self.instance}, time scale {self.time_scale:g}, grace {self.grace_s:g} s",
            "pgbouncer: " + ", ".join(f"{k}={v}" for k, v in self.pgbouncer.items()),
            f"trials {self.trials} {dict(sorted(self.states.items()))}",
            f"epochs: budget {self.budget}, counter {self.epochs_counter}, reported "
            f"{self.epochs_reported}, trained {self.epochs_trained} "
            f"({self.epochs_repeated} repeated after a kill)",
            f"killed workers' trials at the end: {self.killed_trials or '-'}",
            f"workers' logs: {dict(self.events) or 'no fence, loss or reap'}",
            f"server connections to the database: peak {self.peak_server_connections}, "
            f"mean {self.mean_server_connections:.1f}; PgBouncer clients: peak "
            f"{self.peak_clients}, peak waiting {self.peak_waiting_clients}, max wait "
            f"{self.max_wait_ms:.0f} ms",
            f"memory: {rss}",
            f"wall {self.wall_s:.1f} s ("
            + (
                f"all registered after {self.started_s:.1f} s"
                if self.started_s
                else "not every worker registered"
            )
            + "), "
            f"{done / self.wall_s if self.wall_s else 0:.2f} trials/s, "
            f"{self.epochs_reported / self.wall_s if self.wall_s else 0:.1f} epochs/s",
            f"load: {self.load}",
            "anomalies: " + ("; ".join(self.anomalies()) or "none"),
        ]
        return "\n".join(lines)


def run_fleet(
    workers: int,
    *,
    budget: int,
    time_scale: float,
    kill: int = 0,
    instance: str = DEFAULT_INSTANCE,
    data: str | None = None,
    pool_size: int = 20,
    max_client_conn: int = 2000,
    grace_s: float = 20.0,
    seed: int = 0,
    timeout_s: float = 1800.0,
    keep: str | None = None,
) -> Fleet:
    """One fleet on a fresh database of the local server, behind a fresh PgBouncer; `keep`: a
    folder to copy the workers' logs, the runs' log and a dump of the database to."""
    import sqlalchemy as sa

    from tests.helpers.pgbouncer import pgbouncer
    from tests.helpers.postgres import fresh_database, migrated

    with (
        fresh_database() as direct,
        pgbouncer(direct, pool_size=pool_size, max_client_conn=max_client_conn) as bouncer,
        tempfile.TemporaryDirectory(prefix="hpsearch-fleet-") as tmp,
    ):
        migrated(direct)
        fleet = Fleet(workers, budget, time_scale, instance, bouncer.settings, grace_s)
        study = _create_study(direct, budget, seed)
        _run(fleet, direct, bouncer, study, kill, data, tmp, seed, timeout_s)
        _check(fleet, direct, study, Path(tmp) / "runs.jsonl")
        if keep is not None:
            shutil.copytree(tmp, keep, dirs_exist_ok=True)
            url = sa.engine.make_url(direct)
            where = ["-h", str(url.host), "-p", str(url.port or 5432), "-U", str(url.username)]
            dump = ["pg_dump", *where, "-d", str(url.database), "-f", f"{keep}/db.sql"]
            subprocess.run(dump, check=False)
    return fleet


def _create_study(url: str, budget: int, seed: int) -> str:
    from bench.efficiency.real_path import study_config
    from bench.efficiency.runner import default_strategy
    from search.db.storage import open_storage
    from search.sampling.setup import set_up_study

    sampler, pruner = default_strategy()
    name = f"fleet-{uuid.uuid4().hex[:6]}"
    config = study_config(name, sampler, pruner, seed, budget, "lcbench")
    storage = open_storage(url)
    try:
        set_up_study(storage, config, ["bench/systems/fleet.py"])
    finally:
        storage.close()
    return name


def _run(
    fleet: Fleet,
    direct: str,
    bouncer: Any,
    study: str,
    kill: int,
    data: str | None,
    tmp: str,
    seed: int,
    timeout_s: float,
) -> None:
    import sqlalchemy as sa

    from search.db.tables import studies, study_budgets
    from search.db.tables import workers as workers_table

    rng = random.Random(seed)
    kill_at = sorted(rng.uniform(0.2, 0.7) * fleet.budget for _ in range(kill))
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    # The monitor's own reads of the study database are not the fleet's: named, and not counted
    # (a closed connection's backend lingers in pg_stat_activity for a moment).
    engine = sa.create_engine(
        direct, poolclass=sa.pool.NullPool, connect_args={"application_name": MONITOR}
    )
    dbname = sa.engine.make_url(direct).database
    admin = sa.create_engine(
        sa.engine.make_url(direct).set(database="postgres"), isolation_level="AUTOCOMMIT"
    )
    connections: list[int] = []
    args = (bouncer.url, study, fleet.instance, data, fleet.time_scale, tmp, fleet.grace_s)
    started = time.monotonic()
    procs = [ctx.Process(target=_worker_process, args=args) for _ in range(fleet.workers)]
    for p in procs:
        p.start()
    with engine.connect() as conn:
        sid = conn.execute(sa.select(studies.c.study_id).where(studies.c.study_name == study))
        study_id = sid.scalar_one()
    try:
        with admin.connect() as mon:
            while any(p.is_alive() for p in procs):
                if time.monotonic() - started > timeout_s:
                    fleet.ended = False
                    break
                connections.append(
                    mon.execute(
                        sa.text(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname = :d "
                            "AND application_name <> :me"
                        ),
                        {"d": dbname, "me": MONITOR},
                    ).scalar_one()
                )
                _pool_stats(fleet, bouncer.port, dbname)
                with engine.connect() as conn:
                    used = conn.execute(
                        sa.select(study_budgets.c.epochs_used).where(
                            study_budgets.c.study_id == study_id
                        )
                    ).scalar()
                    if not fleet.started_s:
                        n = conn.execute(  # not the row `create` writes
                            sa.select(sa.func.count()).where(
                                workers_table.c.study_id == study_id,
                                workers_table.c.pid.in_([p.pid for p in procs]),
                            )
                        ).scalar_one()
                        if n >= fleet.workers:
                            fleet.started_s = time.monotonic() - started
                # Every kill point passed since the last look, not one a look: two points
                # a few epochs apart pass within one look, and the study could end before
                # the next (seen in CI under load: 1 of 2 killed).
                while kill_at and (used or 0) >= kill_at[0]:
                    kill_at.pop(0)
                    _kill_one(fleet, procs, rng, engine, study_id)
                if not fleet.rss_mib and (used or 0) >= fleet.budget // 2:
                    _sample_memory(fleet, procs)
                time.sleep(0.5)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(10)
        fleet.wall_s = time.monotonic() - started
        fleet.load = _load()
        engine.dispose()
        admin.dispose()
    fleet.exit_codes = Counter(p.exitcode for p in procs if p.exitcode is not None)
    running = [c for c in connections if c > 0]
    fleet.peak_server_connections = max(connections, default=0)
    fleet.mean_server_connections = statistics.mean(running) if running else 0.0


def _kill_one(fleet: Fleet, procs: list[Any], rng: random.Random, engine: Any, sid: int) -> None:
    """SIGKILL a random live worker (one holding a trial if any does); note its trial."""
    import sqlalchemy as sa

    from search.db.tables import trial_leases, trials
    from search.db.tables import workers as workers_table

    live = {p.pid: p for p in procs if p.is_alive() and p.pid not in fleet.killed}
    with engine.connect() as conn:
        holding = dict(
            conn.execute(
                sa.select(workers_table.c.pid, trials.c.number)
                .join(trial_leases, trial_leases.c.worker_id == workers_table.c.worker_id)
                .join(trials, trials.c.trial_id == trial_leases.c.trial_id)
                .where(workers_table.c.study_id == sid, trials.c.state == "RUNNING")
            ).all()
        )
    candidates = sorted(set(live) & set(holding)) or sorted(live)
    rng.shuffle(candidates)
    for pid in candidates:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue  # it left on its own since `is_alive` (seen in CI): the next one
        fleet.killed.append(pid)
        if pid in holding:
            fleet.killed_trials[holding[pid]] = "?"
        return


def _pool_stats(fleet: Fleet, port: int, dbname: str) -> None:
    """PgBouncer's own view of the pool (its admin console, SHOW POOLS)."""
    import psycopg

    try:
        with psycopg.connect(
            host="127.0.0.1",
            port=port,
            dbname="pgbouncer",
            user="postgres",
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,
        ) as conn:
            cur = conn.execute("SHOW POOLS")
            names = [d.name for d in cur.description or ()]
            for row in cur.fetchall():
                pool = dict(zip(names, row, strict=True))
                if pool["database"] != dbname:
                    continue
                fleet.peak_clients = max(fleet.peak_clients, pool["cl_active"] + pool["cl_waiting"])
                fleet.peak_waiting_clients = max(fleet.peak_waiting_clients, pool["cl_waiting"])
                wait_ms = pool["maxwait"] * 1000 + pool.get("maxwait_us", 0) / 1000
                fleet.max_wait_ms = max(fleet.max_wait_ms, wait_ms)
    except psycopg.Error:
        pass  # a busy console: the next sample


def _sample_memory(fleet: Fleet, procs: list[Any]) -> None:
    for p in procs:
        if not p.is_alive():
            continue
        try:
            status = Path(f"/proc/{p.pid}/status").read_text()
            rollup = Path(f"/proc/{p.pid}/smaps_rollup").read_text()
        except OSError:
            continue
        rss = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
        pss = next(line for line in rollup.splitlines() if line.startswith("Pss:"))
        fleet.rss_mib.append(int(rss.split()[1]) / 1024)
        fleet.pss_mib.append(int(pss.split()[1]) / 1024)


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min) on {os.cpu_count()} cores"


def _check(fleet: Fleet, url: str, study: str, log: Path) -> None:
    """What the database and the trial functions' log say after the run."""
    import sqlalchemy as sa

    from search.db.tables import (
        studies,
        study_budgets,
        trial_intermediate_values,
        trial_leases,
        trial_system_attributes,
        trials,
    )
    from tests.soak.chaos import overlapping_runs

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        sid = conn.execute(
            sa.select(studies.c.study_id).where(studies.c.study_name == study)
        ).scalar_one()
        rows = conn.execute(
            sa.select(trials.c.trial_id, trials.c.number, trials.c.state).where(
                trials.c.study_id == sid
            )
        ).all()
        steps = conn.execute(
            sa.select(trials.c.number, trial_intermediate_values.c.step)
            .join(trials, trials.c.trial_id == trial_intermediate_values.c.trial_id)
            .where(trials.c.study_id == sid)
        ).all()
        fleet.epochs_counter = (
            conn.execute(
                sa.select(study_budgets.c.epochs_used).where(study_budgets.c.study_id == sid)
            ).scalar()
            or 0
        )
        reasons = conn.execute(
            sa.select(trials.c.number, trial_system_attributes.c.value_json)
            .join(trials, trials.c.trial_id == trial_system_attributes.c.trial_id)
            .where(trials.c.study_id == sid, trial_system_attributes.c.key == "fail_reason")
        ).all()
        claims = dict(
            conn.execute(
                sa.select(trials.c.number, trial_leases.c.generation)
                .join(trial_leases, trial_leases.c.trial_id == trials.c.trial_id)
                .where(trials.c.study_id == sid)
            ).all()
        )
    engine.dispose()
    fleet.trials = len(rows)
    state_of = {n: str(getattr(s, "name", s)) for _, n, s in rows}  # an enum or its name
    fleet.states = Counter(state_of.values())
    fleet.numbers_ok = sorted(state_of) == list(range(len(rows))) == sorted(n for _, n, _ in rows)
    fleet.fail_reasons = {n: json.loads(v) for n, v in reasons}
    by_trial: dict[int, list[int]] = defaultdict(list)
    for number, step in steps:
        by_trial[number].append(step)
    fleet.epochs_reported = len(steps)
    fleet.gaps = [
        f"trial {n}: {sorted(s)}"
        for n, s in by_trial.items()
        if sorted(s) != list(range(1, len(s) + 1))
    ][:10]
    trained: Counter[tuple[int, int]] = Counter()
    if log.exists():
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "epoch":
                trained[(event["x"], event["epoch"])] += 1
        fleet.overlapping_runs = overlapping_runs(log)
    for path in log.parent.glob("worker-*.log"):
        text = path.read_text()
        for event, words in WORKER_EVENTS.items():
            fleet.events[event] += text.count(words)
    fleet.events = +fleet.events  # the nonzero ones
    fleet.epochs_trained = sum(trained.values())
    fleet.epochs_repeated = sum(n - 1 for n in trained.values())
    for number in fleet.killed_trials:
        fleet.killed_trials[number] = (
            f"{state_of.get(number, '?')} at epoch {max(by_trial.get(number, [0]))}, "
            f"{claims.get(number, 0)} claim(s)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--kill", type=int, default=0, help="workers to SIGKILL mid-run")
    parser.add_argument("--budget", type=int, default=3000, help="[study] budget_epochs")
    parser.add_argument("--time-scale", type=float, default=0.002)
    parser.add_argument("--instance", default=DEFAULT_INSTANCE)
    parser.add_argument("--data", default=None, help="YAHPO data (default $YAHPO_DATA)")
    parser.add_argument("--pool-size", type=int, default=20, help="PgBouncer default_pool_size")
    parser.add_argument("--max-client-conn", type=int, default=2000)
    parser.add_argument("--grace-s", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--keep", default=None, help="a folder for the logs and a dump")
    args = parser.parse_args(argv)
    from bench.efficiency.design import DEV  # the only LCBench instances ever run

    problems = [
        f"--{name.replace('_', '-')}: must be >= {low}, got {value}"
        for name, low, value in (
            ("workers", 1, args.workers),
            ("kill", 0, args.kill),
            ("budget", 1, args.budget),
            ("pool_size", 1, args.pool_size),
        )
        if value < low
    ]
    if args.kill >= args.workers:
        problems.append(f"--kill: must be below --workers ({args.workers}), got {args.kill}")
    if args.instance not in DEV:
        problems.append(f"--instance: not an LCBench development instance: {args.instance}")
    if not args.time_scale >= 0:
        problems.append(f"--time-scale: must be >= 0, got {args.time_scale}")
    if problems:
        print(f"fleet: error: {problems[0]}", file=sys.stderr)
        return 2
    # SIGTERM (a background job's Ctrl-C is ignored): the workers, PgBouncer and the database
    # are cleaned up on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    fleet = run_fleet(
        args.workers,
        budget=args.budget,
        time_scale=args.time_scale,
        kill=args.kill,
        instance=args.instance,
        data=args.data,
        pool_size=args.pool_size,
        max_client_conn=args.max_client_conn,
        grace_s=args.grace_s,
        seed=args.seed,
        timeout_s=args.timeout_s,
        keep=args.keep,
    )
    print(fleet.summary())
    return 1 if fleet.anomalies() else 0


if __name__ == "__main__":
    sys.exit(main())
