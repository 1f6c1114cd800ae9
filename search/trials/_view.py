"""What a search shows the objects plugged into it: ``SearchView``, the state a
``Callback`` or a search-aware sampler reads, and ``SearchAware``, the base class of a
sampler that wants the search (the engine binds it before the first trial)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pandas as pd

    from ..config._config import Config
    from ..config._constraints import Constraint
    from ..front._front import Front, TrialRecord
    from ..front._pareto import Objective
    from ..study._storage import StudyStore
    from ._trials import TrialRunner


class SearchView(Protocol):
    """A running search, as its callbacks and samplers see it (``Search`` is one)."""

    config: Config
    evaluation: TrialRunner
    objectives: list[Objective]
    constraints: list[Constraint]
    #: the uncompressed model's values
    baseline: dict[str, float]
    records: Mapping[int, TrialRecord]
    front: Front
    generation: int
    #: numbers that describe the whole search, logged at its end
    summary: dict[str, float]
    #: per-layer sensitivity rows, and the fidelity they were measured at
    sensitivity: list[dict[str, Any]]
    sensitivity_fidelity: str
    sampler_name: str
    study: Any
    study_name: str
    study_store: StudyStore

    @property
    def done(self) -> int: ...

    @property
    def hypervolume(self) -> float: ...

    def pareto_frame(self) -> pd.DataFrame: ...


class SearchAware:
    """A sampler that proposes plans from what the search knows. The engine measures
    per-layer sensitivity first when ``wants_sensitivity``, calls ``bind`` before the
    first trial, and logs ``propose_s`` (and the median of ``proposals_s``) with the
    search's summary."""

    #: the engine measures per-layer sensitivity before binding
    wants_sensitivity: bool = False
    #: seconds spent proposing plans
    propose_s: float = 0.0
    #: seconds each proposal took, in order (a sampler that keeps them)
    proposals_s: tuple[float, ...] = ()

    def bind(self, search: SearchView) -> None:
        """Called once, before the first trial."""
