"""The experiment configuration: ONE native schema (pydantic v2) and its loader.

Field names are snake_case; the JSON/REST form (:meth:`ExperimentConfig.to_json`) uses NNI's camelCase
keys. NNI's YAML dialects (v2 camelCase or snake_case keys, legacy v1) are translated to this schema at
the edge by :mod:`nnix.config.nni`, which only the loader imports; nothing else in nnix knows about
them.

- :mod:`nnix.config.fields`: value parsers and validated field types (durations, GPU indices, paths...).
- :mod:`nnix.config.services`: the training services' models, one per ``platform``, found through the
  entry points ``nnix.training_services`` (a third-party service declares its own).
- :mod:`nnix.config.experiment`: :class:`ExperimentConfig`, its algorithms, and its secrets.
- :mod:`nnix.config.loader`: :func:`load_config` / :func:`parse_config`, which report every problem of a
  file at once as a :class:`~nnix.errors.ConfigError`, each with the path the user wrote and a hint.

Built directly in Python, the models validate the same rules; relative paths then resolve against the
current directory (as in NNI's Python API) instead of the config file's directory.
"""

from nnix.config import services
from nnix.config.experiment import AlgorithmConfig, ExperimentConfig, config_secrets, restore_secrets
from nnix.config.fields import parse_duration, parse_gpu_indices
from nnix.config.loader import LoadedConfig, load_config, parse_config
from nnix.config.services import *  # noqa: F403 (the training services' models and their platform table)

__all__ = [
    "AlgorithmConfig",
    "ExperimentConfig",
    "LoadedConfig",
    "config_secrets",
    "load_config",
    "parse_config",
    "parse_duration",
    "parse_gpu_indices",
    "restore_secrets",
    *services.__all__,
]
