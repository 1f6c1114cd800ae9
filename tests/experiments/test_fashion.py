"""The fashion-mnist task on small idx files the test writes: splits, the adapted
torchvision models, training with its cache, and the install hint without data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from frontier.experiments import TaskError, adapt_model, build_task, write_idx


def _write_fake_fashion(root: Path, train: int = 120, test: int = 40) -> Path:
    """Class k is a bright k-th horizontal band: learnable in a few steps."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", train), ("t10k", test)):
        labels = np.arange(n, dtype=np.uint8) % 10
        images = rng.integers(0, 40, (n, 28, 28), dtype=np.uint8)
        for i, k in enumerate(labels):
            images[i, 2 + 2 * k : 4 + 2 * k] = 250
        write_idx(root / f"{split}-images-idx3-ubyte", images)
        write_idx(root / f"{split}-labels-idx1-ubyte", labels)
    return root


def test_splits_loaders_and_a_cached_baseline(tmp_path: Path) -> None:
    root = _write_fake_fashion(tmp_path / "data")
    task = build_task("fashion-mnist", root=str(root), model="mobilenet_v2", epochs=2)
    s = task.splits()
    assert s["train"][0].shape == (96, 1, 28, 28) and s["val"][0].shape == (24, 1, 28, 28)
    assert s["test"][0].shape == (40, 1, 28, 28)
    assert set(s["val"][1].tolist()) == set(range(10))  # a stratified split
    assert task.example_inputs().shape == (1, 1, 28, 28)
    model = task.baseline()
    assert task.cache_path().exists() and task.cache_path().with_suffix(".json").exists()
    again = build_task("fashion-mnist", root=str(root), model="mobilenet_v2", epochs=2)
    cached = again.baseline()  # loaded, not retrained
    for a, b in zip(model.state_dict().values(), cached.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    other = build_task("fashion-mnist", root=str(root), model="mobilenet_v2", epochs=3)
    assert other.cache_path() != task.cache_path()  # another recipe, another file


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18", "resnet50"], ids=str)
def test_adapted_models_take_28x28_grayscale(name: str) -> None:
    model = adapt_model(name).eval()
    with torch.no_grad():
        assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_without_the_data_the_error_says_how_to_install_it(tmp_path: Path) -> None:
    task = build_task("fashion-mnist", root=str(tmp_path / "nowhere"))
    with pytest.raises(TaskError, match="apt-get install dataset-fashion-mnist"):
        task.baseline()
    (tmp_path / "half").mkdir()
    write_idx(tmp_path / "half" / "train-images-idx3-ubyte", np.zeros((3, 28, 28), np.uint8))
    task = build_task("fashion-mnist", root=str(tmp_path / "half"))
    with pytest.raises(TaskError, match="no train-labels-idx1-ubyte"):
        task.splits()


def test_training_progress_reaches_a_log(capsys) -> None:
    """Off a terminal (a log file, CI), long training still says how far it is."""
    from frontier.experiments import progress_bar

    update = progress_bar(200, "baseline")
    for step in range(1, 201):
        update(step)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 9
    assert lines[0].startswith("baseline: 20/200 steps") and lines[-1].startswith(
        "baseline: 180/200"
    )
    assert all("s left" in line for line in lines)
