"""The engine: config, objective, backends, constraints, Pareto fronts, MLflow, the CLI.

``run(config) -> SearchResult`` runs a search from Python; ``frontier search`` runs one
from the shell. The study (Optuna) lives in a resumable storage, the runs in MLflow.
"""

from ._config import (
    Config,
    ConfigError,
    Constraint,
    SpaceSection,
    TaskSection,
    load_config,
    parse_config,
)
from ._engine import Search, SearchError, SearchResult, default_storage, open_storage, run
from ._evaluation import Evaluation, TrialResult
from ._pareto import Objective, hypervolume, normalise, pareto_mask

__all__ = [
    "Config",
    "ConfigError",
    "Constraint",
    "Evaluation",
    "Objective",
    "Search",
    "SearchError",
    "SearchResult",
    "SpaceSection",
    "TaskSection",
    "TrialResult",
    "default_storage",
    "hypervolume",
    "load_config",
    "normalise",
    "open_storage",
    "pareto_mask",
    "parse_config",
    "run",
]
