"""The intermediate-values chart that `hpsearch dashboard` serves in optuna-dashboard's bundle
(what it draws is checked in Chromium: test_dashboard_browser.py)."""

from __future__ import annotations

import gzip
import json
import time

from search.monitor.dashboard_frontend import (
    BundleWithCurves,
    bundle_path,
    patch_bundle,
    patch_trials_fetch,
)


def test_the_installed_optuna_dashboard_gets_the_chart_paused_trials_included() -> None:
    source = bundle_path().read_text(encoding="utf-8")
    patched = patch_bundle(source, limit=300)
    assert patched is not None, "optuna-dashboard's bundle changed shape: the chart is not drawn"
    assert "window.hpsearchIntermediateCurves(" in patched
    assert patched.count('"Waiting"===') > source.count('"Waiting"===')
    assert ",300);" in patched
    assert ".length>1000?" in patched  # the timeline's bars: the last 100 past 1,000 trials
    # only the chart's function changed: the rest of the bundle is there as it was
    assert len(patched) - len(source) < 5000
    assert source[-2000:] == patched[-2000:]


def test_a_bundle_of_another_shape_is_left_alone() -> None:
    assert patch_bundle("(()=>{console.log('no chart here')})();") is None
    source = bundle_path().read_text(encoding="utf-8")
    start = source.index('"Running"===e.state),')
    twice = source + source[start - 400 : start + 1200]
    assert patch_bundle(twice) is None  # two candidates: neither is guessed at


def test_the_installed_optuna_dashboard_asks_for_a_summary_of_large_studies() -> None:
    source = bundle_path().read_text(encoding="utf-8")
    patched = patch_trials_fetch(source, above=2000)
    assert patched is not None, "optuna-dashboard's bundle changed shape: pages load every trial"
    # the refresh asks what the page's script says (0: every trial, or the summary, again)
    assert patched.count("=window.hpsearchTrialsAfter(") == 1
    assert "var above = 2000," in patched and "hpsearch_summary=1" in patched
    assert len(patched) - len(source) < 5000 and source[-2000:] == patched[-2000:]
    assert patch_trials_fetch("(()=>{console.log('no refresh here')})();", 2000) is None


def test_the_bundle_is_served_compressed_and_revalidated() -> None:
    def optuna_dashboard(environ: dict, start_response: object) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "application/json")])  # type: ignore[operator]
        return [json.dumps({"path": environ["PATH_INFO"]}).encode()]

    app = BundleWithCurves(optuna_dashboard, "window.x = 1;")
    for _ in range(100):  # compressed in a thread of its own
        if app.gzipped is None:
            time.sleep(0.1)
    answers: list[tuple[str, dict[str, str]]] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc: object = None) -> None:
        answers.append((status, dict(headers)))

    get = {"PATH_INFO": "/static/bundle.js", "REQUEST_METHOD": "GET"}
    body = b"".join(app({**get, "HTTP_ACCEPT_ENCODING": "gzip, br"}, start_response))
    status, headers = answers[-1]
    assert status == "200 OK" and headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(body) == b"window.x = 1;"
    assert headers["Cache-Control"] == "no-cache"
    assert b"".join(app(get, start_response)) == b"window.x = 1;"
    assert b"".join(app({**get, "HTTP_IF_NONE_MATCH": headers["ETag"]}, start_response)) == b""
    assert answers[-1][0] == "304 Not Modified"
    other = app({"PATH_INFO": "/api/studies/1", "REQUEST_METHOD": "GET"}, start_response)
    assert json.loads(b"".join(other)) == {"path": "/api/studies/1"}
