"""`hpsearch dashboard`: optuna-dashboard on a study database, with the trials' artifacts.

optuna-dashboard reads hpsearch studies as they are (they live in Optuna's own tables). What this
module adds is the product around it: the same storage and artifact store the workers use (so
kept checkpoints and attached reports open from the page), loopback by default with a loud
warning otherwise (the dashboard has no authentication and can change and delete studies), a
read-only database role detected and said, passwords kept out of every line it logs, and a
clean stop on Ctrl-C or SIGTERM (exit 0: stopping is how a server ends).

It serves optuna-dashboard's WSGI app (`optuna_dashboard.wsgi`) with the standard library's
threaded WSGI server, as optuna-dashboard's own command does without gunicorn.

Example::

    hpsearch dashboard --storage postgresql+psycopg://viewer:pw@db:5432/hp --port 8080
"""

from __future__ import annotations

import contextlib
import gzip
import ipaddress
import logging
import socket
import sys
import threading
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.util import setup_testing_defaults

from sqlalchemy.engine import make_url

from search.db.migrate import check_schema
from search.db.roles import is_read_only
from search.db.storage import Storage, StorageError, open_storage
from search.db.studies import studies_with_more_trials_than
from search.monitor.dashboard_banner import StudyBanner
from search.monitor.dashboard_frontend import (
    BundleWithCurves,
    bundle_path,
    patch_bundle,
    patch_trials_fetch,
)
from search.monitor.dashboard_summary import SUMMARY_ABOVE, TrialSummary
from search.monitor.stopping import stop_on_signals
from search.worker.artifacts import artifact_store_for, existing_directory

__all__ = [
    "DashboardServer",
    "GzipJson",
    "host_name",
    "is_loopback",
    "large_studies",
    "open_dashboard",
    "port_number",
    "serve",
]

logger = logging.getLogger("search.monitor.dashboard")

NO_AUTH_WARNING = (
    "WARNING: the dashboard has no authentication, and anyone who can reach {where} can "
    "change and delete studies: keep it on 127.0.0.1 (reach it through an SSH tunnel) or "
    "give it a read-only database role"
)


LARGE_STUDY_TRIALS = SUMMARY_ABOVE
"""Above this many trials a study's page shows a summary of its trials (every trial was slow to
draw: bench/systems/dashboard.py), and the study is read when the dashboard starts."""


def large_studies(storage: Storage) -> list[tuple[str, int]]:
    """(name, trials) of every study with more than LARGE_STUDY_TRIALS trials."""
    return studies_with_more_trials_than(storage, LARGE_STUDY_TRIALS)


class _ThreadedWSGIServer(ThreadingMixIn, WSGIServer):
    """One thread per request, as optuna-dashboard's own command serves: a slow answer (a
    large study) does not stall the page's other requests."""

    daemon_threads = True


class _ThreadedWSGIServer6(_ThreadedWSGIServer):
    address_family = socket.AF_INET6


class GzipJson:
    """WSGI middleware: JSON and CSV answers gzip-compressed for clients that accept it.

    optuna-dashboard sends a study's every trial in one JSON answer (about 2.4 KB a trial with
    hpsearch's provenance attributes: 24 MB for 10,000 trials); it compresses about 10 to 1,
    which is what a dashboard reached through an SSH tunnel or a VPN waits for. Other answers
    (artifacts, the already compressed script bundle) pass through as they are, streamed.
    """

    compressed_types = ("application/json", "text/csv")
    min_bytes = 1024

    def __init__(self, app: Any, level: int = 1) -> None:
        self.app, self.level = app, level  # level 1: ~0.1 s for 24 MB, most of the gain

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if "gzip" not in environ.get("HTTP_ACCEPT_ENCODING", ""):
            return self.app(environ, start_response)
        answer: dict[str, Any] = {}

        def remember(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            answer.update(status=status, headers=headers, exc_info=exc_info)
            return lambda data: answer.setdefault("written", []).append(data)

        body = self.app(environ, remember)
        headers = answer["headers"]
        names = {k.lower(): v for k, v in headers}
        kind = names.get("content-type", "").split(";")[0].strip()
        if kind not in self.compressed_types or "content-encoding" in names:
            start_response(answer["status"], headers, answer["exc_info"])
            return body
        try:
            data = b"".join([*answer.get("written", []), *body])
        finally:
            if hasattr(body, "close"):
                body.close()
        if len(data) >= self.min_bytes:
            data = gzip.compress(data, compresslevel=self.level)
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers += [("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding")]
            headers.append(("Content-Length", str(len(data))))
        start_response(answer["status"], headers, answer["exc_info"])
        return [data]


def _scan_each_finished_trial_once(app: Any) -> bool:
    """Make optuna-dashboard's per-study summary (search space, attribute names) incremental
    for finished studies too; returns whether it could.

    optuna-dashboard (0.21) keeps that summary per study and updates it from a cursor, the
    first unfinished trial; with no unfinished trial the cursor never moves, so every answer
    (every refresh of an open page) scans every trial again: half the time of a large
    finished study's answer (bench/systems/dashboard.py). Here the cursor moves past the finished
    trials. Its internals are private: if they change, nothing is patched, and the dashboard
    only stays slower.
    """
    try:
        # optuna_dashboard loads plotly and bottle: only in `hpsearch dashboard`
        from optuna_dashboard._inmemory_cache import _CachedExtraStudyProperty
    except ImportError:
        return False
    cache = getattr(app, "_inmemory_cache", None)
    summaries = getattr(cache, "_cached_extra_study_property_cache", None)
    if not isinstance(summaries, dict) or not hasattr(_CachedExtraStudyProperty(), "_cursor"):
        return False

    class _Summary(_CachedExtraStudyProperty):  # type: ignore[misc]
        def update(self, trials: list[Any]) -> None:
            start = max(self._cursor, 0)
            unfinished = [
                t.number for t in trials if t.number >= start and not t.state.is_finished()
            ]
            super().update(trials)
            if unfinished:
                self._cursor = min(unfinished)
            elif trials:
                self._cursor = max(self._cursor, trials[-1].number + 1)

    class _Summaries(dict):  # type: ignore[type-arg]
        def get(self, key: Any, default: Any = None) -> Any:
            return super().get(key) or _Summary()

    cache._cached_extra_study_property_cache = _Summaries(summaries)
    return True


class _QuietHandler(WSGIRequestHandler):
    """Requests are logged at debug level (-v), through `logging`, where the password filter
    applies; the standard handler writes every request to stderr itself."""

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)


class _HidePassword(logging.Filter):
    """Replaces the database password with *** in every log record, whatever logged it
    (optuna-dashboard logs an error's text and traceback; a driver's error may quote a URL)."""

    def __init__(self, password: str) -> None:
        super().__init__()
        self.password = password

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.password in message:
            record.msg, record.args = message.replace(self.password, "***"), None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_info, record.exc_text = None, text.replace(self.password, "***")
        return True


class DashboardServer:
    """optuna-dashboard serving one storage, bound to host:port (port 0: a free one)."""

    def __init__(
        self, storage: Storage, host: str, port: int, artifacts: str | None = None
    ) -> None:
        from optuna_dashboard import wsgi  # only for this command: it loads plotly and bottle

        self.storage = storage
        self.artifact_store = artifact_store_for(storage, artifacts)
        self.read_only = is_read_only(storage)
        optuna_storage = storage.optuna_storage()
        bottle_app = wsgi(optuna_storage, artifact_store=self.artifact_store)
        self.rescans_fixed = _scan_each_finished_trial_once(bottle_app)
        source = bundle_path().read_text(encoding="utf-8")
        bundle = patch_bundle(source)
        self.curves_drawn = bundle is not None  # else optuna-dashboard's own chart
        summary = TrialSummary(bottle_app, optuna_storage, SUMMARY_ABOVE)
        summarizing = patch_trials_fetch(bundle or source, SUMMARY_ABOVE)
        # else a large study's page loads (and draws) every trial, as optuna-dashboard's does
        self.summaries = summary.available and summarizing is not None
        if self.summaries:
            bundle, api = summarizing, summary
        else:
            api = bottle_app
        app = BundleWithCurves(api, bundle) if bundle else api
        # The budget and the paused trials at the top of a study's page: dashboard_banner.py.
        app = GzipJson(StudyBanner(app, storage))
        server_class = _ThreadedWSGIServer6 if ":" in host else _ThreadedWSGIServer
        try:
            self.server = make_server(
                host, port, app, server_class=server_class, handler_class=_QuietHandler
            )
        except OSError as exc:  # in use, a host that is not this machine's, no such host
            raise StorageError(
                f"cannot serve on {host}:{port}: {exc.strerror or exc}"
                + (" (try another --port)" if exc.errno == 98 else "")
            ) from None
        self.host, self.port = host, self.server.server_address[1]
        self._bottle_app = bottle_app
        self.warmed = threading.Event()

    def warm_up(self) -> None:
        """Read every large study once, as its page's first answer would (its trials, optuna-
        dashboard's summary of them, its parameters' importances), so that the first page opened
        does not wait for it: the finished trials stay in memory after (bench/systems/
        dashboard.py: 10,000 trials take half a minute to read on a busy machine, then a
        fraction of a second). Runs in a thread of its own while the server answers; a failure
        only leaves the first page slower."""
        try:
            optuna_storage = self.storage.optuna_storage()
            for name, n in large_studies(self.storage):
                study_id = optuna_storage.get_study_id_from_name(name)
                # after=n: the whole answer computed, none of its trials sent; then the
                # parameters' importances the study page asks for (cached by optuna-dashboard
                # until more trials complete: seconds at 10,000 trials, beside the page's answer)
                for path, query in (
                    (f"/api/studies/{study_id}", f"after={n}"),
                    (f"/api/studies/{study_id}/param_importances", ""),
                ):
                    environ: dict[str, Any] = {}
                    setup_testing_defaults(environ)
                    environ.update(PATH_INFO=path, QUERY_STRING=query)
                    body = self._bottle_app(environ, lambda *args: None)
                    for _ in body:
                        pass
                    if hasattr(body, "close"):
                        body.close()
        except Exception as exc:  # the server still answers, only the first page is slower
            logger.debug("warming the large studies up failed: %s", exc)
        finally:
            self.warmed.set()

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/dashboard"

    def serve_forever(self) -> None:
        threading.Thread(target=self.warm_up, name="warm-up", daemon=True).start()
        self.server.serve_forever(poll_interval=0.2)

    def close(self) -> None:
        self.server.server_close()
        self.storage.close()


def open_dashboard(url: str, host: str, port: int, artifacts: str | None) -> DashboardServer:
    """Everything `hpsearch dashboard` checks before it serves: the artifacts directory, the
    database (reachable, migrated), the address. Raises StorageError (exit 2) on bad input."""
    if artifacts is not None:
        existing_directory(artifacts)
    storage = open_storage(url)
    try:
        check_schema(storage)
        return DashboardServer(storage, host, port, artifacts)
    except BaseException:
        storage.close()
        raise


def serve(url: str, host: str, port: int, artifacts: str | None) -> int:
    """`hpsearch dashboard`: serve until Ctrl-C or SIGTERM; returns 0 (stopped cleanly)."""
    with _password_hidden_in_logs(url), stop_on_signals():
        try:
            dashboard = open_dashboard(url, host, port, artifacts)
        except KeyboardInterrupt:  # stopped while starting: nothing to close
            print("dashboard stopped", file=sys.stderr)
            return 0
        try:
            _announce(dashboard, host, artifacts)
            dashboard.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            dashboard.close()
        print("dashboard stopped", file=sys.stderr)
    return 0


def _announce(dashboard: DashboardServer, host: str, artifacts: str | None) -> None:
    storage = dashboard.storage
    where = _artifacts_description(storage, artifacts)
    print(
        f"optuna-dashboard on {dashboard.url} (studies: {storage.safe_url}; artifacts: "
        f"{where}); Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    if dashboard.read_only:
        print(
            "read-only: this database role cannot write, so the dashboard only shows "
            "studies (notes, uploads, edits and deletes will fail)",
            file=sys.stderr,
            flush=True,
        )
    if not dashboard.curves_drawn:
        print(
            "this optuna-dashboard's page is not the one hpsearch knows: its intermediate "
            "values chart draws one line per trial (slow past a few hundred trials) and "
            "leaves paused trials out",
            file=sys.stderr,
        )
    for name, n in large_studies(storage):
        shown = (
            "its study page shows a summary of its trials, its trial list every trial"
            if dashboard.summaries
            else "its page loads every trial at once"
        )
        print(
            f"study {name!r} has {n} trials: {shown} (read now, in the background; README: "
            f"Large studies); `hpsearch status --study {name}` answers at once",
            file=sys.stderr,
        )
    if not is_loopback(host):
        print(NO_AUTH_WARNING.format(where=f"{host}:{dashboard.port}"), file=sys.stderr)


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable only from this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: whatever it resolves to, others may reach it
        return False


def _artifacts_description(storage: Storage, artifacts: str | None) -> str:
    if artifacts:
        return artifacts
    if storage.is_postgres:
        return "in the database"
    path = storage.sqlite_path()
    assert path is not None
    return str(path.with_name(path.name + ".artifacts"))


@contextlib.contextmanager
def _password_hidden_in_logs(url: str) -> Iterator[None]:
    password = make_url(url).password if "://" in url else None
    if not password:
        yield
        return
    hide = _HidePassword(str(password))
    handlers = logging.getLogger().handlers
    for handler in handlers:
        handler.addFilter(hide)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(hide)


def port_number(text: str) -> int:
    """--port: 0-65535 (0: any free port, printed when serving)."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise ValueError(f"must be between 0 and 65535, got {value}")
    return value


def host_name(text: str) -> str:
    """--host: an address or a name this machine can resolve."""
    try:
        socket.getaddrinfo(text, None)
    except socket.gaierror:
        raise ValueError(f"no such host: {text!r}") from None
    return text
