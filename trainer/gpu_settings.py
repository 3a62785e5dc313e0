"""The numerics settings a run sets on its device, stated in one line for the log and the trial.

Policy (process-wide torch switches, set at the start of every run, since trials in one worker
may differ):

- TF32 (Ampere and newer): fp32 matmuls and convolutions may use TF32 tensor cores (10-bit
  mantissa) under bf16/fp16 autocast, where they are the few ops left in fp32. With
  ``precision = "fp32"`` TF32 is off: fp32 means fp32.
- cuDNN: ``benchmark`` on (it times the convolution algorithms for each new input shape once and
  keeps the fastest; the fastest can differ from run to run, so results differ in the last bits).
- ``[train] deterministic = true``: cuDNN benchmark off and deterministic algorithms only
  (``torch.use_deterministic_algorithms(True, warn_only=True)``, ``CUBLAS_WORKSPACE_CONFIG``):
  two runs, or a run and its resume on another GPU of the same model, give the same bits. Cost:
  deterministic kernels are slower (typically 5-30% on convolutional models, more where an op
  falls back to a serial kernel, e.g. scatter/index_add backward); ops that have no
  deterministic CUDA implementation (AdaptiveAvgPool2d backward, NLLLoss with reduction on CUDA,
  ...) still run and torch warns naming them: such a model is not bitwise reproducible on a GPU.

On the CPU, runs are bitwise reproducible with or without the option (same machine and torch
build): the trainer seeds every generator and the CPU kernels it uses are deterministic.
"""

from __future__ import annotations

import os

import torch

__all__ = ["apply_gpu_settings"]


def apply_gpu_settings(device: torch.device, precision: str, deterministic: bool) -> str:
    """Set torch's numerics switches for a run on `device`; return them in words."""
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    if device.type != "cuda":
        return "cpu: deterministic kernels" + (" (deterministic = true)" if deterministic else "")
    if deterministic:
        # cuBLAS needs a fixed workspace to be deterministic; read when its handle is created.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    tf32 = precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = not deterministic
    torch.backends.cudnn.deterministic = deterministic
    parts = [
        "TF32 on for the fp32 ops left under autocast" if tf32 else "TF32 off (fp32 is fp32)",
        "cudnn deterministic, benchmark off (deterministic = true: slower)"
        if deterministic
        else "cudnn benchmark on (fastest kernels; not bitwise reproducible)",
    ]
    return f"{device}: " + ", ".join(parts)
