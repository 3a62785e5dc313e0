"""A study: its config (typed, validated once from TOML), its search space, and the study in a
database (created by `create`/`run` only, opened by name everywhere else).

- `config`: `StudyConfig` and its sections, `load_config`, `ConfigError` (exit 2);
- `space`: the `[space]` parameters as data;
- `studies`: creating, finding and opening studies (`StudyRef`);
- `note`: the note optuna-dashboard shows (config and command line);
- `view`: what the local views of a study (samplers' mirror, pruners' rungs) answer alike.
"""

from search.study.config import ConfigError, StudyConfig, load_config, parse_config
from search.study.space import Param
from search.study.studies import StudyRef, create_study, find_study, open_study

__all__ = [
    "ConfigError",
    "Param",
    "StudyConfig",
    "StudyRef",
    "create_study",
    "find_study",
    "load_config",
    "open_study",
    "parse_config",
]
