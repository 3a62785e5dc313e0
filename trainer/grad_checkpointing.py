"""Gradient checkpointing: whether a model has the switch, and turning it on or off (one switch
for the training loop and the memory estimate). A model has one if it has a boolean attribute
``grad_checkpointing`` (the built-in models) or Hugging Face's
``gradient_checkpointing_enable()`` / ``gradient_checkpointing_disable()``."""

from __future__ import annotations

from typing import Any

__all__ = ["can_checkpoint", "set_grad_checkpointing"]


def can_checkpoint(model: Any) -> bool:
    """Whether the model has a gradient checkpointing switch (see `trainer.Task.model`)."""
    return hasattr(model, "grad_checkpointing") or hasattr(model, "gradient_checkpointing_enable")


def set_grad_checkpointing(model: Any, on: bool) -> bool:
    """Switch gradient checkpointing as the trainer does; False if the model has no switch.

    A boolean attribute ``grad_checkpointing`` (the built-in models) or Hugging Face's
    ``gradient_checkpointing_enable()`` / ``gradient_checkpointing_disable()``.
    """
    if hasattr(model, "grad_checkpointing"):
        model.grad_checkpointing = on
        return True
    if hasattr(model, "gradient_checkpointing_enable"):
        if on:
            model.gradient_checkpointing_enable()
        elif hasattr(model, "gradient_checkpointing_disable"):
            model.gradient_checkpointing_disable()
        return True
    return False
