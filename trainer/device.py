"""Where a trial runs: the device, the precision it gets (and why), and its peak memory."""

from __future__ import annotations

import resource
import sys

import torch
import torch.distributed as dist

__all__ = [
    "choose_precision",
    "device_name",
    "peak_memory",
    "rank",
    "reset_peak_memory",
    "resolve_device",
    "world_size",
]


def resolve_device(device: str | None) -> torch.device:
    """`None` means the current CUDA device if there is one, else the CPU.

    Raises ValueError (one line) for a device this machine does not have.
    """
    if device is None:
        return (
            torch.device("cuda", torch.cuda.current_device())
            if torch.cuda.is_available()
            else torch.device("cpu")
        )
    try:
        resolved = torch.device(device)
    except RuntimeError:  # torch's message lists every device type it knows of
        raise ValueError(f"device {device!r}: not a device; use cpu, cuda or cuda:N") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available on this machine")
        if resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
        elif resolved.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    elif resolved.type != "cpu":
        raise ValueError(f"device {device!r}: use cpu, cuda or cuda:N")
    return resolved


def choose_precision(requested: str, device: torch.device) -> tuple[str, str]:
    """The precision a run gets on `device` for the requested one, with the reason, in words.

    Returns one of bf16 | fp16 | fp32. bf16 and fp16 mean autocast with fp32 weights (fp16 with
    loss scaling); a request the device cannot honour falls back rather than failing the trial.
    """
    if device.type != "cuda":
        if requested == "bf16":
            return "bf16", "bf16 requested: autocast to bfloat16 on the CPU"
        if requested == "fp16":
            return (
                "fp32",
                "fp16 requested, but fp16 with loss scaling needs a CUDA GPU: fp32 on the CPU",
            )
        if requested == "auto":
            return "fp32", "auto on the CPU: fp32 (bf16 autocast is slower than fp32 on most CPUs)"
        return "fp32", "fp32 requested"
    name = torch.cuda.get_device_name(device)
    major, minor = torch.cuda.get_device_capability(device)
    with torch.cuda.device(device):
        # Native bf16 only: emulated bf16 on pre-Ampere GPUs is slower than fp16 with loss scaling.
        has_bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    if requested == "fp32":
        return "fp32", "fp32 requested"
    if requested == "fp16":
        return "fp16", f"fp16 requested: autocast with loss scaling on {name}"
    if has_bf16:
        why = "requested" if requested == "bf16" else "auto"
        return "bf16", f"{why}: {name} (compute capability {major}.{minor}) supports bf16"
    prefix = "bf16 requested, but" if requested == "bf16" else "auto:"
    return "fp16", (
        f"{prefix} {name} (compute capability {major}.{minor}) has no native bf16: "
        "fp16 with loss scaling"
    )


def device_name(device: torch.device) -> str:
    """ "cpu", or the GPU's marketing name (e.g. "NVIDIA H100 80GB HBM3")."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def reset_peak_memory(device: torch.device) -> None:
    """Start counting CUDA peak memory from here (the CPU figure is the process's, see below)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> tuple[int, str]:
    """(bytes, what they measure).

    CUDA: ``torch.cuda.max_memory_allocated`` since `reset_peak_memory` ("cuda_max_allocated").
    CPU: the process's peak resident set size over its whole life ("process_peak_rss"), which
    includes torch itself and earlier trials in the same process: an upper bound for this run.
    """
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports kilobytes, macOS bytes.
    return (rss if sys.platform == "darwin" else rss * 1024), "process_peak_rss"


def world_size() -> int:
    """Ranks in this process's data-parallel group (1 outside one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank in its data-parallel group (0 outside one)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
