"""The estimate: each configuration's training memory (`trainer.memory.fit_memory`, a dry step
on fake tensors) against the device, as a table or JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from search.estimate.picking import Configuration, param_ends
from search.estimate.sharding import sharded_fits, sharded_lines
from search.estimate.text import columns, params_text
from search.study.settings import StudyConfig
from search.study.space import Param
from search.terminal import format_value
from trainer import resolve_task
from trainer.sizes import HEADROOM, format_size

if TYPE_CHECKING:  # trainer.memory imports torch: loaded when a command runs, not on import
    from trainer.memory import MemoryFit, MemoryPlan, MemoryTarget, StepMemory

__all__ = ["estimate_json", "estimate_memory", "format_estimate", "format_one", "independent_of"]


def estimate_memory(
    config: StudyConfig, target: MemoryTarget, rows: list[Configuration]
) -> list[tuple[Configuration, MemoryFit]]:
    """Each configuration's `trainer.memory.MemoryFit` on `target` (a `MemoryTarget`).

    Raises `trainer.memory.MemoryCheckError` when a configuration's step cannot be measured.
    """
    from trainer.memory import MemoryCheckError, fit_memory  # imports torch

    factory = resolve_task(config.task.name)
    out = []
    for row in rows:
        try:
            out.append((row, fit_memory(factory, row.params, config.train, target)))
        except MemoryCheckError as exc:
            raise MemoryCheckError(f"{row.label} ({params_text(row.params)}): {exc}") from None
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
        at_ends = [by_label.get(f"{p.name}={format_value(v)}") for v in param_ends(p)]
        if all(fit is None or fit.configured.total_bytes == center for fit in at_ends):
            names.append(p.name)
    return names


def estimate_json(
    config_path: str,
    config: StudyConfig,
    target: MemoryTarget,
    fits: list[tuple[Configuration, MemoryFit]],
) -> dict[str, Any]:
    """The object ``--json`` prints."""
    notes = sorted({note for _, fit in fits for note in fit.notes})
    sharded = _sharded(config, target, fits)
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
        "sharding": config.train.sharding,
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
                **(
                    {}
                    if row.label not in sharded
                    else {
                        "per_gpu": [r.to_dict() for r in sharded[row.label][0]],
                        "smallest_gpus": sharded[row.label][1],
                    }
                ),
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
    same = independent_of(config.space, fits)
    folded = {f"{name}={format_value(v)}" for name in same for v in param_ends(config.param(name))}
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
        table.append((row.label, str(m.plan.batch_size), *_size_cells(m), _fits_cell(fit)))
    lines += ["", *columns(table, right=range(1, 8))]
    if same:
        lines.append(f"(memory does not depend on {', '.join(same)}: those rows are left out)")
    lines.append("")
    shown = [(row, fit) for row, fit in fits if row.label not in folded]
    for row, _ in shown:
        if row.label == "center" or row.label.startswith(("sample", "all ")):
            lines.append(f"{row.label}: {params_text(row.params)}")
    lines += [
        "peak: the step's measured peak plus the data kept on the device (less than the sum of "
        "the parts, which do not all live at once)",
        "fits: yes as configured, else the first of the trainer's adaptations to an "
        "out-of-memory error that fits: micro-batch x accumulation (+ ckpt: gradient "
        "checkpointing), with its peak",
    ]
    lines += _sharded_text(config, target, [(r, f) for r, f in fits if r.label not in folded])
    return "\n".join(lines)


def _sharded(
    config: StudyConfig, target: MemoryTarget, fits: list[tuple[Configuration, MemoryFit]]
) -> dict[str, Any]:
    """`search.estimate.sharding` per configuration, for a study with sharding = "fsdp"."""
    if config.train.sharding != "fsdp":
        return {}
    return sharded_fits(resolve_task(config.task.name), target, fits)


def _sharded_text(
    config: StudyConfig, target: MemoryTarget, fits: list[tuple[Configuration, MemoryFit]]
) -> list[str]:
    """With sharding = "fsdp": the fewest GPUs per configuration, and the per-GPU table of
    the first (the center, or the one given)."""
    sharded = _sharded(config, target, fits)
    if not sharded:
        return []
    first, (rows, smallest) = next(iter(sharded.items()))
    lines = ["", *sharded_lines(first, rows, smallest, target.usable_bytes)]
    if len(sharded) > 1 and target.usable_bytes is not None:
        need = [
            f"{label}: {'more than ' + str(r[-1].ranks) if n is None else n}"
            for label, (r, n) in sharded.items()
        ]
        lines.append("GPUs needed (fsdp): " + ", ".join(need))
    lines.append(
        "per GPU: (weights + grads + optimizer) / N, activations of the rank's 1/N of the "
        "micro-batch, the 2 largest units' weights gathered in the compute precision, the data"
    )
    return lines


def _size_cells(m: StepMemory) -> tuple[str, ...]:
    """weights, grads, optimizer, activations, data and peak, as the tables show them."""
    parts = (m.weights_bytes, m.gradients_bytes, m.optimizer_bytes, m.activations_bytes)
    return tuple(format_size(b) for b in (*parts, m.data_bytes, m.total_bytes))


def _fits_cell(fit: MemoryFit) -> str:
    """ "yes", or the trainer's first adaptation that fits ("16 x 4 + ckpt: 1.71 MiB"), or
    "NO" with what the last one needs."""
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


def format_one(
    config_path: str,
    target: MemoryTarget,
    row: Configuration,
    fit: MemoryFit,
    config: StudyConfig | None = None,
) -> str:
    """One configuration (``--set``): every plan tried, in the trainer's order."""
    lines = [
        f"{config_path}: {params_text(row.params)}",
        f"device: {target.device_name}, {target.limit_source}; precision {target.precision} "
        f"({target.precision_reason})",
        *[f"note: {note}" for note in fit.notes],
        "",
    ]
    table = [("plan", "weights", "grads", "optimizer", "activations", "data", "peak")]
    for m in fit.tried:
        table.append((m.plan.describe(), *_size_cells(m)))
    lines += columns(table, right=range(1, 7))
    lines += ["", fit.reason]
    if target.usable_bytes is not None:
        lines[-1] += f" (usable: {format_size(target.usable_bytes)})"
    if config is not None:
        lines += _sharded_text(config, target, [(row, fit)])
    return "\n".join(lines)
