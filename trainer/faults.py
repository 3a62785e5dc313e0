"""Which errors are the device's, not the trial's: out of memory, and a CUDA context gone bad.

`classify` sorts an exception raised while training into

- ``"out_of_memory"``: ``torch.OutOfMemoryError``, and the allocation failures that reach Python
  as a plain RuntimeError: cuBLAS (``CUBLAS_STATUS_ALLOC_FAILED``, e.g. creating its handle or
  workspace), cuDNN (``CUDNN_STATUS_ALLOC_FAILED``, cuDNN 9's
  ``CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED`` and ``..._DEVICE_ALLOCATION_FAILED``),
  and ``CUDA error: out of memory`` from allocations outside the caching allocator. These leave
  the process usable: the trainer frees memory and, if it was a training step, retries smaller.
- ``"device_error"``: any other CUDA error (``torch.AcceleratorError``; messages such as
  ``CUDA error: device-side assert triggered`` from a bad label index, ``CUDA error: an illegal
  memory access was encountered``, ``unspecified launch failure``, an uncorrectable ECC error)
  and the cuBLAS/cuDNN execution failures. Most of these are "sticky": the process's CUDA
  context is unusable from then on, and every later kernel fails with the same error. Nothing
  more can train in the process, whatever the trial; the worker hands the trial back (one failed
  attempt of its crash budget) and exits so that a fresh process takes over.
- None: anything else (the task's own bug, a bad value): the trial fails, the worker goes on.

A non-sticky CUDA error (``invalid configuration argument`` from a bad launch) is also counted
as a device error: telling the two apart would need another kernel launch on a context that may
be broken, and the cost of erring this way is one worker restart per attempt, after which the
crash budget (``max_attempts``) ends the trial FAIL.

Example::

    >>> classify(RuntimeError("CUDA error: an illegal memory access was encountered"))
    'device_error'
    >>> classify(RuntimeError("CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"))
    'out_of_memory'
"""

from __future__ import annotations

import re
from typing import Literal

import torch

__all__ = ["Fault", "classify", "first_line"]

Fault = Literal["out_of_memory", "device_error"]

_OUT_OF_MEMORY = re.compile(
    r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_\w*ALLOC\w*|CUDA out of memory|"
    r"CUDA error: out of memory|cudaErrorMemoryAllocation"
)
_DEVICE_ERROR = re.compile(
    r"CUDA error|CUDA driver error|device-side assert|illegal memory access|"
    r"unspecified launch failure|uncorrectable ECC error|CUBLAS_STATUS_EXECUTION_FAILED|"
    r"CUDNN_STATUS_EXECUTION_FAILED|CUDNN_STATUS_MAPPING_ERROR"
)


def classify(exc: BaseException) -> Fault | None:
    """What `exc` (or an error it was raised from) says about the device; None if nothing."""
    seen: set[int] = set()
    error: BaseException | None = exc
    found: Fault | None = None
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        fault = _classify_one(error)
        if fault == "out_of_memory":
            return fault
        found = found or fault
        error = error.__cause__ or error.__context__
    return found


def _classify_one(error: BaseException) -> Fault | None:
    if isinstance(error, torch.OutOfMemoryError):
        return "out_of_memory"
    text = str(error)
    if _OUT_OF_MEMORY.search(text):
        return "out_of_memory"
    accelerator_error = getattr(torch, "AcceleratorError", None)  # torch >= 2.8
    if accelerator_error is not None and isinstance(error, accelerator_error):
        return "device_error"
    if isinstance(error, RuntimeError) and _DEVICE_ERROR.search(text):
        return "device_error"
    return None


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an error's text (its type's name if it has none), at most `limit`
    characters: what a trial's reason and the trainer's log lines quote."""
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."
