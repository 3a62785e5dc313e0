"""A real PgBouncer in transaction pooling in front of a PostgreSQL database (Debian's
`pgbouncer`, started on a free loopback port, stopped after): what README recommends for a
large fleet. The `pgbouncer_url` fixture and bench/systems/fleet.py start it the same way.

    with pgbouncer(url, pool_size=20) as bouncer:
        bouncer.url       # the same database through PgBouncer
        bouncer.settings  # the [pgbouncer] settings it runs with
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

__all__ = ["PgBouncer", "PgBouncerError", "pgbouncer"]


class PgBouncerError(RuntimeError):
    """PgBouncer is not installed, or did not start."""


@dataclass(frozen=True)
class PgBouncer:
    url: str
    """The database through PgBouncer (same user and database name as the target)."""
    settings: dict[str, str]
    """The pooling settings of its [pgbouncer] section."""
    port: int
    """Its port; its admin console (SHOW POOLS) is the database `pgbouncer` there, for the
    target's user."""


def _raise_fd_limit() -> None:
    """`preexec_fn`: PgBouncer needs a descriptor per client and server connection."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@contextlib.contextmanager
def pgbouncer(
    target_url: str, *, pool_size: int = 20, max_client_conn: int = 400
) -> Iterator[PgBouncer]:
    """PgBouncer in transaction pooling for `target_url`'s database: at most `pool_size`
    server connections to it, at most `max_client_conn` clients."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(binary):
        raise PgBouncerError("PgBouncer is needed: apt-get install -y pgbouncer")
    target = sa.engine.make_url(target_url)
    root = Path(tempfile.mkdtemp(prefix="hpsearch-pgbouncer-"))
    root.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = {
        "pool_mode": "transaction",
        "default_pool_size": str(pool_size),
        "max_client_conn": str(max_client_conn),
    }
    (root / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{target.database} = host={target.host} port={target.port or 5432} "
        f"dbname={target.database} user={target.username}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = any\nadmin_users = {target.username}\n"
        + "".join(f"{k} = {v}\n" for k, v in settings.items())
        + f"logfile = {root / 'pgbouncer.log'}\npidfile = {root / 'pgbouncer.pid'}\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
        "log_connections = 0\nlog_disconnections = 0\n"
    )
    as_owner: list[str] = []
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        shutil.chown(root, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    process = subprocess.Popen(
        [*as_owner, binary, str(root / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,  # it logs to its logfile
        preexec_fn=_raise_fd_limit,
    )
    url = target.set(port=port).render_as_string(hide_password=False)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    log = root / "pgbouncer.log"
                    text = log.read_text() if log.exists() else ""
                    raise PgBouncerError(f"PgBouncer did not start: {text[-2000:]}") from None
                time.sleep(0.1)
        yield PgBouncer(url, settings, port)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(root, ignore_errors=True)
