"""`hpsearch dashboard` in a process of its own, and reading its HTTP answers."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.helpers.cli import cli_env
from tests.helpers.processes import default_signals


class DashboardProcess:
    """`python -m search dashboard ARGS` until it prints where it listens (port 0: a free one)."""

    def __init__(
        self,
        *args: str,
        cwd: Path,
        env: dict[str, str] | None = None,
        verbose: bool = False,
        preexec_fn: Callable[[], None] = default_signals,
    ) -> None:
        base = {**cli_env(), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "search", *(["-v"] if verbose else []), "dashboard", *args],
            cwd=cwd,
            env={**base, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=preexec_fn,  # the test signals it: dispositions set, not inherited
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.base_url = ""
        self.last_headers: dict[str, str] = {}

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_until_serving(self, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"optuna-dashboard on (http://\S+)/dashboard", self.output)
            if found:
                self.base_url = found[1]
                return self.base_url
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"the dashboard did not start:\n{self.output}")

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(self.base_url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                self.last_headers = dict(answer.headers)
                return answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def send(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        request = urllib.request.Request(
            self.base_url + path,
            data=body,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def stop(self, signum: int = signal.SIGINT, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
