"""trainer: the training loop a worker runs for one trial. Knows nothing of Optuna."""

from trainer.config import TrainConfig
from trainer.task import Task, TaskFactory

__all__ = ["Task", "TaskFactory", "TrainConfig"]
