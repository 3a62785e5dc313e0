"""The efficiency study of one configuration (`hpsearch estimate --measure`): a few real
training steps under fp32, bf16 (fp16 on GPUs without bf16), accumulation and checkpointing, one
at a time and combined, each in a fresh process (``python -m search.estimate.measure --row``):
peak memory and time per optimizer step against the fp32 baseline.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from search.estimate.text import columns, params_text, plain_ratio, ratio, seconds
from search.study.parse_config import load_config
from search.study.settings import ConfigError, StudyConfig
from trainer import resolve_task
from trainer.config import DEFAULT_BATCH_SIZE
from trainer.grad_checkpointing import can_checkpoint
from trainer.sizes import format_size

__all__ = [
    "ACCUMULATION",
    "NOISY_SPREAD",
    "Technique",
    "TechniqueRow",
    "format_techniques",
    "measure_techniques",
    "run_measure",
    "techniques",
    "techniques_json",
]

ACCUMULATION = 4
"""Micro-batches per optimizer step in the accumulation rows of ``--measure``."""


NOISY_SPREAD = 1.5
"""Slowest over fastest step of a row above which ``--measure`` warns that times are noisy."""


@dataclass(frozen=True)
class Technique:
    """One row of the efficiency study: the training settings it changes."""

    label: str
    precision: str
    grad_accum_steps: int
    grad_checkpointing: bool


@dataclass(kw_only=True)
class TechniqueRow:
    """A technique, measured: the real steps' timing and memory, and the dry run's estimate."""

    technique: Technique
    timing: dict[str, Any] | None = None
    """`step_timing.StepTiming.to_dict()` of the row's process, or None if it was not run."""
    estimate_bytes: int | None = None
    """The dry run's peak of the same step (weights, gradients, state, activations, data)."""
    skipped: str | None = None
    """Why the row was not run (e.g. the model has no checkpointing switch)."""
    error: str | None = None
    """The row's process failed: its last line of output."""
    caveats: list[str] = field(default_factory=list)
    """Which of the row's figures mean nothing on this device, and why."""

    @property
    def peak_bytes(self) -> int | None:
        """torch's tensors at their peak: CUDA's allocator statistics on a GPU; on a CPU, the
        tensors counted by a dispatch mode over two real steps."""
        if self.timing is None:
            return None
        if self.timing["tensor_peak_bytes"] is not None:
            return self.timing["tensor_peak_bytes"]
        return self.timing["peak_memory_bytes"]

    @property
    def step_seconds(self) -> float | None:
        """The median time per optimizer step."""
        if self.timing is None or not self.timing["step_seconds"]:
            return None
        return statistics.median(self.timing["step_seconds"])


def techniques(half: str, batch_size: int) -> list[Technique]:
    """fp32 (the baseline), half precision, accumulation, checkpointing, and all three."""
    accum = min(ACCUMULATION, batch_size)
    return [
        Technique("fp32 (baseline)", "fp32", 1, False),
        Technique(f"{half} autocast", half, 1, False),
        Technique(f"accumulation x{accum}", "fp32", accum, False),
        Technique("gradient checkpointing", "fp32", 1, True),
        Technique(f"{half} + accumulation x{accum} + checkpointing", half, accum, True),
    ]


def measure_techniques(
    config_path: str,
    config: StudyConfig,
    params: dict[str, Any],
    *,
    device: str,
    steps: int,
) -> tuple[list[TechniqueRow], dict[str, Any]]:
    """Each technique's real steps in a fresh process, plus its dry-run estimate.

    Returns the rows and what holds for all of them (device, precision reasoning, notes).
    """
    # torch loads here, when a measurement runs, not when a command starts
    import torch  # torch loads when a measurement runs

    from trainer.device import choose_precision, resolve_device
    from trainer.memory import MemoryTarget, fit_memory

    where = resolve_device(device)
    half = choose_precision("auto", where)[0] if where.type == "cuda" else "bf16"
    if half == "fp32":  # a GPU that the trainer would not run in half precision
        half = "fp16"
    factory = resolve_task(config.task.name)
    batch_size = _batch(params)
    checkpointable = can_checkpoint(factory(dict(params)).model)
    rows = []
    for technique in techniques(half, batch_size):
        row = TechniqueRow(technique=technique)
        rows.append(row)
        if technique.grad_checkpointing and not checkpointable:
            row.skipped = "the model has no gradient checkpointing switch"
            continue
        train = replace(
            config.train,
            precision=technique.precision,
            grad_accum_steps=technique.grad_accum_steps,
            grad_checkpointing=technique.grad_checkpointing,
        )
        target = MemoryTarget.for_device(str(where), technique.precision, None)
        row.estimate_bytes = fit_memory(factory, params, train, target).configured.total_bytes
        row.timing, row.error = _run_row(config_path, params, train, str(where), steps)
        timing = row.timing
        if timing is not None and (
            timing["status"] not in ("preempted", "completed") or not timing["step_seconds"]
        ):
            row.error = f"training {timing['status']}: {timing['reason']}"
            row.timing = None
    context: dict[str, Any] = {"device": str(where), "half": half, "notes": []}
    spread = max(
        (max(r.timing["step_seconds"]) / min(r.timing["step_seconds"]) for r in rows if r.timing),
        default=1.0,
    )  # every row with a timing has step times (see above)
    if spread > NOISY_SPREAD:
        context["notes"].append(
            f"step times vary up to {spread:.1f}x within a row: other work on this machine; "
            "compare times with care (more --steps, a quieter machine)"
        )
    if where.type == "cpu":
        _cpu_caveats(rows, context)
    else:
        context["device_name"] = torch.cuda.get_device_name(where)
        context["notes"].append(
            "peak: torch.cuda.max_memory_allocated of each row's process (the caching "
            "allocator's own count); time: each step ends with a synchronize"
        )
    return rows, context


def _run_row(
    config_path: str, params: dict[str, Any], train: Any, device: str, steps: int
) -> tuple[dict[str, Any] | None, str | None]:
    """One technique in a fresh process: its peak resident set is then its own."""
    request = {
        "config": str(Path(config_path).resolve()),
        "params": params,
        "train": {
            "precision": train.precision,
            "grad_accum_steps": train.grad_accum_steps,
            "grad_checkpointing": train.grad_checkpointing,
        },
        "device": device,
        "steps": steps,
    }
    done = subprocess.run(
        [sys.executable, "-m", "search.estimate.measure", "--row"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"exit code {done.returncode}: {last}"
    return json.loads(lines[-1]), None


def _cpu_caveats(rows: list[TechniqueRow], context: dict[str, Any]) -> None:
    """Say which figures mean nothing on a CPU, and why, rather than print them as if."""
    native = _cpu_has_native_bf16()
    for row in rows:
        if row.technique.precision != "fp32":
            row.caveats.append(
                "time: bf16 on a CPU says nothing about a GPU's tensor cores ("
                + (
                    "this CPU has native bf16 instructions, but the kernels differ"
                    if native
                    else "this CPU has no native bf16 instructions: it emulates them"
                )
                + ")"
            )
    rss = [r.timing["peak_memory_bytes"] for r in rows if r.timing is not None]
    context["process_peak_rss"] = rss
    context["notes"] += [
        "peak: torch's tensors at their peak over two real steps, counted by a dispatch mode "
        "(a CPU's allocator keeps no statistics); kernels' internal scratch is not counted",
        "the process's peak resident set (each row a fresh process) is not shown per row: it "
        "is process-wide, torch's own runtime and the allocator's cache dominate it"
        + (f" ({format_size(min(rss))} to {format_size(max(rss))} here)" if rss else ""),
        "time: on a CPU; accumulation and checkpointing cost a GPU differently (a small "
        "micro-batch can leave a GPU idle)",
    ]


def _cpu_has_native_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def format_techniques(
    config_path: str, params: dict[str, Any], rows: list[TechniqueRow], context: dict[str, Any]
) -> str:
    """The techniques table, then one line per technique: what it bought against fp32."""
    base = rows[0]
    where = context.get("device_name", context["device"])
    lines = [
        f"{config_path}: {params_text(params)}",
        f"efficiency study on {where}: {len(base.timing['step_seconds']) if base.timing else 0} "
        "timed optimizer steps per row after 2 warm-up steps, each row in a fresh process",
        "",
    ]
    table = [("technique", "micro-batch", "peak", "vs fp32", "dry run", "time/step", "vs fp32")]
    for row in rows:
        t = row.technique
        micro = f"{math.ceil(_batch(params) / t.grad_accum_steps)} x {t.grad_accum_steps}"
        if row.timing is None:  # why: in its reading below
            table.append((t.label, micro, "-", "-", "-", "-", "-"))
            continue
        time_meaningless = any(c.startswith("time:") for c in row.caveats)
        table.append(
            (
                t.label,
                micro,
                format_size(row.peak_bytes),
                ratio(row.peak_bytes, base.peak_bytes),
                format_size(row.estimate_bytes),
                seconds(row.timing["step_seconds"]),
                "n/a (1)" if time_meaningless else ratio(row.step_seconds, base.step_seconds),
            )
        )
    lines += columns(table, right=range(2, 7))
    lines.append("")
    for row in rows[1:]:
        lines.append(_reading(row, base))
    lines.append("")
    if any(row.caveats for row in rows):
        lines.append(f"(1) {next(c for r in rows for c in r.caveats)}")
    lines += [f"- {note}" for note in context["notes"]]
    if any(r.timing and r.timing["steps_include_evaluation"] for r in rows):
        lines.append("- an epoch is shorter than the steps timed: some times include evaluation")
    for row in rows:
        if row.timing and row.timing["adapted"]:
            lines.append(f"- {row.technique.label}: the trainer adapted: {row.timing['adapted']}")
    return "\n".join(lines)


def _reading(row: TechniqueRow, base: TechniqueRow) -> str:
    label = row.technique.label
    if row.timing is None:
        return f"{label}: not measured ({row.skipped or row.error})"
    if base.timing is None:
        return f"{label}: no baseline to compare with ({base.error})"
    memory = row.peak_bytes / base.peak_bytes
    bought = f"{1 - memory:.0%} less peak memory" if memory < 1 else f"{memory - 1:.0%} more memory"
    if any(c.startswith("time:") for c in row.caveats):
        return f"{label}: {bought}; its time on this CPU means nothing for a GPU (1)"
    speed = row.step_seconds / base.step_seconds
    cost = f"{speed - 1:.0%} more time per step" if speed >= 1 else f"{1 - speed:.0%} less time"
    return f"{label}: {bought} for {cost}"


def run_measure(args: argparse.Namespace, config: StudyConfig, params: dict[str, Any]) -> int:
    from trainer.device import resolve_device  # imports torch: only when measuring

    try:
        device = str(resolve_device(args.device))
    except ValueError as exc:
        raise ConfigError(f"--device: {exc}") from None
    from trainer.memory import MemoryCheckError  # imports torch: only when measuring

    try:
        rows, context = measure_techniques(
            args.config, config, params, device=device, steps=args.steps
        )
    except MemoryCheckError as exc:
        print(f"hpsearch: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(techniques_json(args.config, params, rows, context)))
    else:
        print(format_techniques(args.config, params, rows, context))
    return 0 if all(r.timing is not None or r.skipped for r in rows) else 1


def techniques_json(
    config_path: str, params: dict[str, Any], rows: list[TechniqueRow], context: dict[str, Any]
) -> dict[str, Any]:
    base = rows[0]
    return {
        "config": config_path,
        "params": params,
        **context,
        "rows": [
            {
                "technique": row.technique.label,
                "precision": row.technique.precision,
                "grad_accum_steps": row.technique.grad_accum_steps,
                "grad_checkpointing": row.technique.grad_checkpointing,
                "peak_bytes": row.peak_bytes,
                "memory_vs_fp32": plain_ratio(row.peak_bytes, base.peak_bytes),
                "estimate_bytes": row.estimate_bytes,
                "median_step_s": row.step_seconds,
                "time_vs_fp32": plain_ratio(row.step_seconds, base.step_seconds),
                "time_meaningful": not any(c.startswith("time:") for c in row.caveats),
                "caveats": row.caveats,
                "skipped": row.skipped,
                "error": row.error,
                "timing": row.timing,
            }
            for row in rows
        ],
    }


def _row_main() -> int:
    """``python -m search.estimate.measure --row``: one technique's steps; JSON in (stdin),
    JSON out."""
    from search.estimate.step_timing import time_steps  # imports torch: in the row's process

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    request = json.load(sys.stdin)
    config = load_config(request["config"])
    train = replace(config.train, **request["train"])
    timing = time_steps(
        resolve_task(config.task.name),
        request["params"],
        train,
        device=request["device"],
        steps=request["steps"],
    )
    print(json.dumps(timing.to_dict()))
    return 0


def _batch(params: dict[str, Any]) -> int:
    return int(params.get("batch_size", DEFAULT_BATCH_SIZE))


if __name__ == "__main__" and sys.argv[1:] == ["--row"]:
    sys.exit(_row_main())
