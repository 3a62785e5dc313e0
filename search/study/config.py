"""The study config's names, from where they live: the settings types (`search.study.settings`)
and their parsing (`search.study.parse_config`). Kept so that ``from search.study.config import
...`` goes on working; new code imports from those two modules.
"""

from search.study.parse_config import (
    check_tracker_installed,
    load_config,
    params_from_overrides,
    parse_config,
    parse_tracking,
)
from search.study.settings import (
    DIRECTIONS,
    PRUNERS,
    SAMPLERS,
    UNLIMITED_TRIALS,
    WANDB_MODES,
    ConfigError,
    GridSettings,
    MlflowSettings,
    PrunerSettings,
    StudyConfig,
    StudySettings,
    TaskSettings,
    TrackingSettings,
    WandbSettings,
)

__all__ = [
    "DIRECTIONS",
    "PRUNERS",
    "SAMPLERS",
    "UNLIMITED_TRIALS",
    "WANDB_MODES",
    "ConfigError",
    "GridSettings",
    "MlflowSettings",
    "PrunerSettings",
    "StudyConfig",
    "StudySettings",
    "TaskSettings",
    "TrackingSettings",
    "WandbSettings",
    "check_tracker_installed",
    "load_config",
    "params_from_overrides",
    "parse_config",
    "parse_tracking",
]
