"""The engine: config, objective, backends, constraints, Pareto fronts, MLflow, the CLI.

``run(config) -> SearchResult`` runs a search from Python; ``frontier search`` runs one
from the shell. The study (Optuna) lives in a resumable storage, the runs in MLflow.
Extension points: an Optuna sampler object (``run(config, sampler=...)``) or a named one
(``register_sampler``), a ``Callback``, a ``Promotion`` strategy, a backend
(``register_backend``).
"""

from ._anchors import anchor_params, uniform_grid
from ._backends import (
    Backend,
    Job,
    backend_names,
    ray_runtime_env,
    register_backend,
    shipped_modules,
)
from ._callbacks import Callback, Emissions, ProgressBar, ProgressLines
from ._config import (
    Config,
    ConfigError,
    TaskSection,
    import_plugins,
    load_config,
    parse_config,
    parse_overrides,
)
from ._constraints import Constraint
from ._engine import Search, SearchResult, run
from ._front import Front, TrialRecord
from ._learning import plan_entries
from ._mlflow import MlflowCallback
from ._pareto import REFERENCE, Objective, hypervolume, loss_hypervolume, normalise, pareto_mask
from ._promotion import Promotion, SpreadPromotion
from ._results import (
    QueryError,
    front_on,
    measure_picked,
    parse_where,
    query_front,
    register_model,
    sort_front,
    with_params,
)
from ._samplers import build_sampler, register_sampler, sampler_names
from ._sensitivity import choices as sensitivity_choices
from ._sensitivity import sensitivity
from ._setup import default_callbacks, plan_latency, task_and_space
from ._storage import (
    SearchError,
    StudyStore,
    default_storage,
    driver_lock,
    journal_completions,
    open_storage,
)
from ._timing import Timing, promotion_savings
from ._tracking import Tag, find_search, front_frame, metrics_of
from ._trials import TrialResult, TrialRunner, search_threads
from ._view import SearchAware, SearchView

__all__ = [
    "REFERENCE",
    "Backend",
    "Callback",
    "Config",
    "ConfigError",
    "Constraint",
    "Emissions",
    "Front",
    "Job",
    "MlflowCallback",
    "Objective",
    "ProgressBar",
    "ProgressLines",
    "Promotion",
    "QueryError",
    "Search",
    "SearchAware",
    "SearchError",
    "SearchResult",
    "SearchView",
    "SpreadPromotion",
    "StudyStore",
    "Tag",
    "TaskSection",
    "Timing",
    "TrialRecord",
    "TrialResult",
    "TrialRunner",
    "anchor_params",
    "backend_names",
    "build_sampler",
    "default_callbacks",
    "default_storage",
    "driver_lock",
    "find_search",
    "front_frame",
    "front_on",
    "hypervolume",
    "import_plugins",
    "journal_completions",
    "load_config",
    "loss_hypervolume",
    "measure_picked",
    "metrics_of",
    "normalise",
    "open_storage",
    "pareto_mask",
    "parse_config",
    "parse_overrides",
    "parse_where",
    "plan_entries",
    "plan_latency",
    "promotion_savings",
    "query_front",
    "ray_runtime_env",
    "register_backend",
    "register_model",
    "register_sampler",
    "run",
    "sampler_names",
    "search_threads",
    "sensitivity",
    "sensitivity_choices",
    "shipped_modules",
    "sort_front",
    "task_and_space",
    "uniform_grid",
    "with_params",
]
