"""optuna-dashboard's page, served with its intermediate-values chart drawn for large studies.

optuna-dashboard's study page draws the intermediate values as one plotly line per trial,
each with a legend entry: at 1,000 trials that chart is most of the 20 s the page takes to
show, and at 10,000 the browser does not finish it in minutes (bench/systems/dashboard.py). It
also leaves out the trials an ASHA study has paused at a rung: they are WAITING in Optuna's
table, and the chart draws only COMPLETE, PRUNED and RUNNING trials.

`hpsearch dashboard` serves optuna-dashboard's own script bundle with that one chart's drawing
function replaced (`patch_bundle`): up to `CURVES_ONE_BY_ONE` curves it draws as optuna-dashboard
does (one line per trial, named in the legend), paused trials included and named "(paused)";
above that, every curve still, but as one line per kind of trial (complete, pruned, running,
paused, infeasible), curves separated by gaps, each point saying its trial on hover. The
timeline, which shows the last 100 trials, draws bars only for them past `TIMELINE_BARS_OF_ALL`
trials (optuna-dashboard draws one for every trial). Nothing else in the drawing changes, and
every trial keeps its own page with its own curve.

For studies of more than `search.monitor.dashboard_summary.SUMMARY_ABOVE` trials, the study's
top and analytics pages are fed a summary of the trials (`patch_trials_fetch`: the page's study
refresh asks for the whole summary again rather than the trials after those it holds, and a
wrapper around `fetch` asks for the summary on those pages and says what it shows in a banner;
`search/monitor/dashboard_summary.py` answers).

The bundle is minified: each function is found by what it does (its filter on the trial states,
its per-trial traces; the refresh's `after`), not by a name. Where optuna-dashboard's bundle no
longer has that shape (another version), that part is served as it is (every trial drawn one by
one; every trial loaded) and `hpsearch dashboard` says so.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "CURVES_ONE_BY_ONE",
    "BundleWithCurves",
    "bundle_path",
    "patch_bundle",
    "patch_trials_fetch",
]

CURVES_ONE_BY_ONE = 300
"""Up to this many curves in the chart, one line each (optuna-dashboard's drawing); above, one
line per kind of trial."""

TIMELINE_BARS_OF_ALL = 1000
"""Up to this many trials, the timeline draws a bar for each (optuna-dashboard's drawing); above,
only for the last 100, those its range shows."""

_HELPER = "hpsearchIntermediateCurves"

# optuna-dashboard 0.21's plotIntermediateValue, minified (names vary between builds):
#   const o=e.filter(e=>!r&&"Complete"===e.state||!n&&"Pruned"===e.state&&e.values&&
#   e.values.length>0||"Running"===e.state),s=o.map(e=>{...});nv.react(wb,s,a)}
_CHART = re.compile(
    r"const (?P<kept>[\w$]+)=(?P<trials>[\w$]+)\.filter\((?P<t>[\w$]+)=>"
    r'!(?P<no_complete>[\w$]+)&&"Complete"===(?P=t)\.state\|\|'
    r'!(?P<no_pruned>[\w$]+)&&"Pruned"===(?P=t)\.state&&(?P=t)\.values&&'
    r'(?P=t)\.values\.length>0\|\|"Running"===(?P=t)\.state\),'
    r"(?P<traces>[\w$]+)=(?P=kept)\.map\((?P<body>.{0,700}?\(running\).{0,300}?)\);"
    r"(?P<plotly>[\w$]+)\.react\((?P<dom>[\w$]+),(?P=traces),(?P<layout>[\w$]+)\)\}"
)

# optuna-dashboard 0.21's plotTimeline: the range shows the last 100 trials (`lastTrials`), but
# a bar is drawn for every trial, each with its hover text.
_TIMELINE = re.compile(
    r"(?P<last>[\w$]+)=(?P<trials>[\w$]+)\.slice\(-\d+\),(?P<mid>.{0,2500}?)"
    r"for\(const\[(?P<state>[\w$]+),(?P<color>[\w$]+)\]of Object\.entries\((?P<colors>[\w$]+)\)\)"
    r"\{const (?P<bars>[\w$]+)=(?P=trials)\.filter\("
)

# Prepended to the bundle: the traces of the chart, from the trials it keeps.
_HELPER_JS = """\
window.%(helper)s = function (trials, limit) {
  function kind(t) {
    if (t.state === "Running") return "running";
    if (t.state === "Waiting") return "paused";
    if (!t.constraints.every(function (c) { return c <= 0; })) return "infeasible";
    return t.state === "Pruned" ? "pruned" : "complete";
  }
  if (trials.length <= limit) {
    return trials.map(function (t) {
      var k = kind(t);
      var trace = {
        x: t.intermediate_values.map(function (v) { return v.step; }),
        y: t.intermediate_values.map(function (v) { return v.value; }),
        marker: {maxdisplayed: 10}, mode: "lines+markers", type: "scatter",
        name: "trial #" + t.number + " " + (k === "complete" || k === "pruned" ? "" : "(" + k + ")")
      };
      if (k === "infeasible") trace.line = {color: "#CCCCCC"};
      return trace;
    });
  }
  var order = ["infeasible", "pruned", "complete", "paused", "running"];
  var colors = {infeasible: "#CCCCCC", pruned: "#ff7f0e", complete: "#1f77b4",
                paused: "#7f7f7f", running: "#2ca02c"};
  var groups = {};
  trials.forEach(function (t) {
    var k = kind(t);
    var g = groups[k] || (groups[k] = {x: [], y: [], text: [], n: 0});
    var label = "trial #" + t.number;
    t.intermediate_values.forEach(function (v) {
      g.x.push(v.step); g.y.push(v.value); g.text.push(label);
    });
    g.x.push(null); g.y.push(null); g.text.push("");
    g.n += 1;
  });
  return order.filter(function (k) { return groups[k]; }).map(function (k) {
    var g = groups[k];
    return {
      x: g.x, y: g.y, text: g.text, type: "scatter", mode: "lines", connectgaps: false,
      name: k + " (" + g.n + " trials)", line: {width: 1, color: colors[k]},
      opacity: k === "pruned" ? 0.4 : 0.8,
      hovertemplate: "%%{text}<br>step %%{x}: %%{y}<extra>" + k + "</extra>"
    };
  });
};
"""


def patch_bundle(source: str, limit: int = CURVES_ONE_BY_ONE) -> str | None:
    """optuna-dashboard's script bundle with the intermediate-values chart drawn by
    `hpsearchIntermediateCurves` (paused trials in, one line per kind above `limit` curves);
    None when the bundle does not have the expected shape (exactly one such chart)."""
    found = _near(source, _CHART, "(running)", 1500, 600)
    if len(found) != 1:
        return None
    m = found[0]
    t, trials = m["t"], m["trials"]
    replacement = (
        f'const {m["kept"]}={trials}.filter({t}=>!{m["no_complete"]}&&"Complete"==={t}.state'
        f'||!{m["no_pruned"]}&&"Pruned"==={t}.state&&{t}.values&&{t}.values.length>0'
        f'||"Running"==={t}.state||"Waiting"==={t}.state&&{t}.intermediate_values.length>0),'
        f"{m['traces']}=window.{_HELPER}({m['kept']},{int(limit)});"
        f"{m['plotly']}.react({m['dom']},{m['traces']},{m['layout']})}}"
    )
    patched = source[: m.start()] + replacement + source[m.end() :]
    timeline = _near(patched, _TIMELINE, 'title:"Datetime"', 1500, 2500)
    if len(timeline) == 1:  # else the timeline stays as it is: slower, not wrong
        t = timeline[0]
        bars = f"({t['trials']}.length>{TIMELINE_BARS_OF_ALL}?{t['last']}:{t['trials']})"
        start = t.end() - len(t["trials"] + ".filter(")  # the trials the bars are taken from
        patched = patched[:start] + bars + ".filter(" + patched[t.end() :]
    return _HELPER_JS % {"helper": _HELPER} + patched


# optuna-dashboard 0.21's updateStudyDetail: it asks for the trials after the first unfinished
# one it holds (`n`) and puts them after the ones it keeps:
#   let n=0;if(r in i){const e=i[r].trials,t=e.findIndex(...);n=-1===t?e.length:t}
#   e.getStudyDetail(r,n).then(e=>{...;const t=r in i?i[r].trials.slice(0,n):[];
#   e.trials=t.concat(e.trials),h(r,e)})
_REFRESH = re.compile(
    r"(?P<after>[\w$]+)=-1===(?P<i>[\w$]+)\?(?P<held>[\w$]+)\.length:(?P=i)\}"
    r"(?P<client>[\w$]+)\.getStudyDetail\((?P<study>[\w$]+),(?P=after)\)\.then\("
)

# Prepended to the bundle with `_REFRESH` patched: the study's top and analytics pages ask for a
# summary of a large study's trials (search/monitor/dashboard_summary.py) and say so in a banner.
_SUMMARY_JS = """\
(function () {
  var above = %(above)d, summarized = {}, total = {};
  function summaryPage() {
    return /\\/studies\\/\\d+(\\/analytics)?\\/?$/.test(window.location.pathname);
  }
  // A summary held is replaced whole (`after` 0), and so is every trial held on a page that
  // shows a summary; otherwise the trials after the first unfinished one, as optuna-dashboard asks.
  window.%(after)s = function (studyId, after) {
    if (summarized[studyId] || (summaryPage() && total[studyId] > above)) return 0;
    return after;
  };
  function banner(studyId, text) {
    var div = document.getElementById("hpsearch-summary");
    if (text === null || !summaryPage()) {
      if (div) div.remove();
      return;
    }
    if (!div) {
      div = document.createElement("div");
      div.id = "hpsearch-summary";
      div.style.cssText = "position:fixed;left:0;right:0;bottom:0;z-index:2000;" +
        "padding:6px 16px;font:14px sans-serif;background:#fff8e1;color:#333;" +
        "border-top:1px solid #ffcc80";
      document.body.appendChild(div);
    }
    var trialList = window.location.pathname.replace(
      /\\/studies\\/(\\d+).*$/, "/studies/$1/trials");
    div.textContent = "hpsearch dashboard: " + text + " ";
    var link = document.createElement("a");
    link.href = trialList;
    link.textContent = "every trial (" + total[studyId].toLocaleString("en-US") + ")";
    div.appendChild(link);
  }
  var plainFetch = window.fetch;
  window.fetch = function (input, init) {
    var found = typeof input === "string" &&
      /\\/api\\/studies\\/(\\d+)\\?after=(\\d+)$/.exec(input);
    if (!found) return plainFetch.apply(window, arguments);
    var studyId = Number(found[1]);
    var url = found[2] === "0" && summaryPage() ? input + "&hpsearch_summary=1" : input;
    return plainFetch.call(window, url, init).then(function (answer) {
      if (answer.ok) {
        var n = answer.headers.get("X-Hpsearch-Trials");
        if (n !== null) total[studyId] = Number(n);
        var text = answer.headers.get("X-Hpsearch-Summary");
        summarized[studyId] = text !== null;
        banner(studyId, text);
      }
      return answer;
    });
  };
})();
"""

_AFTER = "hpsearchTrialsAfter"


def patch_trials_fetch(source: str, above: int) -> str | None:
    """optuna-dashboard's script bundle with the study page fed a summary of the trials of
    studies of more than `above` trials (`search/monitor/dashboard_summary.py` answers it);
    None when the bundle does not have the expected shape (exactly one refresh of a study)."""
    found = _near(source, _REFRESH, ".getStudyDetail(", 300, 300)
    if len(found) != 1:
        return None
    m = found[0]
    after, study = m["after"], m["study"]
    replacement = (
        f"{after}=-1==={m['i']}?{m['held']}.length:{m['i']}}}"
        f"{after}=window.{_AFTER}({study},{after});"
        f"{m['client']}.getStudyDetail({study},{after}).then("
    )
    patched = source[: m.start()] + replacement + source[m.end() :]
    return _SUMMARY_JS % {"above": int(above), "after": _AFTER} + patched


def _near(
    source: str, pattern: re.Pattern[str], anchor: str, before: int, after: int
) -> list[re.Match[str]]:
    """The distinct matches of `pattern` within `before`/`after` characters of each occurrence
    of `anchor` (a pattern that starts with a name is slow to try at each of a 6 MB bundle's
    characters: a minute on a busy machine)."""
    found: dict[tuple[int, int], re.Match[str]] = {}
    at = source.find(anchor)
    while at != -1:
        for m in pattern.finditer(source, max(0, at - before), at + after):
            found.setdefault(m.span(), m)
        at = source.find(anchor, at + 1)
    return list(found.values())


def bundle_path() -> Path:
    """optuna-dashboard's script bundle, as installed."""
    import optuna_dashboard

    return Path(optuna_dashboard.__file__).with_name("public") / "bundle.js"


class BundleWithCurves:
    """WSGI middleware: `/static/bundle.js` answered with the patched bundle (gzip-compressed for
    clients that accept it, revalidated on every load so that a browser never keeps a copy from
    another server); every other request goes to optuna-dashboard."""

    path = "/static/bundle.js"

    def __init__(self, app: Any, bundle: str) -> None:
        self.app = app
        self.body = bundle.encode()
        self.etag = '"hpsearch-' + hashlib.sha256(self.body).hexdigest()[:20] + '"'
        self.gzipped: bytes | None = None  # compressed in the background: seconds on a busy host
        threading.Thread(target=self._compress, name="bundle-gzip", daemon=True).start()

    def _compress(self) -> None:
        self.gzipped = gzip.compress(self.body, compresslevel=6)

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != self.path or environ.get("REQUEST_METHOD") not in (
            "GET",
            "HEAD",
        ):
            return self.app(environ, start_response)
        headers = [
            ("Content-Type", "application/javascript"),
            ("Cache-Control", "no-cache"),
            ("ETag", self.etag),
            ("Vary", "Accept-Encoding"),
        ]
        if environ.get("HTTP_IF_NONE_MATCH") == self.etag:
            start_response("304 Not Modified", headers)
            return [b""]
        body, gzipped = self.body, self.gzipped
        if gzipped is not None and "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzipped
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        start_response("200 OK", headers)
        return [b""] if environ["REQUEST_METHOD"] == "HEAD" else [body]
