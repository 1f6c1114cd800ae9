"""The engine: config, objective, backends, constraints, Pareto fronts, MLflow, the CLI.

``run(config) -> SearchResult`` runs a search from Python; ``frontier search`` runs one
from the shell. The study (Optuna) lives in a resumable storage, the runs in MLflow.
Extension points: an Optuna sampler object (``run(config, sampler=...)``) or a named one
(``register_sampler``), a ``Callback``, a ``Promotion`` strategy, a backend
(``register_backend``). A config with a ``pipeline`` section is searched by
``PipelineSearch``: every stage's plan and placement in one joint space.
"""

from .config._anchors import anchor_params, uniform_grid
from .config._config import (
    Config,
    ConfigError,
    TaskSection,
    import_plugins,
    load_config,
    parse_config,
    parse_overrides,
)
from .config._constraints import Constraint
from .front._front import Front, TrialRecord
from .front._pareto import (
    REFERENCE,
    Objective,
    hypervolume,
    loss_hypervolume,
    normalise,
    pareto_mask,
)
from .pipeline._price import PipelineReport, price_pipeline
from .pipeline._search import PipelineResult, PipelineSearch, PipelineTrial
from .run._callbacks import Callback, Emissions, ProgressBar, ProgressLines
from .run._engine import Search, SearchResult, run
from .run._mlflow import MlflowCallback
from .run._report import SearchReport
from .run._sensitivity import choices as sensitivity_choices
from .run._sensitivity import sensitivity
from .run._setup import default_callbacks, plan_latency, task_and_space
from .run._timing import Timing, promotion_savings
from .study._storage import (
    SearchError,
    StudyStore,
    default_storage,
    driver_lock,
    journal_completions,
    open_storage,
)
from .tracking._learning import plan_entries
from .tracking._results import (
    QueryError,
    front_on,
    measure_picked,
    parse_where,
    query_front,
    register_model,
    sort_front,
    with_params,
)
from .tracking._tracking import Tag, find_search, front_frame, metrics_of
from .trials._backends import (
    Backend,
    Job,
    backend_names,
    ray_runtime_env,
    register_backend,
    shipped_modules,
)
from .trials._promotion import Promotion, SpreadPromotion
from .trials._samplers import build_sampler, register_sampler, sampler_names
from .trials._trials import TrialResult, TrialRunner, search_threads
from .trials._view import SearchAware, SearchView

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
    "PipelineReport",
    "PipelineResult",
    "PipelineSearch",
    "PipelineTrial",
    "ProgressBar",
    "ProgressLines",
    "Promotion",
    "QueryError",
    "Search",
    "SearchAware",
    "SearchError",
    "SearchReport",
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
    "price_pipeline",
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
