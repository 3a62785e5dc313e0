"""The LCBench surrogate served over stdin/stdout, for a peer that cannot import it (SMAC3 runs in
a virtualenv of its own: it needs ConfigSpace >= 1.0, yahpo-gym pins 0.6).

    python -m bench.efficiency.surrogate_server --instance 189906 [--data D] [--metric M]

JSON lines. First the server writes ``{"ready": true, "metric": M, "maximize": bool, "epochs":
50}``; then for every request line ``{"config": {...}, "epochs": n}`` it writes one response
line ``{"values": [...], "seconds": [...]}``: the first n trained epochs of the configuration's
curve (bench/efficiency/lcbench.py's `Curve.values` and `Curve.seconds`, exactly), or
``{"error": "..."}`` for a request it cannot answer. It ends at the end of its input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any, TextIO

from bench.efficiency.lcbench import EPOCHS, LCBench

__all__ = ["answer", "main", "serve"]


def answer(bench: LCBench, request: dict[str, Any]) -> dict[str, Any]:
    """The response to one request."""
    try:
        epochs = int(request.get("epochs", EPOCHS))
        if not 1 <= epochs <= EPOCHS:
            return {"error": f"epochs must be 1..{EPOCHS}, got {epochs}"}
        curve = bench.curve(request["config"])
    except (KeyError, TypeError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"values": list(curve.values[:epochs]), "seconds": list(curve.seconds[:epochs])}


def serve(bench: LCBench, inp: TextIO, out: TextIO) -> None:
    """Answer every request line of `inp` on `out` until `inp` ends."""
    out.write(
        json.dumps(
            {"ready": True, "metric": bench.metric, "maximize": bench.maximize, "epochs": EPOCHS}
        )
        + "\n"
    )
    out.flush()
    for line in inp:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            response: dict[str, Any] = {"error": f"not JSON: {exc}"}
        else:
            response = answer(bench, request)
        out.write(json.dumps(response) + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instance", required=True)
    parser.add_argument("--data", default=None)
    parser.add_argument("--metric", default="val_accuracy")
    args = parser.parse_args(argv)
    try:
        bench = LCBench(args.instance, args.data, metric=args.metric)
    except (FileNotFoundError, ValueError, ImportError) as exc:
        print(f"surrogate_server: {exc}", file=sys.stderr)
        return 2
    serve(bench, sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        sys.exit(main())
