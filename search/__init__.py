"""The engine: config, objective, backends, constraints, Pareto fronts, MLflow, the CLI.

``run(config) -> SearchResult`` runs a search from Python; ``frontier search`` runs one
from the shell. The study (Optuna) lives in a resumable storage, the runs in MLflow.
Extension points: an Optuna sampler object (``run(config, sampler=...)``) or a named one
(``register_sampler``), a ``Callback``, a ``Promotion`` strategy, a backend
(``register_backend``).
"""

from ._anchors import anchor_params, uniform_grid
from ._backends import Backend, Job, backend_names, register_backend
from ._callbacks import Callback, Emissions, ProgressBar, ProgressLines
from ._config import (
    Config,
    ConfigError,
    Constraint,
    TaskSection,
    load_config,
    parse_config,
)
from ._engine import Search, SearchResult, run
from ._evaluation import Evaluation, TrialResult
from ._front import Front, TrialRecord
from ._mlflow import MlflowCallback
from ._pareto import Objective, hypervolume, normalise, pareto_mask
from ._promotion import Promotion, SpreadPromotion
from ._samplers import build_sampler, register_sampler, sampler_names
from ._sensitivity import choices as sensitivity_choices
from ._sensitivity import sensitivity
from ._storage import SearchError, StudyStore, default_storage, driver_lock, open_storage
from ._tracking import Tag, find_search, front_frame, metrics_of

__all__ = [
    "Backend",
    "Callback",
    "Config",
    "ConfigError",
    "Constraint",
    "Emissions",
    "Evaluation",
    "Front",
    "Job",
    "MlflowCallback",
    "Objective",
    "ProgressBar",
    "ProgressLines",
    "Promotion",
    "Search",
    "SearchError",
    "SearchResult",
    "SpreadPromotion",
    "StudyStore",
    "Tag",
    "TaskSection",
    "TrialRecord",
    "TrialResult",
    "anchor_params",
    "backend_names",
    "build_sampler",
    "default_storage",
    "driver_lock",
    "find_search",
    "front_frame",
    "hypervolume",
    "load_config",
    "metrics_of",
    "normalise",
    "open_storage",
    "pareto_mask",
    "parse_config",
    "register_backend",
    "register_sampler",
    "run",
    "sampler_names",
    "sensitivity",
    "sensitivity_choices",
    "uniform_grid",
]
