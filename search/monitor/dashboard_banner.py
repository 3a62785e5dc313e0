"""The study's progress where a user looks first: a line at the top of its dashboard page.

optuna-dashboard shows a study's note on a tab of its own and the study's user attributes
(``budget``, ``paused trials``) far down the page. `hpsearch dashboard` adds, above every page of
an hpsearch study, one line: the budget spent and left, the paused trials and the one leading
them (its value and rung), the best finished trial, what runs. It is read live from the
database (`search.monitor.status.study_status`, the figures `hpsearch status` shows) every
`POLL_S` seconds while the page is open and visible, so it follows the study as it runs.

Self-contained, beside optuna-dashboard's own page (nothing of its script bundle is changed):
`StudyBanner`, a WSGI middleware, serves the line as JSON (`PROGRESS`) and a small script
(`SCRIPT`) that draws it, and adds that script to the page's HTML (optuna-dashboard's
Content-Security-Policy allows scripts from the same origin). The line sits above
optuna-dashboard's own layout, which moves down by its height; a study that is not an hpsearch
study (no stored config) gets none.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from search.db.storage import Storage
from search.monitor.status import StudyStatus, study_status
from search.study.spending import budget_line
from search.study.studies import open_study

__all__ = ["POLL_S", "PROGRESS", "SCRIPT", "StudyBanner", "banner_items"]

logger = logging.getLogger("search.monitor.dashboard_banner")

POLL_S = 5
"""The page reads the line again this often (the workers publish their progress as often)."""
SCRIPT = "/hpsearch/study-banner.js"
PROGRESS = re.compile(r"^/hpsearch/api/studies/(\d+)/progress$")
BANNER_ID = "hpsearch-study-banner"

_SCRIPT_JS = """\
(function () {
  var ID = "%(id)s", POLL_MS = %(poll_ms)d;
  function studyId() {
    var m = window.location.pathname.match(/^\\/dashboard\\/studies\\/(\\d+)/);
    return m ? m[1] : null;
  }
  function place(h) {  // optuna-dashboard's fixed app bar and side bar, below the line
    document.body.style.paddingTop = h ? h + "px" : "";
    var fixed = document.querySelectorAll("header.MuiAppBar-positionFixed, .MuiDrawer-paper");
    for (var j = 0; j < fixed.length; j++) {
      fixed[j].style.top = h ? h + "px" : "";
      if (fixed[j].classList.contains("MuiDrawer-paper")) {
        fixed[j].style.height = h ? "calc(100%% - " + h + "px)" : "";
      }
    }
  }
  function render(id, data) {
    var el = document.getElementById(ID);
    if (!data || !data.items || !data.items.length || studyId() !== id) {
      if (el) {
        el.remove();
        place(0);
      }
      return;
    }
    if (!el) {
      el = document.createElement("div");
      el.id = ID;
      el.setAttribute("role", "status");
      el.style.cssText = "position:fixed;top:0;left:0;right:0;z-index:1500;" +
        "padding:4px 16px;font:14px/20px Roboto,Helvetica,Arial,sans-serif;" +
        "background:#fff8e1;color:#3e2723;border-bottom:1px solid #ffe082;" +
        "white-space:nowrap;overflow:hidden;text-overflow:ellipsis";
      document.body.appendChild(el);
    }
    el.textContent = "";
    data.items.forEach(function (item, i) {
      if (i) el.appendChild(document.createTextNode("  \\u00b7  "));
      var label = document.createElement("b");
      label.textContent = item.label + ": ";
      el.appendChild(label);
      el.appendChild(document.createTextNode(item.text));
    });
    el.title = el.textContent;
    place(el.offsetHeight);
  }
  function poll() {
    var id = studyId();
    if (id === null) {
      render(null, null);
      return;
    }
    if (document.hidden) return;
    fetch("/hpsearch/api/studies/" + id + "/progress", {cache: "no-store"})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) { render(id, data); })
      .catch(function () {});
  }
  var shown = null;
  setInterval(function () {  // the page changes its address without reloading
    if (window.location.pathname !== shown) {
      shown = window.location.pathname;
      poll();
    }
  }, 300);
  setInterval(poll, POLL_MS);
  document.addEventListener("visibilitychange", poll);
})();
"""


def banner_items(status: StudyStatus, *, pauses: bool = False) -> list[dict[str, str]]:
    """The line's parts, each {label, text}: budget, paused trials (any, or always when the
    study `pauses`: promotion-based ASHA), best, what runs; none for a study with neither a
    budget nor pauses."""
    items = []
    if status.budget:
        items.append({"label": "Budget", "text": budget_line(status.budget)})
    if status.paused or pauses:
        text = str(status.paused)
        p = status.leading_paused
        if p is not None:
            text += (
                f", leading: trial {p.number} {status.metric} {_number(p.value)} at rung "
                f"{p.rung} (waits for promotion)"
            )
        items.append({"label": "Paused trials", "text": text})
    if items:  # a study with a budget or pauses: the rest is context for them
        best = status.best
        items.append(
            {
                "label": "Best finished",
                "text": "none yet"
                if best is None
                else f"trial {best.number} {status.metric} {_number(best.value)}",
            }
        )
        if status.done:
            items.append({"label": "Study", "text": "over (hpsearch extend gives it more)"})
        else:
            items.append(
                {
                    "label": "Now",
                    "text": f"{status.running} running, {status.waiting} queued, "
                    f"{status.live_workers} live worker(s)",
                }
            )
    return items


def _number(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


class StudyBanner:
    """WSGI middleware: the progress line's JSON and script, and the script in the page."""

    def __init__(self, app: Any, storage: Storage) -> None:
        self.app, self.storage = app, storage
        self.script = (_SCRIPT_JS % {"id": BANNER_ID, "poll_ms": POLL_S * 1000}).encode()
        self.tag = f'<script defer src="{SCRIPT}"></script>'.encode()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD")
        if method not in ("GET", "HEAD"):
            return self.app(environ, start_response)
        if path == SCRIPT:
            return self._answer(start_response, "application/javascript", self.script, method)
        found = PROGRESS.match(path)
        if found:
            body = json.dumps({"items": self.items(int(found[1]))}).encode()
            return self._answer(start_response, "application/json", body, method)
        if method == "GET" and (path == "/dashboard" or path.startswith("/dashboard/")):
            return self._page(environ, start_response)
        return self.app(environ, start_response)

    def items(self, study_id: int) -> list[dict[str, str]]:
        """The line for study `study_id`; none for a study hpsearch did not make (or gone)."""
        try:
            name = self.storage.optuna_storage().get_study_name_from_id(study_id)
            study = open_study(self.storage, name)
        except Exception:  # not an hpsearch study, or deleted: no line
            return []
        try:
            return banner_items(
                study_status(self.storage, study), pauses=study.config.pruner.pauses
            )
        except Exception as exc:  # the page goes on without the line
            logger.debug("study %d: no progress line: %s", study_id, exc)
            return []

    def _page(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        """optuna-dashboard's page (index.html) with the script added to its head."""
        environ = {k: v for k, v in environ.items() if k != "HTTP_IF_MODIFIED_SINCE"}
        answer: dict[str, Any] = {}

        def remember(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            answer.update(status=status, headers=headers, exc_info=exc_info)
            return lambda data: answer.setdefault("written", []).append(data)

        body: Iterable[bytes] = self.app(environ, remember)
        try:
            data = b"".join([*answer.get("written", []), *body])
        finally:
            if hasattr(body, "close"):
                body.close()
        headers = answer["headers"]
        kind = {k.lower(): v for k, v in headers}.get("content-type", "")
        if answer["status"].startswith("200") and kind.startswith("text/html"):
            data = data.replace(b"</head>", self.tag + b"</head>", 1)
            headers = [(k, v) for k, v in headers if k.lower() not in ("content-length", "etag")]
            headers.append(("Content-Length", str(len(data))))
        start_response(answer["status"], headers, answer["exc_info"])
        return [data]

    @staticmethod
    def _answer(
        start_response: Callable[..., Any], kind: str, body: bytes, method: str
    ) -> list[bytes]:
        start_response(
            "200 OK",
            [
                ("Content-Type", kind),
                ("Cache-Control", "no-cache"),
                ("Content-Length", str(len(body))),
            ],
        )
        return [b""] if method == "HEAD" else [body]
