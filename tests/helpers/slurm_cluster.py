"""A real one-node Slurm cluster for a test: munge, slurmctld and slurmd from Debian's slurm-wlm,
in a temporary directory, on free ports, as root, with two make-believe GPUs (gres) and a second
partition whose jobs preempt (requeue) the default one's (the packages: apt-get install -y
slurm-wlm munge). `slurm_cluster` yields the environment a Slurm client needs (``SLURM_CONF``)
and stops everything it started, the jobs' processes included, also when the test fails."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

DAEMONS = ("mungekey", "munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
PARTITION = "main"
URGENT = "urgent"
"""A partition whose jobs preempt (requeue) the main partition's, after its GraceTime."""


def _binary(name: str) -> str:
    found = shutil.which(name) or next(
        (f"{d}/{name}" for d in ("/usr/sbin", "/usr/bin") if os.path.exists(f"{d}/{name}")), None
    )
    if found is None:
        pytest.fail(
            f"the Slurm test needs {name}: apt-get install -y slurm-wlm munge", pytrace=False
        )
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slurm_conf(root: Path, host: str) -> str:
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 * 9 // 10
    cpus = os.cpu_count()
    # A requeued job waits cred_expire seconds (default 120) before it may start again.
    main = "MaxTime=INFINITE State=UP OverSubscribe=FORCE PriorityTier=1 GraceTime=30"
    urgent = "MaxTime=INFINITE State=UP OverSubscribe=NO PriorityTier=10 PreemptMode=OFF"
    return f"""\
ClusterName=hpsearchtest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket,cred_expire=5
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
KillWait=10
MinJobAge=600
GresTypes=gpu
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} Gres=gpu:2 State=UNKNOWN
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName={PARTITION} Nodes={host} Default=YES {main}
PartitionName={URGENT} Nodes={host} {urgent}
"""


@contextlib.contextmanager
def slurm_cluster() -> Iterator[dict[str, str]]:
    """Start munged, slurmctld and slurmd (foreground children of this process); yield the
    client environment; then cancel every job, stop the daemons and remove the directory."""
    if os.geteuid() != 0:
        pytest.fail("the Slurm test runs its daemons as root (SlurmUser=root)", pytrace=False)
    binaries = {name: _binary(name) for name in DAEMONS}
    # Short: a unix socket's path has at most 107 characters.
    root = Path(tempfile.mkdtemp(prefix="hps-slurm-"))
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, host))
    # Two make-believe GPUs (Slurm wants a character device per GPU): jobs can ask for
    # --gres=gpu:N and get CUDA_VISIBLE_DEVICES; nothing can compute on them.
    (root / "gres.conf").write_text(
        f"AutoDetect=off\nNodeName={host} Name=gpu File=/dev/null\n"
        f"NodeName={host} Name=gpu File=/dev/zero\n"
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons: list[subprocess.Popen[bytes]] = []

    def start(*cmd: str) -> None:
        log = open(root / f"{Path(cmd[0]).name}.out", "wb")  # noqa: SIM115 (the child owns it)
        daemons.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=log))
        log.close()

    try:
        subprocess.run(
            [binaries["mungekey"], "-c", "-k", str(root / "munge.key")],
            check=True,
            capture_output=True,
        )
        start(
            binaries["munged"],
            "-F",
            "-f",
            f"--key-file={root}/munge.key",
            f"--socket={root}/munge.socket",
            f"--pid-file={root}/munged.pid",
            f"--log-file={root}/munged.log",
            f"--seed-file={root}/munged.seed",
        )
        _wait(lambda: (root / "munge.socket").exists(), 10, "munged's socket", root)
        start(binaries["slurmctld"], "-D", "-i")
        start(binaries["slurmd"], "-D", "-N", host)

        def node_idle() -> bool:
            done = subprocess.run(
                [binaries["sinfo"], "-h", "-o", "%T"], env=env, capture_output=True, text=True
            )
            return done.stdout.strip() == "idle"

        _wait(node_idle, 30, "the node to be idle", root)
        yield env
    finally:
        subprocess.run([binaries["scancel"], "--user", "root"], env=env, capture_output=True)
        _kill_job_processes(conf, spare={d.pid for d in daemons})
        for daemon in reversed(daemons):
            daemon.terminate()
            try:
                daemon.wait(2)
            except subprocess.TimeoutExpired:  # slurmctld can take 10 s: its state is thrown away
                daemon.kill()
                daemon.wait(5)
        shutil.rmtree(root, ignore_errors=True)


def _kill_job_processes(conf: Path, spare: set[int]) -> None:
    """Kill what this cluster's jobs left (slurmstepd outlives slurmd): the processes whose
    environment names this cluster's slurm.conf, by pid, but the daemons in `spare`."""
    marker = f"SLURM_CONF={conf}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) in spare or int(pid) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def _wait(condition: object, timeout: float, what: str, root: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    logs = "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
        for p in sorted(root.glob("*.log")) + sorted(root.glob("*.out"))
    )
    pytest.fail(f"Slurm did not start: waited {timeout} s for {what}\n{logs}", pytrace=False)
