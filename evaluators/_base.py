"""The evaluator interface: one Evaluator per objective, a registry, and the setup."""

from __future__ import annotations

import copy
import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from frontier.spaces import (
    CPU,
    Accelerator,
    CompressionPlan,
    Cost,
    Registry,
    ShapeCounter,
    apply_plan,
    model_cost,
    to_device,
)

MAXIMIZE = "maximize"
MINIMIZE = "minimize"


class EvaluationError(RuntimeError):
    """An evaluator failed on a candidate; the message names both."""


@dataclass(frozen=True)
class Measurement:
    """One objective value of one candidate.

    Attributes:
        value: the number.
        unit: its unit ("fraction", "bytes", "ms", "mJ", "gCO2e", "MACs").
        fidelity: how it was obtained ("exact", "proxy", "short", "full", "table", ...).
        wall_s: seconds the evaluation took.
        details: anything else worth logging (plain data).
    """

    value: float
    unit: str
    fidelity: str
    wall_s: float
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Candidate:
    """A plan to evaluate; the compressed model is built once, on first use, and its
    cost (``model_cost``) counted once.

    ``scored`` is the model the accuracy evaluator last measured (the fine-tuned copy at
    a training rung), kept so it can be exported without fine-tuning it again."""

    plan: CompressionPlan
    id: str = ""
    _model: nn.Module | None = field(default=None, repr=False)
    scored: nn.Module | None = field(default=None, repr=False)
    _cost: Cost | None = field(default=None, repr=False)
    _cost_has_macs: bool = field(default=False, repr=False)
    #: the structure-only build the cost was counted on, kept while MACs may be asked
    _structure: nn.Module | None = field(default=None, repr=False)


@dataclass
class EvalSetup:
    """What evaluators need besides the candidate: the task, the teacher and devices.

    Args:
        task: the task (loaders, metric, example inputs).
        teacher: the uncompressed, trained model; evaluators never change it.
        latency: device name -> a LatencyModel bound to ``teacher`` and the space.
        seed: seed of every random choice an evaluator makes.
        space: the search space, if any: costs of plans that only prune and set bit
            widths are then counted from shapes (``ShapeCounter``), not from a build.
        accelerator: where models train and are scored (fine-tuning, distillation,
            proxies, validation). Plans are applied, costed and exported on the CPU;
            ``teacher`` stays there, and a copy on the accelerator serves the rest.
    """

    task: Any
    teacher: nn.Module
    latency: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    space: Any = None
    accelerator: Accelerator = CPU
    _counter: ShapeCounter | None = field(default=None, repr=False)
    _no_counter: bool = field(default=False, repr=False)
    _structure_counts: int = field(default=0, repr=False)
    _calibration: list[Any] | None = field(default=None, repr=False)
    _proxy: tuple[list[Any], Any] | None = field(default=None, repr=False)
    _soft_teacher: nn.Module | None = field(default=None, repr=False)
    _placed_teacher: nn.Module | None = field(default=None, repr=False)

    @property
    def example_inputs(self) -> Any:
        return self.task.example_inputs()

    @property
    def torch_device(self) -> str:
        """The accelerator's torch device (``cpu``, ``cuda:0``): where models train, not
        a device ``latency`` prices."""
        return self.accelerator.device

    def placed(self, model: nn.Module) -> nn.Module:
        """``model`` on the accelerator: itself on the CPU, else a copy there (the
        original stays on the CPU, where plans are applied and exported)."""
        on = self.torch_device
        return model if on == "cpu" else copy.deepcopy(model).to(on)

    @property
    def teacher_placed(self) -> nn.Module:
        """The teacher on the accelerator (a copy made once; the teacher on the CPU)."""
        if self._placed_teacher is None:
            self._placed_teacher = self.placed(self.teacher)
        return self._placed_teacher

    @property
    def soft_teacher(self) -> nn.Module:
        """What distillation takes soft targets from, on the accelerator: the task's
        ``soft_teacher()`` where it has one (the same logits, answered from a cache),
        else the teacher."""
        if self._soft_teacher is None:
            found = getattr(self.task, "soft_teacher", None)  # optional (Task's default)
            soft = found() if callable(found) else None
            self._soft_teacher = self.placed(soft) if soft is not None else self.teacher_placed
        return self._soft_teacher

    def calibration(self) -> list[Any]:
        if self._calibration is None:
            self._calibration = self.task.calibration_batches()
        return self._calibration

    def proxy_data(self) -> tuple[list[Any], Any]:
        """The proxy fidelity's held-out data (the first 256 validation samples, as the
        task's ``proxy_batches`` cuts them) and the teacher's outputs on it, in the same
        order, computed once: ``(batches, teacher_logits)``, both on the accelerator."""
        if self._proxy is None:
            found = getattr(self.task, "proxy_batches", None)  # optional (Task's default)
            if callable(found):
                batches = list(found())
            else:
                batches = [next(iter(self.task.loaders(batch_size=256).val))]
            batches = [to_device(b, self.torch_device) for b in batches]
            teacher = self.teacher_placed
            with torch.no_grad():
                self._proxy = (batches, torch.cat([teacher(x) for x, _ in batches]))
        return self._proxy

    def compressed(self, candidate: Candidate) -> nn.Module:
        """The candidate's compressed model (built from the teacher on first use)."""
        if candidate._model is None:
            candidate._model = apply_plan(
                self.teacher,
                candidate.plan,
                self.example_inputs,
                calibration_data=self.calibration(),
            )
        return candidate._model

    def cost(self, candidate: Candidate, *, macs: bool = True) -> Cost:
        """The candidate's parameters, bytes and MACs (``model_cost``), counted once: on
        its compressed model where one was built, else on the plan's structure alone
        (``structure_plan``): counts depend on shapes and the plan's bit widths, not on
        activation ranges, fake quantization or which channels were kept, so a cost-only
        evaluation (the sampler's) skips the calibration passes and the quantizers.
        ``macs=False``: MACs and BOPs may be left at 0 (no forward pass to count them),
        for what reads the size alone."""
        if candidate._cost is None or (macs and not candidate._cost_has_macs):
            model = candidate._model if candidate._model is not None else candidate._structure
            if model is None:
                counted = self._shape_count(candidate.plan, macs=macs)
                if counted is not None:
                    candidate._cost = counted
                    candidate._cost_has_macs = ShapeCounter.counts_macs(candidate.plan)
                    return counted
                model = apply_plan(
                    self.teacher, structure_plan(candidate.plan), self.example_inputs
                )
            candidate._cost = model_cost(model, candidate.plan, self.example_inputs, macs=macs)
            candidate._cost_has_macs = macs
            keep = not macs and candidate._model is None
            candidate._structure = model if keep else None
        return candidate._cost

    def _shape_count(self, plan: CompressionPlan, *, macs: bool) -> Cost | None:
        """``plan``'s cost from shapes, where the space allows it. The counter (one pruned
        build per group a plan prunes, checked on three sampled plans) is made once a few
        plans have asked: it pays off over many plans (a sampler's), not for a baseline."""
        if self.space is None or self._no_counter or not ShapeCounter.handles(plan):
            return None
        self._structure_counts += 1
        if self._counter is None and self._structure_counts < 3:
            return None
        if self._counter is None:
            checks = [self.space.sample(seed) for seed in range(3)]
            try:
                self._counter = ShapeCounter(
                    self.teacher, self.example_inputs, self.space.groups, checks=checks
                )
            except Exception:  # a check plan that does not build: build every plan
                self._no_counter = True
                return None
        return self._counter.cost(plan, macs=macs)


def structure_plan(plan: CompressionPlan) -> CompressionPlan:
    """``plan`` with the same shapes and nothing that only changes values: no bit widths
    (``model_cost`` prices them from the plan itself) and channels ranked by L1 (a
    Taylor ranking needs gradient passes; the kept counts are the same)."""
    return dataclasses.replace(plan, weight_bits={}, act_bits={}, importance="l1")


class Evaluator(ABC):
    """One objective. Subclasses set ``name``, ``unit``, ``direction`` and implement
    ``evaluate``; call the evaluator (``ev(candidate, setup)``) to get errors that
    name the candidate and the evaluator, and the wall time filled in."""

    name: str = "objective"
    unit: str = ""
    direction: str = MINIMIZE
    #: the value is a device table's prediction (``setup.latency``): cheap, and it
    #: changes when a table does, so cached values are priced again (set it on an
    #: evaluator that reads the latency models)
    priced_by_tables: bool = False

    @abstractmethod
    def evaluate(self, candidate: Candidate, setup: EvalSetup) -> Measurement:
        """Measure ``candidate``."""

    def __call__(self, candidate: Candidate, setup: EvalSetup) -> Measurement:
        start = time.perf_counter()
        try:
            m = self.evaluate(candidate, setup)
        except EvaluationError:
            raise
        except Exception as err:
            raise EvaluationError(
                f"evaluator {self.name!r} failed on candidate {candidate.id or '?'}: "
                f"{type(err).__name__}: {err}"
            ) from err
        return Measurement(m.value, m.unit, m.fidelity, time.perf_counter() - start, m.details)


EvaluatorFactory = Callable[..., Evaluator]
_EVALUATORS: Registry[EvaluatorFactory] = Registry("evaluator")


def register_evaluator(name: str) -> Callable[[EvaluatorFactory], EvaluatorFactory]:
    """Decorator registering an evaluator factory under an objective name (the part of
    ``latency_ms@pi4`` before the ``@``)."""
    return _EVALUATORS.register(name)


def evaluator_names() -> list[str]:
    return _EVALUATORS.names()


@dataclass(frozen=True)
class MetricKey:
    """An objective's or metric's name as a config writes it: the metric, and after
    ``@`` the device it is measured on where it takes one (``latency_ms@local-cpu``,
    ``serving_co2e_saved_g@pi4``; ``size_bytes`` has none). Every ``name@device``
    string is read here and nowhere else."""

    metric: str
    device: str = ""

    @classmethod
    def parse(cls, name: str) -> MetricKey:
        metric, _, device = name.partition("@")
        return cls(metric, device)

    def __str__(self) -> str:
        return f"{self.metric}@{self.device}" if self.device else self.metric

    @staticmethod
    def name(metric: str, device: str | None = "") -> str:
        """``metric`` on ``device`` as configs and results write it (``latency_ms@pi4``;
        the metric alone where there is no device)."""
        return str(MetricKey(metric, device or ""))


def build_evaluator(objective: str, **options: Any) -> Evaluator:
    """The evaluator of an objective name: ``accuracy``, ``size_bytes``, ``macs``,
    ``bops``, ``latency_ms@DEVICE``, ``energy_mj@DEVICE``, ``co2e_g``
    (docs/search.md, "Objectives").

    Args:
        objective: the objective name, a device after ``@`` where it takes one.
        options: keyword arguments for the evaluator.
    """
    key = MetricKey.parse(objective)
    base, device = key.metric, key.device
    factory = _EVALUATORS.get(base)
    if factory is None:
        raise ValueError(
            f"objective {objective!r}: unknown evaluator {base!r}; known: {evaluator_names()}"
        )
    if device:
        options = {**options, "device": device}
    return factory(**options)
