"""Training memory before a run: what one step of one configuration needs, measured.

Adam keeps 16 bytes per parameter before the first activation: fp32 weights (4), fp32
gradients (4) and two fp32 moments (8). Mixed precision as accelerate does it (torch's
autocast around the forward) does not change that: the weights stay fp32 and are the master
copy; autocast casts them to bf16/fp16 during each forward, and those transient half copies
(2 bytes per cast parameter, saved for the backward) count with the activations. What autocast
halves is the activations of the ops it casts (matmuls, convolutions); the rest (norms,
softmax, losses) stays fp32, and accelerate casts the model's outputs back to fp32. So the
activations are not guessed here from a formula: they are measured.

The dry run (`fit_memory`, in `dry_run`) runs the trainer's own step on fake tensors and
counts every tensor storage torch creates (`tracker`); see `trainer.memory.dry_run`.

What the bytes leave out: the CUDA context (~0.3-0.5 GB per process), cuBLAS/cuDNN workspaces,
the caching allocator's fragmentation, and tensors a task keeps outside torch's operators. That
is what `HEADROOM` is for: a step fits if it needs at most 90% of the device.

Example::

    from trainer import TrainConfig, resolve_task
    from trainer.memory import MemoryTarget, fit_memory
    from trainer.sizes import parse_size

    target = MemoryTarget.for_gpu(parse_size("24GiB"), "auto")
    fit = fit_memory(resolve_task("digits"), {"width": 64, "batch_size": 128},
                     TrainConfig(epochs=1), target)
    fit.verdict, fit.configured.peak_bytes    # ('fits as configured', 10714624)

The package: `types` (the plan, a step's bytes, the target device, the verdict), `dry_run`
(`fit_memory`, `check_memory`, the plans the trainer would try), `tracker` (the dispatch mode
that counts tensor storages). Timing real steps is the estimate's (`search.estimate.step_timing`).
"""

from trainer.memory.dry_run import adaptation_plans, check_memory, fit_memory
from trainer.memory.types import MemoryCheckError, MemoryFit, MemoryPlan, MemoryTarget, StepMemory

__all__ = [
    "MemoryCheckError",
    "MemoryFit",
    "MemoryPlan",
    "MemoryTarget",
    "StepMemory",
    "adaptation_plans",
    "check_memory",
    "fit_memory",
]
