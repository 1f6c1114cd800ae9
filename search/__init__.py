"""The engine: config, objective, backends, constraints, Pareto fronts, MLflow, the CLI.

This part now holds the config format (``load_config``, ``parse_config``) and the
``frontier`` command line; the search itself arrives with the search issue.
"""

from ._config import Config, ConfigError, SpaceSection, TaskSection, load_config, parse_config

__all__ = ["Config", "ConfigError", "SpaceSection", "TaskSection", "load_config", "parse_config"]
