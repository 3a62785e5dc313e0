"""A study: its config (typed, validated once from TOML), its search space, and the study in a
database (created by `create`/`run` only, opened by name everywhere else).

- `settings`: `StudyConfig` and its sections, `ConfigError` (exit 2);
- `parse_config`: `load_config`, `parse_config`: TOML validated once into the settings
  (`config` re-exports both for existing importers);
- `names`: the names the storage would refuse (lengths, control characters);
- `space`: the `[space]` parameters as data;
- `studies`: creating, finding and opening studies (`StudyRef`);
- `note`: the note optuna-dashboard shows (config and command line);
- `view`: what the local views of a study (samplers' mirror, pruners' rungs) answer alike.
"""

from search.study.parse_config import load_config, parse_config
from search.study.settings import ConfigError, StudyConfig
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
