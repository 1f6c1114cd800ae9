"""A trial on a named accelerator puts its models and batches there."""

from __future__ import annotations

import pytest
import torch

from frontier.evaluators import AccuracyEvaluator, Candidate, EvalSetup
from frontier.experiments import DigitsTask
from frontier.spaces import Accelerator, CompressionPlan


class _Recorder:
    """Stands in for ``to_device`` in the accuracy evaluator: remembers each device it
    was asked for, keeps the data where it is (this machine has only its CPU)."""

    def __init__(self) -> None:
        self.devices: list[str] = []

    def __call__(self, data, device):
        self.devices.append(str(device))
        return data


def test_a_trial_on_a_named_device_puts_its_models_and_batches_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The student, the teacher and every batch of fine-tuning, distillation and
    validation go to the setup's accelerator; the scored model comes back on the CPU,
    where it is exported."""
    import frontier.evaluators._accuracy as accuracy
    import frontier.evaluators._base as base

    moved = _Recorder()
    monkeypatch.setattr(accuracy, "to_device", moved)
    monkeypatch.setattr(base, "to_device", moved)
    placed: list[tuple[str, str]] = []

    def place(self, model):
        placed.append((type(model).__name__, self.torch_device))
        return accuracy.copy.deepcopy(model)

    monkeypatch.setattr(EvalSetup, "placed", place)
    # a placed model reports the device it was placed on; validation follows the model
    monkeypatch.setattr(accuracy, "model_device", lambda model: torch.device("cuda:7"))
    task = DigitsTask(model="mlp")
    teacher = task.baseline()
    setup = EvalSetup(task=task, teacher=teacher, accelerator=Accelerator("cuda:7", name="x"))
    steps = 5
    model, m = AccuracyEvaluator(fidelity="short", steps=steps).fit(
        Candidate(CompressionPlan()), setup
    )
    assert 0.5 < m.value <= 1.0
    assert {d for _, d in placed} == {"cuda:7"} and len(placed) == 2  # student, teacher
    val_batches = len(task.loaders(batch_size=64).val)
    # each training step's batch, then each validation batch and its targets
    assert moved.devices == ["cuda:7"] * (steps + 2 * val_batches)
    assert all(p.device.type == "cpu" for p in model.parameters())
    moved.devices.clear()
    setup.proxy_data()
    assert moved.devices and set(moved.devices) == {"cuda:7"}
