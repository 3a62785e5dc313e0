"""What `trainer.train` tells its caller about one run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["Status", "TrainResult"]

Status = Literal["completed", "pruned", "diverged", "failed", "preempted", "device_error"]


@dataclass(kw_only=True)
class TrainResult:
    """The outcome of one `trainer.train` call.

    `metrics` is the whole history, including epochs trained before a resume, so a resumed run
    reports the same list as an uninterrupted one.
    """

    status: Status
    """completed | pruned (report returned True) | diverged (non-finite loss) | failed (an error,
    see `reason` and `traceback`) | preempted (SIGTERM or `stop`: checkpointed, resume later) |
    device_error (a CUDA error: this process's CUDA context is unusable, so nothing more can
    train in it; see ``trainer.faults``)."""

    metrics: list[float] = field(default_factory=list)
    """The validation metric after each epoch: index 0 is epoch 1."""

    train_losses: list[float] = field(default_factory=list)
    """Mean training loss of each epoch (over its micro-batches)."""

    precision: str = ""
    """bf16 | fp16 | fp32: what the run used (``auto`` resolved, fallbacks applied)."""

    precision_reason: str = ""
    """Why that precision, in words (e.g. "auto on the CPU: fp32 ...")."""

    device_settings: str = ""
    """The numerics switches set on the device, in words (TF32, cuDNN benchmark or deterministic;
    see ``trainer.gpu_settings``)."""

    device_name: str = ""
    """"cpu" or the GPU's name."""

    wall_seconds: float = 0.0
    """Seconds this call took, start to return."""

    peak_memory_bytes: int = 0
    """Peak memory; what it measures is in `peak_memory_kind`."""

    peak_memory_kind: str = ""
    """"cuda_max_allocated" (torch.cuda.max_memory_allocated during this call) or
    "process_peak_rss" (the CPU process's peak resident set size over its whole life)."""

    adapted: list[str] = field(default_factory=list)
    """Decisions taken to make the run fit, in words (e.g. after an out-of-memory error),
    including those of earlier attempts recorded in the checkpoint it resumed from."""

    resumed_from: dict[str, int] | None = None
    """{"epoch": completed epochs, "step": step within the next epoch} of the checkpoint this
    call resumed from (of its last attempt, if it had to adapt), or None."""

    notes: list[str] = field(default_factory=list)
    """Things about the run a user should know that did not stop it, one line each (e.g. a
    resume that could not restore the GPU's random generator)."""

    reason: str | None = None
    """Why the run diverged, failed or could not checkpoint when preempted: one line."""

    traceback: str | None = None
    """The traceback text of the error when `status` is failed."""

    data_fingerprint: str = ""
    """A stable hash of the training data (see ``trainer.data.fingerprint``)."""

    optimizer_steps: int = 0
    """Optimizer steps over the whole run (counted with accelerate's sync_gradients), including
    those fp16's loss scaler skipped (`skipped_steps`)."""

    scheduler_steps: int = 0
    """Learning-rate scheduler steps over the whole run (the scheduler's own count): one per
    optimizer step, skipped or not, so the schedule follows the data and ends at 0."""

    skipped_steps: int = 0
    """fp16 only: optimizer steps skipped after a gradient overflow (inf/NaN in the scaled
    gradients; mostly the first steps, while the loss scale settles). 0 with bf16 and fp32."""

    steps_per_epoch: int = 0
    """Optimizer steps in one epoch."""

    grad_accum_steps: int = 0
    """Micro-batches per optimizer step at the end of the run (after any adaptation)."""

    grad_checkpointing: bool = False
    """Whether gradient checkpointing was on at the end of the run (after any adaptation)."""

    checkpoint_seconds: float | None = None
    """Seconds the last checkpoint save took (serialize + write), None if none was saved."""

    checkpoint_bytes: int | None = None
    """Size of the last checkpoint saved."""

    torch_version: str = ""
    cuda_version: str | None = None
    """CUDA version torch was built with (None for a CPU build)."""

    @property
    def epochs_run(self) -> int:
        """Epochs trained in all (= len(metrics)), including those before a resume."""
        return len(self.metrics)

    @property
    def metric(self) -> float | None:
        """The last reported metric (the trial's value), or None before the first epoch."""
        return self.metrics[-1] if self.metrics else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (for trial attributes), with `epochs_run` included."""
        return {**asdict(self), "epochs_run": self.epochs_run}
