"""Accuracy as a fidelity ladder: zero-cost proxies, a short distillation fine-tune, and
fine-tuning to convergence."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from frontier.spaces import (
    CPU,
    Accelerator,
    CompressionPlan,
    model_device,
    recalibrate_bn,
    to_device,
)

from ._base import (
    MAXIMIZE,
    Candidate,
    EvalSetup,
    EvaluationError,
    Evaluator,
    Measurement,
    register_evaluator,
)

FIDELITIES = ("proxy", "short", "full")


def kd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    temperature: float,
    alpha: float,
) -> torch.Tensor:
    """alpha * T^2 * KL(student/T || teacher/T) + (1 - alpha) * cross-entropy
    (``teacher_logits`` may be None where ``alpha`` is 0)."""
    ce = F.cross_entropy(student_logits, targets)
    if alpha == 0 or teacher_logits is None:
        return ce
    t = temperature
    kl = F.kl_div(
        F.log_softmax(student_logits / t, dim=-1),
        F.softmax(teacher_logits / t, dim=-1),
        reduction="batchmean",
    )
    return alpha * t * t * kl + (1 - alpha) * ce


def _cycle(loader: Any) -> Iterator[Any]:
    """``loader``'s batches, pass after pass; an ``EvaluationError`` if a pass yields
    none (an empty loader would otherwise be cycled forever)."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise EvaluationError("the training data held no batch (the train loader is empty)")


def _top1(logits: torch.Tensor, targets: torch.Tensor) -> float:
    return float((logits.argmax(dim=-1) == targets).float().mean())


class BatchMean:
    """A whole split's score from a per-batch ``metric(outputs, targets)``: each batch's
    value weighted by its size (top-1 accuracy adds up so)."""

    def __init__(self, metric: Any = _top1) -> None:
        self.metric, self.total, self.weighted = metric, 0, 0.0

    def update(self, outputs: Any, targets: Any) -> None:
        self.weighted += float(self.metric(outputs, targets)) * len(targets)
        self.total += len(targets)

    def compute(self) -> float:
        return self.weighted / self.total if self.total else 0.0


def task_score(task: Any) -> Any:
    """A call that makes a fresh score of ``task``'s metric over a split: its
    ``score()`` where it has one (a metric that is no mean of batches: mAP, mean IoU),
    else ``BatchMean`` of its per-batch ``metric`` (top-1 where it has none)."""
    found = getattr(task, "score", None)
    if callable(found):
        return found
    metric = getattr(task, "metric", _top1)
    return lambda: BatchMean(metric)


def task_loss(task: Any) -> Any:
    """``task``'s training loss ``loss(outputs, targets, teacher_outputs, *,
    temperature, alpha)`` where it has one (detection, segmentation, depth), else
    ``kd_loss`` on class logits."""
    found = getattr(task, "loss", None)
    if callable(found):
        return found

    def loss(outputs: Any, targets: Any, teacher: Any, *, temperature: float, alpha: float) -> Any:
        return kd_loss(outputs, teacher, targets, temperature=temperature, alpha=alpha)

    return loss


def _argmax_agreement(outputs: torch.Tensor, teacher: torch.Tensor) -> float:
    return float((outputs.argmax(-1) == teacher.argmax(-1)).float().mean())


def task_agreement(task: Any) -> Any:
    """``task``'s ``agreement(outputs, teacher_outputs)`` (its metric with the teacher's
    answers as the truth) where it has one, else the share of top-1 classes that agree."""
    found = getattr(task, "agreement", None)
    return found if callable(found) else _argmax_agreement


def measure_accuracy(
    model: nn.Module,
    loader: Any,
    metric: Any = _top1,
    *,
    labels: list[Any] | None = None,
    score: Any = None,
) -> float:
    """The task metric over ``loader``, each batch weighted by its size, on the device
    ``model`` is on (``score``: a call making a whole-split score, ``task_score``,
    instead of the mean of ``metric``); ``labels``, if given, gets each batch's targets
    appended (as the loader gave them: one pass over the data for both).

    Raises:
        EvaluationError: the model's outputs are not finite (NaN or infinite): argmax
            would still pick a class, and the score would mean nothing.
    """
    was = model.training
    model.eval()
    device = model_device(model)
    scored = score() if score is not None else BatchMean(metric)
    total = 0
    with torch.no_grad():
        for i, (x, y_given) in enumerate(loader):
            y = to_device(y_given, device)
            out = model(to_device(x, device))
            if isinstance(out, torch.Tensor) and not bool(torch.isfinite(out).all()):
                model.train(was)
                raise EvaluationError(
                    f"the model's outputs are not finite (NaN or inf) on batch {i} of the "
                    "evaluation data"
                )
            scored.update(out, y)
            total += len(y)
            if labels is not None:
                labels.append(y_given)
    model.train(was)
    if total == 0:
        raise EvaluationError("the evaluation data held no batch (the task's loader is empty)")
    return float(scored.compute())


def measure_onnx_accuracy(
    path: Any, loader: Any, metric: Any = _top1, *, score: Any = None
) -> float:
    """The task metric of an ONNX model (a file path) over ``loader``, each batch
    weighted by its size, on ONNX Runtime's CPU provider. An input shorter than the
    model's fixed shape (a text batch cut to its longest text) is padded with zeros,
    the padding id."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    spec = session.get_inputs()[0]
    scored = score() if score is not None else BatchMean(metric)
    for x, y in loader:
        array = x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        pad = [
            (0, max(0, want - have)) if isinstance(want, int) and i > 0 else (0, 0)
            for i, (want, have) in enumerate(zip(spec.shape, array.shape, strict=True))
        ]
        if any(after for _, after in pad):
            array = np.pad(array, pad)
        logits = torch.from_numpy(session.run(None, {spec.name: array})[0])
        if not bool(torch.isfinite(logits).all()):
            raise EvaluationError(f"{path}: the model's outputs are not finite (NaN or inf)")
        scored.update(logits, y)
    return float(scored.compute())


def _first(loader: Any, samples: int | None) -> Any:
    """The batches of ``loader`` up to ``samples`` samples (the last one cut), or the
    loader itself when ``samples`` is None."""
    if samples is None:
        return loader
    out, left = [], samples
    for x, y in loader:
        if left <= 0:
            break
        out.append((x[:left], y[:left]))
        left -= len(y)
    return out


def distill(
    student: nn.Module,
    teacher: nn.Module,
    loaders: Any,
    *,
    steps: int,
    temperature: float,
    alpha: float,
    lr: float,
    seed: int,
    patience: int | None = None,
    eval_every: int = 0,
    accelerator: Accelerator = CPU,
    loss: Any = None,
    score: Any = None,
) -> list[float]:
    """Fine-tune ``student`` with knowledge distillation from ``teacher`` (left unchanged).

    With ``patience``, validation accuracy is checked every ``eval_every`` steps and the
    run stops after ``patience`` checks without improvement, restoring the best weights.
    ``student`` and ``teacher`` must already be on ``accelerator``'s device; each batch
    goes there, and the forward passes run under its autocast. ``loss`` and ``score``:
    the task's (``task_loss``, ``task_score``; default: distillation of class logits
    and top-1 accuracy).

    Returns:
        The training loss of every step.
    """
    torch.manual_seed(seed)
    loss_fn = loss or task_loss(None)
    teacher.eval()
    student.train()
    images = any(p.dim() == 4 for p in student.parameters())
    if images:
        # convolutions train 2.7x faster channels-last on this CPU (mobilenet_v2,
        # measured side by side); the teacher's copy runs the same way
        student.to(memory_format=torch.channels_last)
        if alpha > 0:
            teacher = copy.deepcopy(teacher).to(memory_format=torch.channels_last)
    opt = torch.optim.Adam([p for p in student.parameters() if p.requires_grad], lr=lr)
    # each step's loss stays on the device, read once at the end: a read per step would
    # make a GPU wait for the host every step
    losses: list[torch.Tensor] = []
    best_acc, best_state, bad = -1.0, None, 0
    batches = _cycle(loaders.train)
    # a teacher that answers from the host batch (cached logits) gets it as it came
    host_teacher = bool(getattr(teacher, "host_inputs", False))
    for step in range(1, steps + 1):
        batch = next(batches)
        x, y = to_device(batch, accelerator.device)
        if images and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        t_logits = None
        with accelerator.autocast():
            if alpha > 0:  # plain fine-tuning needs no teacher
                with torch.no_grad():
                    t_logits = teacher(batch[0] if host_teacher else x)
            logits = student(x)
        # the loss in FP32: under autocast the logits may be bf16
        value = loss_fn(
            logits.float(),
            y,
            None if t_logits is None else t_logits.float(),
            temperature=temperature,
            alpha=alpha,
        )
        opt.zero_grad()
        value.backward()
        opt.step()
        losses.append(value.detach())
        if patience is not None and eval_every and step % eval_every == 0:
            acc = measure_accuracy(student, loaders.val, score=score)
            if acc > best_acc:
                best_acc, bad = acc, 0
                best_state = copy.deepcopy(student.state_dict())
            else:
                bad += 1
                if bad >= patience:
                    break
    if best_state is not None:
        student.load_state_dict(best_state)
    student.eval()
    return torch.stack(losses).float().cpu().tolist() if losses else []


def proxy_signals(
    model: nn.Module,
    teacher: nn.Module,
    batches: list[Any],
    bn_batches: list[Any] | None = None,
    *,
    saliency: bool = True,
    teacher_logits: torch.Tensor | None = None,
    loss: Any = None,
    agreement: Any = None,
) -> dict[str, float]:
    """Zero-cost signals on held-out ``batches`` of ``(inputs, targets)``, taken as one
    set: top-1 agreement with the teacher, minus the KL divergence from the teacher, and
    (``saliency``) a gradient-saliency score (sum |g * w| of the cross-entropy,
    SNIP-style, normalised per weight: a backward pass, twice the forward's cost). With
    ``bn_batches``, batch norm statistics are re-estimated on them first (forward passes
    only). ``teacher_logits``: the teacher's outputs on ``batches`` in order, where the
    caller keeps them (the same for every plan). The signals are taken on the device
    ``batches`` are on (a copy of ``model`` goes there). ``loss`` and ``agreement``: the
    task's (``task_loss``, ``task_agreement``): the KL term is its loss at alpha 1 (pure
    distillation), saliency's gradient its loss at alpha 0."""
    loss_fn = loss or task_loss(None)
    agree = agreement or _argmax_agreement
    device = next((x.device for x, _ in batches if isinstance(x, torch.Tensor)), None)
    model = copy.deepcopy(model) if device is None else copy.deepcopy(model).to(device)
    recalibrate_bn(model, bn_batches or [])
    model.eval()
    y = torch.cat([targets for _, targets in batches])
    if teacher_logits is None:
        with torch.no_grad():
            teacher_logits = torch.cat([teacher(x) for x, _ in batches])
    with torch.set_grad_enabled(saliency):
        logits = torch.cat([model(x) for x, _ in batches])
    if not bool(torch.isfinite(logits).all()):
        raise EvaluationError("the model's outputs are not finite (NaN or inf) on the proxy batch")
    with torch.no_grad():
        kl = float(loss_fn(logits.detach(), y, teacher_logits, temperature=1.0, alpha=1.0))
    signals = {"agreement": float(agree(logits.detach(), teacher_logits)), "neg_kl": -kl}
    if saliency:
        model.zero_grad()
        loss_fn(logits, y, None, temperature=1.0, alpha=0.0).backward()
        total, count = 0.0, 0
        for p in model.parameters():
            if p.grad is not None and p.dim() > 1:
                total += float((p.grad * p.detach()).abs().sum())
                count += p.numel()
        signals["saliency"] = total / max(count, 1)
    return signals


@register_evaluator("accuracy")
class AccuracyEvaluator(Evaluator):
    """The task's metric (top-1 accuracy for the built-in tasks) at one fidelity.

    - ``proxy``: no training; the ``signal`` of ``proxy_signals`` on a validation batch.
    - ``short``: ``steps`` steps of distillation fine-tuning, then validation accuracy.
    - ``full``: distillation to convergence with early stopping on validation, then
      validation accuracy. No rung reads the test split: it only reports
      (``measure_onnx_accuracy`` on a front member's model at the end of a search).

    Temperature and alpha come from the plan's distillation settings; a plan without
    them fine-tunes on cross-entropy alone (alpha 0), unless ``temperature``/``alpha``
    are given here.

    Args:
        fidelity: "proxy", "short" or "full".
        steps: fine-tuning steps of ``short`` (and the cap of ``full``, x ``full_factor``).
        lr: Adam learning rate.
        batch_size: fine-tuning batch size.
        signal: the proxy signal reported as the value.
        all_signals: ``proxy`` computes every signal for the details, saliency's
            backward pass included, not only the one reported.
        temperature, alpha: distillation settings for plans that carry none.
        val_samples: ``short`` scores on the first this many validation samples (None:
            all); a cheaper, noisier rung for large models.
    """

    name, unit, direction = "accuracy", "fraction", MAXIMIZE

    def __init__(
        self,
        *,
        fidelity: str = "short",
        steps: int = 100,
        lr: float = 1e-3,
        batch_size: int = 64,
        signal: str = "agreement",
        temperature: float | None = None,
        alpha: float | None = None,
        full_factor: int = 50,
        patience: int = 4,
        val_samples: int | None = None,
        all_signals: bool = False,
    ) -> None:
        if fidelity not in FIDELITIES:
            raise ValueError(f"accuracy: fidelity must be one of {FIDELITIES}, got {fidelity!r}")
        if signal not in ("agreement", "neg_kl", "saliency"):
            raise ValueError(f"accuracy: unknown proxy signal {signal!r}")
        if steps < 1:
            raise ValueError(f"accuracy: steps must be >= 1, got {steps}")
        if val_samples is not None and val_samples < 1:
            raise ValueError(f"accuracy: val_samples must be >= 1 or null, got {val_samples}")
        self.val_samples = val_samples
        self.fidelity = fidelity
        self.steps = steps
        self.lr = lr
        self.batch_size = batch_size
        self.signal = signal
        self.temperature = temperature
        self.alpha = alpha
        self.full_factor = full_factor
        self.patience = patience
        self.all_signals = all_signals

    def _kd(self, plan: CompressionPlan) -> tuple[float, float]:
        if plan.distill is not None:
            return plan.distill.temperature, plan.distill.alpha
        return (self.temperature or 1.0), (self.alpha if self.alpha is not None else 0.0)

    def evaluate(self, candidate: Candidate, setup: EvalSetup) -> Measurement:
        candidate.scored, measurement = self.fit(candidate, setup)
        return measurement

    def fit(self, candidate: Candidate, setup: EvalSetup) -> tuple[nn.Module, Measurement]:
        """The model this fidelity scores and its measurement: the compressed model
        itself for ``proxy``, the fine-tuned copy for ``short`` and ``full``. Seeded by
        the setup, so the same candidate gives the same model again (what the search
        exports for a front member)."""
        loaders = setup.task.loaders(batch_size=self.batch_size)
        compressed = setup.compressed(candidate)
        if self.fidelity == "proxy":
            batches, teacher_logits = setup.proxy_data()
            signals = proxy_signals(
                compressed,
                setup.teacher,
                batches,
                setup.calibration(),
                saliency=self.all_signals or self.signal == "saliency",
                teacher_logits=teacher_logits,
                loss=task_loss(setup.task),
                agreement=task_agreement(setup.task),
            )
            return compressed, Measurement(signals[self.signal], "fraction", "proxy", 0.0, signals)
        student = setup.placed(compressed)
        if student is compressed:
            student = copy.deepcopy(compressed)
        temperature, alpha = self._kd(candidate.plan)
        if self.fidelity == "short":
            losses = distill(
                student,
                setup.soft_teacher,
                loaders,
                steps=self.steps,
                temperature=temperature,
                alpha=alpha,
                lr=self.lr,
                seed=setup.seed,
                accelerator=setup.accelerator,
                loss=task_loss(setup.task),
                score=task_score(setup.task),
            )
            value = measure_accuracy(
                student, _first(loaders.val, self.val_samples), score=task_score(setup.task)
            )
            split = "val"
        else:
            epoch = max(len(loaders.train), 1)
            losses = distill(
                student,
                setup.soft_teacher,
                loaders,
                steps=self.steps * self.full_factor,
                temperature=temperature,
                alpha=alpha,
                lr=self.lr,
                seed=setup.seed,
                patience=self.patience,
                eval_every=epoch,
                accelerator=setup.accelerator,
                loss=task_loss(setup.task),
                score=task_score(setup.task),
            )
            # the test split only reports (a front member, once, at the end of a search):
            # what chooses models never reads it
            value = measure_accuracy(student, loaders.val, score=task_score(setup.task))
            split = "val"
        details = {
            "split": split,
            "steps": len(losses),
            "temperature": temperature,
            "alpha": alpha,
            "first_loss": losses[0],
            "last_loss": losses[-1],
        }
        # back on the CPU, where the search exports the model it scored
        return student.to("cpu"), Measurement(value, "fraction", self.fidelity, 0.0, details)
