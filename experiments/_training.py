"""The one training loop the built-in tasks share: epochs of optimiser steps, the model
scored on the validation split after each, the best epoch's weights kept. Each task
brings its batches, optimiser, schedule and loss."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader


def evaluate(model: nn.Module, loader: DataLoader[Any]) -> float:
    """Top-1 accuracy of ``model`` over ``loader``."""
    was_training = model.training
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += int((model(x).argmax(dim=-1) == y).sum())
            total += len(y)
    model.train(was_training)
    return correct / max(total, 1)


def fit(
    model: nn.Module,
    batches: Callable[[int], Iterable[tuple[Any, torch.Tensor]]],
    val: DataLoader[Any],
    *,
    epochs: int,
    opt: torch.optim.Optimizer,
    loss_fn: nn.Module,
    sched: Any = None,
    sched_per: str = "step",
    clip_norm: float | None = None,
    progress: Callable[[int], None] | None = None,
    label: str = "",
) -> float:
    """Train ``model`` for ``epochs`` and keep the weights of its best validation epoch
    (the first best on a tie); returns that epoch's validation accuracy. The model ends
    in eval mode.

    Args:
        batches: ``epoch -> (inputs, targets)`` batches of that epoch.
        val: the validation split.
        sched: a learning-rate schedule stepped after each optimiser step
            (``sched_per="step"``) or each epoch (``"epoch"``).
        clip_norm: clip the gradients' norm to this before each step.
        progress: called with the steps done so far after each step.
        label: when given, a line per epoch on stderr (validation accuracy, seconds).
    """
    best, best_state = -1.0, None
    start, step = time.perf_counter(), 0
    for epoch in range(epochs):
        model.train()
        for x, y in batches(epoch):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
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
        acc = evaluate(model, val)
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
    model.eval()
    return best


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
