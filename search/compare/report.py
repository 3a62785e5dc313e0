"""The report files of `hpsearch compare` (report.md, report.html, summary.json, the plots) and
their attachment to the compared studies; the figures come from `search.compare.statistics`."""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from search.compare.collect import collect
from search.compare.plan import CompareRequest, CompareRun
from search.compare.plots import write_plots
from search.compare.statistics import BOOTSTRAP_RESAMPLES, fmt, summarize
from search.db.storage import Storage
from search.study.studies import StudyRef
from search.worker.artifacts import DirectoryArtifactStore, artifact_store_for

__all__ = ["REPORT_ATTR", "WrittenReport", "attach_report", "report_blocks", "write_report"]

REPORT_ATTR = "hpsearch:compare_report"
"""Study system attribute: the artifact ids of the attached report (replaced on a rerun)."""


@dataclass
class WrittenReport:
    markdown: Path
    html: Path
    summary: Path
    plots: list[Path]
    conclusions: list[str]


def write_report(
    storage: Storage,
    request: CompareRequest,
    runs: Sequence[CompareRun],
    refs: Sequence[StudyRef],
) -> WrittenReport:
    """Read the studies, write summary.json, the plots, report.md and report.html."""
    out = request.out_dir
    out.mkdir(parents=True, exist_ok=True)
    params = request.config.space
    grid_runs = [r for r in runs if r.strategy.sampler == "grid"]
    grid = {k: list(v) for k, v in grid_runs[0].config.grid_values().items()} if grid_runs else None
    results = collect(storage, runs, refs)
    summary = summarize(results, request, params, grid)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plots = write_plots(results, summary, params, out)
    blocks = report_blocks(summary, plots)
    (out / "report.md").write_text(_markdown(blocks))
    (out / "report.html").write_text(_html(blocks, out))
    return WrittenReport(
        markdown=out / "report.md",
        html=out / "report.html",
        summary=out / "summary.json",
        plots=[out / name for name, _ in plots],
        conclusions=summary["conclusions"],
    )


Block = tuple[Any, ...]


def report_blocks(summary: dict[str, Any], plots: list[tuple[str, str]]) -> list[Block]:
    s = summary
    metric = s["metric"]
    strategies = s["strategies"]
    names = [p for p in next(iter(strategies.values()))["distinct_values"]] if strategies else []
    blocks: list[Block] = [
        ("h1", f"Search strategies compared: {s['study']}"),
        (
            "p",
            f"Config `{s['config']}`: {len(strategies)} strategies, {s['repeats']} repeats each, "
            + (
                f"a budget of {s['budget']} trials per study ({s['epochs_per_trial']} epochs per "
                "trial unless pruned)"
                if not s.get("budget_epochs")
                else f"at equal compute: a budget of {s['budget_epochs']} epochs trained per "
                f"study, pruned and paused trials' epochs included ({s['epochs_per_trial']} "
                "epochs per fully trained trial; strategies that prune spend what they save on "
                "more trials)"
            )
            + f", {metric} to {s['direction']}. Each repeat is a study of "
            f"its own, named `{s['study']}-<strategy>-r<k>`, with its own seed.",
        ),
    ]
    if s["grid"] is not None:
        sizes = " x ".join(str(len(v)) for v in s["grid"].values())
        total = math.prod(len(v) for v in s["grid"].values())
        shown = "; ".join(
            f"{k}: " + ", ".join(f"{x:.3g}" if isinstance(x, float) else str(x) for x in v)
            for k, v in s["grid"].items()
        )
        fill = (
            "every point is run"
            if total == s["budget"]
            else f"the budget is no product of the counts, so {s['budget']} of its points are "
            "run, those the grid sampler's seeded shuffle picks first"
        )
        blocks.append(
            (
                "p",
                f"The grid: {sizes} = {total} points ({shown}); {fill}. Numeric parameters get "
                "points one at a time, the one with the fewest first, until the grid holds the "
                "budget; categorical ones keep all their choices.",
            )
        )
    blocks.append(("h2", "Conclusions"))
    blocks.append(("ul", s["conclusions"]))
    blocks.append(("h2", "Final best per strategy"))
    rows = []
    for label, st in strategies.items():
        ci = st["ci95"]
        rows.append(
            [
                label,
                ", ".join(fmt(b) for b in st["best_per_repeat"]),
                fmt(st["mean"]),
                fmt(st["sd"]),
                "-" if ci is None else f"[{ci[0]:.4g}, {ci[1]:.4g}]",
            ]
        )
    blocks.append(("table", ["strategy", "best per repeat", "mean", "sd", "95% CI of mean"], rows))
    blocks.append(
        (
            "p",
            "The best of a repeat is its best complete trial (pruned trials stopped early and do "
            "not count), as `hpsearch status` reports it. The interval is a percentile bootstrap "
            f"of the mean ({BOOTSTRAP_RESAMPLES} resamples); with few repeats it is rough.",
        )
    )
    blocks.append(("h2", "Cost and coverage"))
    rows = []
    for label, st in strategies.items():
        per = st["epochs_to_target"]
        median = st["epochs_to_target_median"]
        reached = [v for v in per if v is not None]
        spread = f" ({min(reached)}-{max(reached)})" if reached else ""
        rows.append(
            [
                label,
                *(
                    f"{np.mean(st['distinct_values'][n]):.3g}" if st["studies"] else "-"
                    for n in names
                ),
                str(st["epochs_trained_total"]),
                ("not reached" if median is None else f"{median:g}") + spread,
                f"{st['reached_target']}/{len(st['studies'])}",
            ]
        )
    blocks.append(
        (
            "table",
            [
                "strategy",
                *(f"distinct {n}" for n in names),
                "epochs trained (all repeats)",
                "epochs to target: median (range)",
                "reached",
            ],
            rows,
        )
    )
    target = s["target"]
    blocks.append(
        (
            "p",
            f"Distinct values: the mean over repeats of the values each study tried. Target: "
            f"{fmt(target['value'])}, {target['rule']}. Epochs to target counts every epoch "
            "of every trial finished up to the first complete trial that reached it; a repeat "
            "that never reached it counts as infinite in the median.",
        )
    )
    if s["tests"]:
        blocks.append(("h2", "Pairwise tests"))
        rows = [
            [
                f"{t['a']} vs {t['b']}",
                f"{t['u']:g}",
                f"{t['p']:.3g}",
                f"{t['p_holm']:.3g}",
                f"{t['leader']} {t['difference']:+.3g} ({t['difference_ci95'][0]:+.3g} to "
                f"{t['difference_ci95'][1]:+.3g})",
                f"{t['leader']} in {t['leader_ahead']} of {t['pairings']}",
                "yes" if t["significant"] else "no significant difference",
            ]
            for t in s["tests"]
        ]
        blocks.append(
            (
                "table",
                [
                    "pair",
                    "U",
                    "p",
                    "Holm p",
                    "leader: mean difference (95% interval)",
                    "ahead in pairings",
                    f"significant at {s['alpha']}",
                ],
                rows,
            )
        )
        blocks.append(
            (
                "p",
                "Two-sided Mann-Whitney rank tests on the final bests (scipy), Holm-adjusted for "
                "the number of pairs. The leader is the strategy with the better mean final best; "
                "its difference is its mean minus the other's, in the metric's units, with a "
                "95% bootstrap interval. 'Ahead in pairings': of all (run, run) pairings of the "
                "two strategies, those in which the leader's run scored better (ties are "
                "neither). The effect is shown whatever the test says: with few repeats a "
                "large effect can be not significant.",
            )
        )
    blocks.append(("h2", "Plots"))
    for name, caption in plots:
        blocks.append(("img", name, caption))
    blocks.append(("h2", "Studies"))
    blocks.append(
        (
            "table",
            ["strategy", "studies", "seeds", "trials finished", "epochs trained"],
            [
                [
                    label,
                    ", ".join(st["studies"]),
                    ", ".join(str(x) for x in st["seeds"]),
                    ", ".join(str(x) for x in st["trials_finished"]),
                    ", ".join(str(x) for x in st["epochs_trained"]),
                ]
                for label, st in strategies.items()
            ],
        )
    )
    return blocks


def _markdown(blocks: list[Block]) -> str:
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h1":
            lines += [f"# {block[1]}", ""]
        elif kind == "h2":
            lines += [f"## {block[1]}", ""]
        elif kind == "p":
            lines += [block[1], ""]
        elif kind == "ul":
            lines += [f"- {item}" for item in block[1]] + [""]
        elif kind == "table":
            header, rows = block[1], block[2]
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + " --- |" * len(header))
            lines += ["| " + " | ".join(row) + " |" for row in rows]
            lines.append("")
        elif kind == "img":
            lines += [f"![{block[2]}]({block[1]})", "", f"*{block[2]}*", ""]
    return "\n".join(lines)


def _inline_code(text: str) -> str:
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _html(blocks: list[Block], out: Path) -> str:
    body: list[str] = []
    title = "hpsearch compare"
    for block in blocks:
        kind = block[0]
        if kind == "h1":
            title = block[1]
            body.append(f"<h1>{html.escape(block[1])}</h1>")
        elif kind == "h2":
            body.append(f"<h2>{html.escape(block[1])}</h2>")
        elif kind == "p":
            body.append(f"<p>{_inline_code(block[1])}</p>")
        elif kind == "ul":
            items = "".join(f"<li>{_inline_code(i)}</li>" for i in block[1])
            body.append(f"<ul>{items}</ul>")
        elif kind == "table":
            head = "".join(f"<th>{html.escape(h)}</th>" for h in block[1])
            rows = "".join(
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                for row in block[2]
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "img":
            data = base64.b64encode((out / block[1]).read_bytes()).decode()
            body.append(
                f'<figure><img alt="{html.escape(block[1])}" src="data:image/png;base64,{data}">'
                f"<figcaption>{html.escape(block[2])}</figcaption></figure>"
            )
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.45}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
        "padding:4px 8px;text-align:left}th{background:#f4f4f4}img{max-width:100%}"
        "figcaption{color:#555;font-size:90%}code{background:#f4f4f4;padding:0 3px}"
    )
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def attach_report(
    storage: Storage, refs: Sequence[StudyRef], report: WrittenReport, artifacts_dir: str | None
) -> None:
    """Upload report.html and summary.json to every compared study as Optuna artifacts, so
    that optuna-dashboard shows them with the study (`hpsearch dashboard --artifacts DIR` for a
    directory; on PostgreSQL without one, the database itself, as checkpoints). A rerun
    writes the new report into the artifacts it attached before."""
    store = (
        DirectoryArtifactStore(artifacts_dir)
        if artifacts_dir
        else artifact_store_for(storage, None)
    )
    optuna_storage = storage.optuna_storage()
    files = (report.html, report.summary)
    for ref in refs:
        previous = optuna_storage.get_study_system_attrs(ref.study_id).get(REPORT_ATTR)
        if previous and len(previous) == len(files):
            # A rerun: the same artifacts get the new content (Optuna's API has no way to
            # remove an artifact's entry from a study; optuna-dashboard leaves a null behind,
            # which optuna.artifacts.get_all_artifact_meta cannot read).
            for artifact_id, path in zip(previous, files, strict=True):
                with open(path, "rb") as body:
                    store.write(artifact_id, body)
            continue
        study = optuna.load_study(study_name=ref.name, storage=optuna_storage)
        ids = [
            optuna.artifacts.upload_artifact(
                artifact_store=store, file_path=str(path), study_or_trial=study
            )
            for path in files
        ]
        optuna_storage.set_study_system_attr(ref.study_id, REPORT_ATTR, ids)
