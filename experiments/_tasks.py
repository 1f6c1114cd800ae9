"""The task interface: data loaders, a baseline model and a metric, plus a registry."""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from frontier.spaces import Registry

from ._training import pin_memory

logger = logging.getLogger(__name__)


class TaskError(ValueError):
    """A task cannot be built or loaded; the message names the task, file or field."""


@dataclass(frozen=True)
class Loaders:
    """The three splits of a task's data."""

    train: DataLoader[Any]
    val: DataLoader[Any]
    test: DataLoader[Any]


class Task(ABC):
    """What Frontier needs to know about a problem: data, a trained baseline, a metric.

    Subclass it (or return any object with these methods from a builder function) and
    register it with ``@register_task("name")``, or name a builder in a config as
    ``my_pkg.tasks:build``. Required: ``loaders``, ``baseline``, ``example_inputs``;
    optional hooks with defaults: ``metric``, ``calibration_batches``, ``proxy_batches``,
    ``limitations``, ``soft_teacher`` and ``trained`` (an object that is not a ``Task``
    gets the same defaults where it lacks one).
    """

    name: str = "task"
    metric_name: str = "accuracy"

    @abstractmethod
    def loaders(self, *, batch_size: int = 128) -> Loaders:
        """Train, validation and test loaders yielding (inputs, targets) batches."""

    @abstractmethod
    def baseline(self) -> nn.Module:
        """The trained, uncompressed model (the teacher), in eval mode."""

    @abstractmethod
    def example_inputs(self) -> torch.Tensor:
        """One input batch of size 1, as the model takes it."""

    def metric(self, logits: torch.Tensor, targets: torch.Tensor) -> float:
        """Top-1 accuracy by default."""
        return float((logits.argmax(dim=-1) == targets).float().mean())

    @property
    def trained(self) -> bool:
        """False for a model that is not trained: the search then scores at the proxy
        rung only (fine-tuning an untrained model says nothing). A subclass may set
        ``trained = False``."""
        return True

    def limitations(self) -> list[str]:
        """Lines the search prints and records before it starts: what this task's
        numbers cannot tell (none by default)."""
        return []

    def soft_teacher(self) -> nn.Module | None:
        """What distillation takes soft targets from, when not ``baseline()`` (a cache
        of its logits, say); None: the baseline itself."""
        return None

    def proxy_batches(self, *, samples: int = 256) -> list[Any]:
        """The proxy fidelity's held-out data: the first ``samples`` validation samples as
        ``(inputs, targets)`` batches, cut as the task's models compute them fastest (one
        batch by default). Which samples, not how they are batched, decides the proxy's
        signals."""
        return [next(iter(self.loaders(batch_size=samples).val))]

    def calibration_batches(self, *, batches: int = 4, batch_size: int = 128) -> list[Any]:
        """A few training batches for activation-range calibration."""
        out = []
        for i, batch in enumerate(self.loaders(batch_size=batch_size).train):
            if i >= batches:
                break
            out.append(batch)
        return out


def tensor_loaders(
    splits: dict[str, tuple[torch.Tensor, torch.Tensor]], *, batch_size: int, seed: int
) -> Loaders:
    """Loaders over in-memory ``(inputs, targets)`` splits: the training split shuffled
    by a generator seeded with ``seed``, batches pinned where they go to a GPU."""
    pin = pin_memory()
    gen = torch.Generator().manual_seed(seed)
    return Loaders(
        train=DataLoader(
            TensorDataset(*splits["train"]),
            batch_size=batch_size,
            shuffle=True,
            generator=gen,
            pin_memory=pin,
        ),
        val=DataLoader(TensorDataset(*splits["val"]), batch_size=batch_size, pin_memory=pin),
        test=DataLoader(TensorDataset(*splits["test"]), batch_size=batch_size, pin_memory=pin),
    )


class TensorTask(Task):
    """A task whose splits are tensors in memory (the built-in digits, Fashion-MNIST and
    text tasks): its loaders, its example input and its baseline, trained once and
    cached (``load_or_train``), come from four methods a subclass writes:
    ``load_splits`` (train / val / test as (inputs, targets) tensors), ``untrained``
    (the baseline architecture, seeded, not trained), ``cache_path`` (where its weights
    are cached: a recipe's hash in the name retrains a changed recipe) and
    ``train_baseline`` (trains it, returns figures for the cache's ``.json``)."""

    seed: int = 0

    @abstractmethod
    def load_splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """train / val / test as (inputs, targets) tensors, read once."""

    @abstractmethod
    def untrained(self) -> nn.Module:
        """The baseline's architecture, freshly initialised (seeded)."""

    @abstractmethod
    def cache_path(self) -> Path:
        """Where the trained baseline's weights are cached."""

    @abstractmethod
    def train_baseline(self, model: nn.Module) -> dict[str, Any] | None:
        """Train ``model`` in place (with progress); figures to keep beside the cache."""

    def splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        cached: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = getattr(self, "_splits", None)
        if cached is None:
            cached = self._splits = self.load_splits()
        return cached

    def loaders(self, *, batch_size: int = 128) -> Loaders:
        return tensor_loaders(self.splits(), batch_size=batch_size, seed=self.seed)

    def example_inputs(self) -> torch.Tensor:
        """The first training sample, as a batch of one."""
        return self.splits()["train"][0][:1].clone()

    @staticmethod
    def report_training(label: str, done: str, figures: dict[str, Any]) -> None:
        """The line a baseline's training ends with: how long ``done`` took (trained,
        fine-tuned) and the accuracies ``figures`` holds."""
        print(
            f"{label}: {done} in {figures['train_s']:.0f} s, validation accuracy "
            f"{figures['val_accuracy']:.4f}, test accuracy {figures['test_accuracy']:.4f}",
            file=sys.stderr,
        )

    def baseline(self) -> nn.Module:
        cached: nn.Module | None = getattr(self, "_baseline", None)
        if cached is None:
            cached = self._baseline = load_or_train(
                self.untrained(), self.cache_path(), self.train_baseline
            )
        return cached


TaskBuilder = Callable[..., Task]
_TASKS: Registry[TaskBuilder] = Registry("task")


def register_task(name: str) -> Callable[[TaskBuilder], TaskBuilder]:
    """Decorator registering a Task subclass (or a builder function) under ``name``."""
    return _TASKS.register(name)


def task_names() -> list[str]:
    """Names of the registered tasks."""
    return _TASKS.names()


def build_task(name: str, **options: Any) -> Task:
    """Build a registered task, or one named by a Python path ``package.module:callable``.

    Args:
        name: a registered task name or ``module:attribute``.
        options: keyword arguments for the task's constructor or builder.
    """
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise TaskError(f"task {name!r}: cannot import {module_name!r} ({err})") from err
        builder = getattr(module, attr, None)
        if builder is None:
            raise TaskError(f"task {name!r}: module {module_name!r} has no attribute {attr!r}")
    else:
        found = _TASKS.get(name)
        if found is None:
            raise TaskError(
                f"task: unknown task {name!r}; registered: {task_names()}, "
                "or give a Python path such as 'my_pkg.tasks:build'"
            )
        builder = found
    try:
        inspect.signature(builder).bind(**options)
    except TypeError as err:
        raise TaskError(f"task.options for {name!r}: {err}") from err
    except ValueError:  # builtins without a signature: let the call speak
        pass
    task = _call(name, "its builder", builder, **options)
    for method in ("loaders", "baseline", "example_inputs"):
        if not callable(getattr(task, method, None)):
            raise TaskError(f"task {name!r}: the built object has no {method}() method")
    return task


def _call(name: str, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with any error but a ``TaskError`` reported as one that
    names the task and the method (a user's task fails on the user's side)."""
    try:
        return fn(*args, **kwargs)
    except TaskError:
        raise
    except Exception as err:
        raise TaskError(f"task {name!r}: {what} raised {type(err).__name__}: {err}") from err


def task_baseline(task: Any, name: str) -> tuple[Any, Any]:
    """The task's baseline model and example inputs; an error in the task's own code
    becomes a ``TaskError`` naming the method."""
    teacher = _call(name, "baseline()", task.baseline)
    example = _call(name, "example_inputs()", task.example_inputs)
    _check_runs(task, name, teacher, example)
    return teacher, example


def _check_runs(task: Any, name: str, model: Any, example: Any) -> None:
    """The baseline runs on ``example_inputs()``; else a ``TaskError`` naming the example's
    shape, a data batch's where the loaders give one, and the model's complaint (before
    any trial: a search, ``space`` or ``lut ops`` would fail on it later)."""
    from frontier.spaces import SpaceError, check_forward, input_shapes

    try:
        check_forward(model, example)
    except SpaceError as err:
        data = ""
        try:
            inputs = next(iter(task.loaders().val))[0]
            data = f" (its validation batches are {input_shapes(inputs)})"
        except Exception:  # the loaders' own faults are reported where they are used
            pass
        raise TaskError(f"task {name!r}: {err}{data}") from None


CACHE_ENV = "FRONTIER_CACHE_DIR"


def cache_dir() -> Path:
    """Where baselines are cached: ``$FRONTIER_CACHE_DIR`` or ``~/.cache/frontier``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "frontier")


_UNTRAINED = {"on": False}


def skip_training(skip: bool = True) -> None:
    """While on, the built-in tasks build their baselines as initialised, neither trained
    nor loaded from the cache: what measuring latency alone needs (a kernel's time does
    not depend on weight values). Never for accuracy."""
    _UNTRAINED["on"] = skip


def load_or_train(
    model: nn.Module, path: Path, train: Callable[[nn.Module], dict[str, Any] | None]
) -> nn.Module:
    """``model`` with the weights cached at ``path``, or trained by ``train(model)`` and
    cached there (atomically; the figures ``train`` returns go in a ``.json`` beside it).
    An unreadable cache file is retrained, with a warning. Returns the model in eval mode
    (untouched under ``skip_training``)."""
    if _UNTRAINED["on"]:
        return model.eval()
    if path.exists():
        try:
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        except Exception as err:
            logger.warning("cached baseline %s is unreadable (%s); retraining", path, err)
        else:
            return model.eval()
    figures = train(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(model.state_dict(), tmp)
    tmp.replace(path)
    if figures is not None:
        path.with_suffix(".json").write_text(json.dumps(figures, indent=2))
    return model.eval()
