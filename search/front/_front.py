"""A search's trial records and its front: which completed trials are feasible and
non-dominated, at which rung, and their hypervolume."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from frontier.spaces import plan_kind

from ..config._constraints import Constraint
from ._pareto import Objective, hypervolume, pareto_mask

#: the metric a cheap rung underestimates (``Front.allow``)
ACCURACY = "accuracy"


@dataclass(frozen=True)
class Recovery:
    """What a plan measured at a cheap rung is expected to score a rung up, as learnt
    from plans measured at both: ``curve`` (cheap-rung accuracy, accuracy a rung up)
    knots of a non-decreasing fit, read between knots on the line joining them; below
    the lowest knot a plan gains what that knot gains, above the highest it reaches
    what that knot reaches. Without a curve, the accuracy plus ``gain``. At most
    ``ceiling`` (the best accuracy known a rung up), never less than the accuracy
    itself. ``then``: the next rung's, so that ``top`` reaches the top rung.

    A curve says that a plan the cheap rung scores near chance recovers less than one
    it scores near the bound (a pruned EfficientNet-Lite0 after 60 steps,
    2026-12-06): the same gain for every plan judged a plan at 0.92 at 1.63."""

    gain: float = 0.0
    curve: tuple[tuple[float, float], ...] = ()
    ceiling: float = math.inf
    then: Recovery | None = None

    def top(self, accuracy: float) -> float:
        """The accuracy a plan measured at ``accuracy`` is expected to reach at the top."""
        if self.curve:
            cheap, up = zip(*self.curve, strict=True)
            expected = float(np.interp(accuracy, cheap, up))
            if accuracy < cheap[0]:
                expected = accuracy + up[0] - cheap[0]
        else:
            expected = accuracy + self.gain
        up_here = max(accuracy, min(expected, self.ceiling))
        return self.then.top(up_here) if self.then is not None else up_here

    def __str__(self) -> str:
        if self.curve:
            (a, b), (c, d) = self.curve[0], self.curve[-1]
            own = f"a non-decreasing curve from {a:.3f} -> {b:.3f} to {c:.3f} -> {d:.3f}"
        else:
            own = f"accuracy + {self.gain:.3f}"
        if math.isfinite(self.ceiling):
            own += f" (at most {self.ceiling:.3f})"
        return f"{own}, then {self.then}" if self.then is not None else own


class JobExport(NamedTuple):
    """The model a job scored, as it came back: ONNX bytes and their precision, or why
    the export failed."""

    onnx: bytes | None
    precision: str = ""
    error: str = ""


@dataclass
class TrialRecord:
    """One trial as the driver knows it: its parameters, plan, state and the metrics it
    reached at each rung (a promotion re-measures accuracy only)."""

    number: int
    params: dict[str, Any]
    plan: dict[str, Any]
    state: str  # "complete" | "failed"
    rungs: dict[int, dict[str, float]] = field(default_factory=dict)
    error: str = ""
    #: the cluster node that scored rung 0 ("" outside Ray)
    node: str = ""
    #: the accelerator that trained and scored rung 0 (``cpu``, ``cuda:0 (NVIDIA H200)``)
    train_device: str = ""
    #: the trial's run in the tracking store (set by the MLflow callback)
    run_id: str = ""
    #: rung -> the scored model its job exported, for the callback that exports the
    #: front (driver memory only, not durable)
    exports: dict[int, JobExport] = field(default_factory=dict, repr=False)

    def keep_export(self, rung: int, onnx: bytes | None, precision: str, error: str) -> bool:
        """Keep what the job at ``rung`` exported (its ONNX bytes, or why it failed), for
        the callback that exports the front; False where the job exported nothing."""
        if onnx is None and not error:
            return False
        self.exports[rung] = JobExport(onnx, precision, error)
        return True

    @functools.cached_property
    def key(self) -> str:
        """The plan, canonically: equal plans have equal keys."""
        return plan_key(self.plan)

    @functools.cached_property
    def kind(self) -> str:
        """What the plan mainly does (``plan_kind``)."""
        return plan_kind(self.plan)

    @property
    def rung(self) -> int:
        return max(self.rungs) if self.rungs else -1

    def values(self, rung: int | None = None) -> dict[str, float]:
        """Metrics at ``rung`` (default: the highest reached); the rest carries over from
        the rungs below."""
        rung = self.rung if rung is None else rung
        merged: dict[str, float] = {}
        for r in sorted(self.rungs):
            if r <= rung:
                merged.update(self.rungs[r])
        return merged


def plan_key(plan: Mapping[str, Any]) -> str:
    """A plan's canonical text: equal plans, equal keys."""
    return json.dumps(plan, sort_keys=True)


class Front:
    """The feasible, non-dominated trials among ``records``.

    Args:
        records: trial number -> record; a live mapping the search keeps adding to
            (call ``changed()`` after each change: the front is cached until then).
        objectives: the objectives, with directions.
        constraints: resolved (absolute) constraints; a trial that breaks one is not on
            the front.

    A rung below the top is known to underrate accuracy once promotion has measured
    how far it falls short of the top rung for a kind of plan (``allow``): a plan of
    that kind measured only there is judged at the accuracy it is expected to reach at
    the top rung (``Recovery``), not ruled out on a value the top rung would raise. Its
    values on the front stay as measured.
    """

    def __init__(
        self,
        records: Mapping[int, TrialRecord],
        objectives: Sequence[Objective],
        constraints: Sequence[Constraint],
    ) -> None:
        self.records = records
        self.objectives = list(objectives)
        self.constraints = list(constraints)
        #: (rung, kind) -> what a plan of that kind (``plan_kind``; "" for every kind)
        #: measured there is expected to score at the top rung, which the constraints
        #: judge (what that rung is learnt to fall short of the top rung by)
        self.allowance: dict[tuple[int, str], Recovery] = {}
        self._version = 0
        self._cache: dict[tuple[int, int | None], list[int]] = {}

    def changed(self) -> None:
        """A record was added or reached a new rung."""
        self._version += 1
        self._cache.clear()

    def allow(self, allowance: Mapping[tuple[int, str], Recovery]) -> None:
        """Judge plans of each kind measured at each rung at ``allowance[rung,
        kind].top`` of their accuracy (``Promotion.allowance``; kind "": every kind not
        named); a rung and kind not named is judged as measured."""
        new = {(int(r), str(k)): a for (r, k), a in allowance.items()}
        if new != self.allowance:
            self.allowance = new
            self.changed()

    def feasible(
        self, values: Mapping[str, float], rung: int | None = None, kind: str = ""
    ) -> bool:
        """Whether ``values`` meet every constraint; ``rung``: the rung they were measured
        at, whose allowance for plans of ``kind`` raises accuracy first (None: judged as
        they are)."""
        allowed = None
        if rung is not None:
            allowed = self.allowance.get((rung, kind), self.allowance.get((rung, "")))
        if allowed is not None and ACCURACY in values:
            values = {**values, ACCURACY: allowed.top(values[ACCURACY])}
        return all(c.holds(values[c.objective]) for c in self.constraints)

    def judge(self, record: TrialRecord, rung: int | None = None) -> bool:
        """Whether ``record`` at ``rung`` (default: its highest) meets every constraint,
        with that rung's allowance for its kind."""
        at = record.rung if rung is None else rung
        return self.feasible(record.values(at), at, record.kind)

    def complete(self) -> list[TrialRecord]:
        return [r for r in self.records.values() if r.state == "complete"]

    def matrix(self, records: Sequence[TrialRecord], rung: int | None = None) -> np.ndarray:
        """Objective values, one row per record."""
        return np.array(
            [[r.values(rung)[o.name] for o in self.objectives] for r in records], dtype=float
        ).reshape(len(records), len(self.objectives))

    def numbers(self, rung: int | None = None) -> list[int]:
        """Trial numbers on the front, each at its highest rung (or at ``rung``, among
        those that reached it). A plan proposed twice is listed once (its first trial)."""
        cache_key = (self._version, rung)
        if cache_key not in self._cache:
            unique: dict[str, TrialRecord] = {}
            for r in sorted(self.complete(), key=lambda r: r.number):
                at = r.rung if rung is None else rung
                if r.rung >= at and self.judge(r, at):
                    unique.setdefault(r.key, r)
            recs = list(unique.values())
            mask = pareto_mask(self.matrix(recs, rung), self.objectives)
            self._cache[cache_key] = [r.number for r, m in zip(recs, mask, strict=True) if m]
        return list(self._cache[cache_key])

    def hypervolume(self, baseline: Mapping[str, float]) -> float:
        """Of the front, normalised by the baseline's values (see ``normalise``)."""
        members = [self.records[n] for n in self.numbers()]
        if not members:
            return 0.0
        base = [baseline[o.name] for o in self.objectives]
        return hypervolume(self.matrix(members), self.objectives, base)

    def frame(self, rung_names: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
        """One row per member: ``trial``, ``run_id``, ``rung`` and every metric (the
        columns are there also when the front is empty)."""
        rows = [
            {
                "trial": n,
                "run_id": self.records[n].run_id,
                "rung": rung_names[self.records[n].rung],
                **self.records[n].values(),
            }
            for n in self.numbers()
        ]
        return pd.DataFrame(rows, columns=["trial", "run_id", "rung", *metrics])

    def ruled_out(self) -> dict[int, int]:
        """How many completed plans break a constraint, by the rung that judged them (their
        highest, with its allowance): a plan ruled out at a cheap rung was never
        measured higher."""
        out: dict[int, int] = {}
        for rec in self.complete():
            if rec.rung >= 0 and not self.judge(rec):
                out[rec.rung] = out.get(rec.rung, 0) + 1
        return dict(sorted(out.items()))

    def closest_miss(self) -> str:
        """When no completed plan meets every constraint: the constraint that came
        closest to holding (smallest violation relative to its bound) and the best value
        reached; '' when some plan is feasible or nothing completed."""
        records = self.complete()
        done = [r.values() for r in records]
        judged = any(self.judge(r) for r in records)
        if not done or not self.constraints or judged:
            return ""
        misses = []
        for c in self.constraints:
            best = min(v[c.objective] for v in done if c.objective in v) if c.op == "<=" else None
            if best is None:
                best = max(v[c.objective] for v in done if c.objective in v)
            if not c.holds(best):
                misses.append((c.violation(best) / (abs(c.bound) or 1.0), c, best))
        if not misses:
            return "each constraint holds for some plan, but no plan meets them all"
        _, c, value = min(misses, key=lambda m: m[0])
        return f"closest: {c} (best {c.objective} reached: {value:.6g})"

    def trials_frame(self, rung_names: Sequence[str]) -> pd.DataFrame:
        """Every finished trial: ``trial``, ``state``, ``rung``, ``feasible``, ``error``
        and its metrics."""
        rows = []
        for n, rec in sorted(self.records.items()):
            vals = rec.values() if rec.state == "complete" else {}
            rows.append(
                {
                    "trial": n,
                    "state": rec.state,
                    "rung": rung_names[rec.rung] if rec.rung >= 0 else "",
                    "feasible": bool(vals) and self.judge(rec),
                    "error": rec.error,
                    **vals,
                }
            )
        return pd.DataFrame(rows)


@dataclass
class SearchResult:
    """What a search leaves: the front, the study and the MLflow parent run.

    Attributes:
        pareto: the feasible front, one row per member: ``trial``, ``rung`` and one
            column per metric (values at the highest rung the member reached).
        study: the Optuna study (its storage holds every trial).
        mlflow_run_id: the parent run in MLflow.
        study_name: the study's name in the storage.
        hypervolume: of the front, normalised by the baseline (docs/search.md).
        trials: every finished trial with its values, rung, state and error.
    """

    pareto: pd.DataFrame
    study: Any
    mlflow_run_id: str
    study_name: str
    hypervolume: float
    trials: pd.DataFrame = field(default_factory=pd.DataFrame)
