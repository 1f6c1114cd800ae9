"""The one training loop the built-in tasks share: epochs of optimiser steps, the model
scored on the validation split after each, the best epoch's weights kept. Each task
brings its batches, optimiser, schedule and loss.

The loop trains on this process's accelerator (``accelerator()``: the CPU unless the
search set another with ``use_accelerator``), and hands the model back on the CPU,
where export, costs and device tables want it."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from frontier.spaces import CPU, Accelerator, model_device, to_device

_ACCELERATOR = [CPU]


def accelerator() -> Accelerator:
    """Where this process trains and scores models (the CPU unless a search set one):
    what a task's ``baseline()`` may train on, and whether its loaders should pin
    memory (``pin_memory``)."""
    return _ACCELERATOR[-1]


@contextlib.contextmanager
def use_accelerator(found: Accelerator) -> Iterator[Accelerator]:
    """Train and score on ``found`` inside the block (a search's worker holds one GPU)."""
    _ACCELERATOR.append(found)
    try:
        yield found
    finally:
        _ACCELERATOR.pop()


def pin_memory() -> bool:
    """Whether loaders should pin their batches: only where they go to a GPU."""
    return accelerator().is_cuda


def evaluate(model: nn.Module, loader: DataLoader[Any]) -> float:
    """Top-1 accuracy of ``model`` over ``loader``, on the device the model is on."""
    was_training = model.training
    model.eval()
    device = model_device(model)
    correct, total = torch.zeros((), dtype=torch.int64, device=device), 0
    with torch.no_grad():
        for x, y in loader:  # counted on the device, read once: no wait per batch
            out = model(to_device(x, device))
            correct += (out.argmax(dim=-1) == to_device(y, device)).sum()
            total += len(y)
    model.train(was_training)
    return int(correct) / max(total, 1)


def fit(
    model: nn.Module,
    batches: Callable[[int], Iterable[tuple[Any, torch.Tensor]]],
    val: DataLoader[Any],
    *,
    epochs: int,
    opt: torch.optim.Optimizer,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    sched: Any = None,
    sched_per: str = "step",
    clip_norm: float | None = None,
    progress: Callable[[int], None] | None = None,
    label: str = "",
    score: Callable[[nn.Module, DataLoader[Any]], float] | None = None,
) -> float:
    """Train ``model`` for ``epochs`` and keep the weights of its best validation epoch
    (the first best on a tie); returns that epoch's validation accuracy. It trains on
    ``accelerator()`` (``opt`` must hold ``model``'s own parameters: they move with it)
    and ends on the CPU, in eval mode.

    Args:
        batches: ``epoch -> (inputs, targets)`` batches of that epoch.
        val: the validation split.
        sched: a learning-rate schedule stepped after each optimiser step
            (``sched_per="step"``) or each epoch (``"epoch"``).
        clip_norm: clip the gradients' norm to this before each step.
        progress: called with the steps done so far after each step.
        label: when given, a line per epoch on stderr (validation accuracy, seconds).
        score: the validation metric of ``model`` over a loader (default: top-1
            accuracy, ``evaluate``).
    """
    best, best_state = -1.0, None
    start, step = time.perf_counter(), 0
    on = accelerator()
    _move(model, opt, on.device)
    for epoch in range(epochs):
        model.train()
        for x, y in batches(epoch):
            x, y = to_device(x, on.device), to_device(y, on.device)
            opt.zero_grad()
            with on.autocast():
                loss = loss_fn(model(x), y)
            loss.backward()
            if clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            opt.step()
            if sched is not None and sched_per == "step":
                sched.step()
            step += 1
            if progress is not None:
                progress(step)
        if sched is not None and sched_per == "epoch":
            sched.step()
        acc = (score or evaluate)(model, val)
        if label:
            print(
                f"{label}: epoch {epoch + 1}/{epochs}, validation accuracy {acc:.4f}, "
                f"{time.perf_counter() - start:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        if acc > best:
            best = acc
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if best_state is not None:
        model.load_state_dict(best_state)
    _move(model, opt, "cpu")
    model.eval()
    return best


def _move(model: nn.Module, opt: torch.optim.Optimizer, device: str) -> None:
    """``model`` and ``opt``'s state to ``device``. ``Module.to`` keeps each parameter
    object (it moves ``.data``), so the optimiser's parameters move with the model; its
    state (momenta) is moved here. Nothing is copied where it is already there."""
    if model_device(model) == torch.device(device):
        return
    model.to(device)
    for state in opt.state.values():
        for k, v in state.items():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                state[k] = v.to(device)


def progress_bar(total: int, label: str) -> Callable[[int], None]:
    """``update(done)``: a rich bar on a terminal; elsewhere (a log, CI) a line at every
    tenth of the steps with the time spent and the time left."""
    if not sys.stderr.isatty():
        start = time.perf_counter()
        marks = {max(1, round(total * k / 10)) for k in range(1, 10)}

        def log(done: int) -> None:
            if done in marks:
                spent = time.perf_counter() - start
                print(
                    f"{label or 'training'}: {done}/{total} steps, {spent:.0f} s, "
                    f"about {spent * (total - done) / done:.0f} s left",
                    file=sys.stderr,
                    flush=True,
                )

        return log
    from rich.progress import Progress

    bar = Progress(transient=True)
    task = bar.add_task(label or "training", total=total)
    bar.start()

    def update(done: int) -> None:
        bar.update(task, completed=done)
        if done >= total:
            bar.stop()

    return update
