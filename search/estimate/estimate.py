"""`hpsearch estimate`: the training memory of a study's configurations before launch, and the
efficiency study of one configuration (``--measure``).

Without ``--measure``: the configurations at the extremes of each parameter of ``[space]`` (the
others at the middle of their range), all parameters low, all high, and a few random samples,
each measured by `trainer.memory.fit_memory` (a dry forward, backward and optimizer step of one
micro-batch on fake tensors); against the device's memory, whether each fits as configured, or
with which of the trainer's adaptations (gradient checkpointing, smaller micro-batches with
more accumulation), or not at all.

With ``--measure``: a few real training steps of one configuration (``--set``) under fp32, bf16
(fp16 on GPUs without bf16), accumulation and checkpointing, one at a time and combined, each in
a fresh process (``python -m search.estimate.estimate --row``): peak memory and time per optimizer
step against the fp32 baseline.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.study.config import ConfigError, StudyConfig, load_config, params_from_overrides
from search.study.space import CategoricalParam, IntParam, Param, Scalar

if TYPE_CHECKING:  # trainer.memory imports torch: loaded when a command runs, not on import
    from trainer.memory import MemoryFit, MemoryPlan, MemoryTarget

__all__ = [
    "ACCUMULATION",
    "NOISY_SPREAD",
    "Configuration",
    "Technique",
    "TechniqueRow",
    "configurations",
    "estimate_memory",
    "format_estimate",
    "format_techniques",
    "measure_techniques",
    "run_estimate",
    "techniques",
]

ACCUMULATION = 4
"""Micro-batches per optimizer step in the accumulation rows of ``--measure``."""
NOISY_SPREAD = 1.5
"""Slowest over fastest step of a row above which ``--measure`` warns that times are noisy."""


@dataclass(frozen=True)
class Configuration:
    """One row of the estimate: a label ("center", "width=64", "sample 2") and its params."""

    label: str
    params: dict[str, Any]


# -- which configurations ---------------------------------------------------------------------


def configurations(space: tuple[Param, ...], *, samples: int, seed: int) -> list[Configuration]:
    """The middle of the space; each parameter at its low and high end (others in the middle);
    all low; all high; `samples` random points. Duplicates are dropped (first label wins)."""
    center = {p.name: p.center() for p in space}
    rows = [Configuration("center", center)]
    ends = {p.name: _ends(p) for p in space}
    for p in space:
        for value in ends[p.name]:
            rows.append(Configuration(f"{p.name}={_show(value)}", {**center, p.name: value}))
    if len(space) > 1:
        rows.append(Configuration("all low", {n: e[0] for n, e in ends.items()}))
        rows.append(Configuration("all high", {n: e[-1] for n, e in ends.items()}))
    rng = random.Random(seed)
    for i in range(samples):
        rows.append(Configuration(f"sample {i + 1}", {p.name: _sample(p, rng) for p in space}))
    unique: list[Configuration] = []
    for row in rows:
        if all(row.params != seen.params for seen in unique):
            unique.append(row)
    return unique


def _ends(p: Param) -> list[Scalar]:
    """[low, high]; a categorical's smallest and largest choice (first and last if not all
    numbers)."""
    if isinstance(p, CategoricalParam):
        numbers = [c for c in p.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
        if len(numbers) == len(p.choices):
            return [min(numbers), max(numbers)]
        return [p.choices[0], p.choices[-1]]
    return p.grid_values(2)


def _sample(p: Param, rng: random.Random) -> Scalar:
    if isinstance(p, CategoricalParam):
        return rng.choice(p.choices)
    if p.log:
        value = math.exp(rng.uniform(math.log(p.low), math.log(p.high)))
    else:
        value = rng.uniform(p.low, p.high)
    if isinstance(p, IntParam):
        steps = round((value - p.low) / p.step)
        return min(p.high, p.low + steps * p.step)
    if p.step is not None:
        return min(p.high, p.low + round((value - p.low) / p.step) * p.step)
    return min(p.high, max(p.low, value))


# -- the estimate -----------------------------------------------------------------------------


def estimate_memory(
    config: StudyConfig, target: MemoryTarget, rows: list[Configuration]
) -> list[tuple[Configuration, MemoryFit]]:
    """Each configuration's `trainer.memory.MemoryFit` on `target` (a `MemoryTarget`).

    Raises `trainer.memory.MemoryCheckError` when a configuration's step cannot be measured.
    """
    from trainer import resolve_task
    from trainer.memory import MemoryCheckError, fit_memory

    factory = resolve_task(config.task.name)
    out = []
    for row in rows:
        try:
            out.append((row, fit_memory(factory, row.params, config.train, target)))
        except MemoryCheckError as exc:
            raise MemoryCheckError(f"{row.label} ({_params_text(row.params)}): {exc}") from None
    return out


def independent_of(
    space: tuple[Param, ...], fits: list[tuple[Configuration, MemoryFit]]
) -> list[str]:
    """Parameters whose low and high ends measure exactly the center's bytes."""
    by_label = {row.label: fit for row, fit in fits}
    if "center" not in by_label:  # one configuration (--set)
        return []
    center = by_label["center"].configured.total_bytes
    names = []
    for p in space:
        ends = [by_label.get(f"{p.name}={_show(v)}") for v in _ends(p)]
        if all(fit is None or fit.configured.total_bytes == center for fit in ends):
            names.append(p.name)
    return names


def estimate_json(
    config_path: str,
    config: StudyConfig,
    target: MemoryTarget,
    fits: list[tuple[Configuration, MemoryFit]],
) -> dict[str, Any]:
    """The object ``--json`` prints."""
    from trainer.memory import HEADROOM

    notes = sorted({note for _, fit in fits for note in fit.notes})
    return {
        "config": config_path,
        "task": config.task.name,
        "target": {
            "device_type": target.device_type,
            "device_name": target.device_name,
            "precision": target.precision,
            "precision_reason": target.precision_reason,
            "limit_bytes": target.limit_bytes,
            "usable_bytes": target.usable_bytes,
            "headroom": HEADROOM,
            "limit_source": target.limit_source,
        },
        "optimizer": config.train.optimizer,
        "notes": notes,
        "configurations": [
            {
                "label": row.label,
                "params": row.params,
                "fits": fit.fits,
                "verdict": fit.verdict,
                "reason": fit.reason if fit.fits is False else None,
                "can_checkpoint": fit.can_checkpoint,
                "configured": fit.configured.to_dict(),
                "fitted": None if fit.fitted is None else fit.fitted.to_dict(),
            }
            for row, fit in fits
        ],
        "independent_of": independent_of(config.space, fits),
    }


def format_estimate(
    config_path: str,
    config: StudyConfig,
    target: MemoryTarget,
    fits: list[tuple[Configuration, MemoryFit]],
) -> str:
    """The human table: one row per configuration (parameters that change nothing folded)."""
    from trainer.memory import HEADROOM, format_size

    same = independent_of(config.space, fits)
    folded = {f"{name}={_show(v)}" for name in same for v in _ends(config.param(name))}
    first = fits[0][1].configured
    lines = [
        f"{config_path}: training memory of task {config.task.name!r}, measured by a dry "
        f"forward, backward and {config.train.optimizer} step of one micro-batch "
        f"({'fake tensors, no compute' if first.measured_on.startswith('fake') else 'on the CPU'})",
        f"device: {target.device_name}, {target.limit_source}"
        + (
            f" ({format_size(target.usable_bytes)} usable: {HEADROOM:.0%} headroom)"
            if target.usable_bytes is not None
            else ": nothing to check against (give --device-memory)"
        ),
        f"precision: {target.precision} ({target.precision_reason})",
    ]
    lines += [f"note: {note}" for note in sorted({n for _, fit in fits for n in fit.notes})]
    header = ("configuration", "batch", "weights", "grads", "optimizer", "activations", "data")
    table = [(*header, "peak", "fits")]
    for row, fit in fits:
        if row.label in folded:
            continue
        m = fit.configured
        table.append(
            (
                row.label,
                str(m.plan.batch_size),
                format_size(m.weights_bytes),
                format_size(m.gradients_bytes),
                format_size(m.optimizer_bytes),
                format_size(m.activations_bytes),
                format_size(m.data_bytes),
                format_size(m.total_bytes),
                _fits_cell(fit),
            )
        )
    lines += ["", *_columns(table, right=range(1, 8))]
    if same:
        lines.append(f"(memory does not depend on {', '.join(same)}: those rows are left out)")
    lines.append("")
    shown = [(row, fit) for row, fit in fits if row.label not in folded]
    for row, _ in shown:
        if row.label == "center" or row.label.startswith(("sample", "all ")):
            lines.append(f"{row.label}: {_params_text(row.params)}")
    lines += [
        "peak: the step's measured peak plus the data kept on the device (less than the sum of "
        "the parts, which do not all live at once)",
        "fits: yes as configured, else the first of the trainer's adaptations to an "
        "out-of-memory error that fits: micro-batch x accumulation (+ ckpt: gradient "
        "checkpointing), with its peak",
    ]
    return "\n".join(lines)


def _fits_cell(fit: MemoryFit) -> str:
    """ "yes", or the trainer's first adaptation that fits ("16 x 4 + ckpt: 1.71 MiB"), or
    "NO" with what the last one needs."""
    from trainer.memory import format_size

    if fit.fits is None:
        return "-"
    if fit.fits is False:
        last = fit.tried[-1]
        return f"NO: {_short(last.plan)} needs {format_size(last.total_bytes)}"
    fitted = fit.fitted
    assert fitted is not None  # it fits
    if fitted.plan == fit.configured.plan:
        return "yes"
    return f"{_short(fitted.plan)}: {format_size(fitted.total_bytes)}"


def _short(plan: MemoryPlan) -> str:
    """micro-batch x accumulation, "+ ckpt" with gradient checkpointing."""
    text = f"{plan.micro_batch} x {plan.grad_accum_steps}"
    return text + (" + ckpt" if plan.grad_checkpointing else "")


# -- the efficiency study (--measure) ---------------------------------------------------------


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
    """`trainer.memory.StepTiming.to_dict()` of the row's process, or None if it was not run."""
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
    import torch

    from trainer import resolve_task
    from trainer.device import choose_precision, resolve_device
    from trainer.memory import MemoryTarget, can_checkpoint, fit_memory

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
        [sys.executable, "-m", "search.estimate.estimate", "--row"],
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
        + (f" ({_size(min(rss))} to {_size(max(rss))} here)" if rss else ""),
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
        f"{config_path}: {_params_text(params)}",
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
                _size(row.peak_bytes),
                _ratio(row.peak_bytes, base.peak_bytes),
                _size(row.estimate_bytes),
                _seconds(row.timing["step_seconds"]),
                "n/a (1)" if time_meaningless else _ratio(row.step_seconds, base.step_seconds),
            )
        )
    lines += _columns(table, right=range(2, 7))
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


# -- the command ------------------------------------------------------------------------------


def run_estimate(args: argparse.Namespace) -> int:
    """`hpsearch estimate`: returns the exit code; bad input raises ConfigError."""
    config = load_config(args.config)
    from trainer import TaskImportError, resolve_task

    try:
        resolve_task(config.task.name)
    except TaskImportError as exc:
        raise ConfigError(f"task.name: {exc}") from None
    from trainer.memory import MemoryCheckError, MemoryTarget, parse_size

    limit = None
    if args.device_memory is not None:
        try:
            limit = parse_size(args.device_memory)
        except ValueError as exc:
            raise ConfigError(f"--device-memory: {exc}") from None
    params = params_from_overrides(config.space, args.overrides) if args.overrides else None
    if args.measure:
        if limit is not None:
            raise ConfigError("--measure trains for real on --device: --device-memory is not used")
        return _run_measure(args, config, params or params_from_overrides(config.space, []))
    try:
        if args.device is None and limit is not None and not _cuda_available():
            target = MemoryTarget.for_gpu(limit, config.train.precision)
        else:
            target = MemoryTarget.for_device(args.device, config.train.precision, limit)
    except ValueError as exc:
        raise ConfigError(f"--device: {exc}") from None
    if args.samples < 0:
        raise ConfigError(f"--samples: must be >= 0, got {args.samples}")
    rows = (
        [Configuration("given", params)]
        if params is not None
        else configurations(config.space, samples=args.samples, seed=config.study.seed)
    )
    try:
        fits = estimate_memory(config, target, rows)
    except MemoryCheckError as exc:
        print(f"hpsearch: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(estimate_json(args.config, config, target, fits)))
    elif params is not None:
        print(_format_one(args.config, target, *fits[0]))
    else:
        print(format_estimate(args.config, config, target, fits))
    return 0


def _format_one(config_path: str, target: MemoryTarget, row: Configuration, fit: MemoryFit) -> str:
    """One configuration (``--set``): every plan tried, in the trainer's order."""
    from trainer.memory import format_size

    lines = [
        f"{config_path}: {_params_text(row.params)}",
        f"device: {target.device_name}, {target.limit_source}; precision {target.precision} "
        f"({target.precision_reason})",
        *[f"note: {note}" for note in fit.notes],
        "",
    ]
    table = [("plan", "weights", "grads", "optimizer", "activations", "data", "peak")]
    for m in fit.tried:
        table.append(
            (
                m.plan.describe(),
                format_size(m.weights_bytes),
                format_size(m.gradients_bytes),
                format_size(m.optimizer_bytes),
                format_size(m.activations_bytes),
                format_size(m.data_bytes),
                format_size(m.total_bytes),
            )
        )
    lines += _columns(table, right=range(1, 7))
    lines += ["", fit.reason]
    if target.usable_bytes is not None:
        lines[-1] += f" (usable: {format_size(target.usable_bytes)})"
    return "\n".join(lines)


def _run_measure(args: argparse.Namespace, config: StudyConfig, params: dict[str, Any]) -> int:
    from trainer.device import resolve_device

    try:
        device = str(resolve_device(args.device))
    except ValueError as exc:
        raise ConfigError(f"--device: {exc}") from None
    from trainer.memory import MemoryCheckError

    try:
        rows, context = measure_techniques(
            args.config, config, params, device=device, steps=args.steps
        )
    except MemoryCheckError as exc:
        print(f"hpsearch: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(_techniques_json(args.config, params, rows, context)))
    else:
        print(format_techniques(args.config, params, rows, context))
    return 0 if all(r.timing is not None or r.skipped for r in rows) else 1


def _techniques_json(
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
                "memory_vs_fp32": _plain_ratio(row.peak_bytes, base.peak_bytes),
                "estimate_bytes": row.estimate_bytes,
                "median_step_s": row.step_seconds,
                "time_vs_fp32": _plain_ratio(row.step_seconds, base.step_seconds),
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
    """``python -m search.estimate.estimate --row``: one technique's steps; JSON in (stdin),
    JSON out."""
    import logging

    from trainer import resolve_task
    from trainer.memory import time_steps

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


# -- formatting -------------------------------------------------------------------------------


def _columns(table: list[tuple[str, ...]], right: range) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return [
        "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in table
    ]


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={_show(v)}" for k, v in params.items())


def _batch(params: dict[str, Any]) -> int:
    from trainer.loop import DEFAULT_BATCH_SIZE

    return int(params.get("batch_size", DEFAULT_BATCH_SIZE))


def _size(value: int | None) -> str:
    from trainer.memory import format_size

    return format_size(value)


def _ratio(value: float | None, base: float | None) -> str:
    ratio = _plain_ratio(value, base)
    return "-" if ratio is None else f"{ratio:.2f}"


def _plain_ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else value / base


def _seconds(values: list[float]) -> str:
    if not values:
        return "-"
    mid = statistics.median(values)
    unit, scale = ("ms", 1e3) if mid < 1 else ("s", 1.0)
    return f"{mid * scale:.1f} {unit} ({min(values) * scale:.1f}-{max(values) * scale:.1f})"


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__" and sys.argv[1:] == ["--row"]:
    sys.exit(_row_main())
