import sys
import textwrap

import pytest
import torch
from torch import nn

from frontier.experiments import (
    DigitsTask,
    ImageFolderTask,
    Task,
    TaskError,
    build_task,
    cache_dir,
    evaluate,
    load_weights,
)
from tests.experiments.images import image_folder


@pytest.mark.parametrize("family", ["mlp", "cnn"], ids=str)
def test_digits_baselines_reach_97_percent(family: str) -> None:
    task = DigitsTask(model=family)
    model = task.baseline()
    assert evaluate(model, task.loaders().test) >= 0.97
    assert task.cache_path().exists() and task.cache_path().parent == cache_dir()


def test_digits_split_is_fixed_and_disjoint() -> None:
    a, b = DigitsTask().splits(), DigitsTask().splits()
    assert torch.equal(a["test"][0], b["test"][0])
    sizes = {k: len(v[1]) for k, v in a.items()}
    assert sum(sizes.values()) == 1797 and sizes["test"] == 360


def test_changed_recipe_retrains(monkeypatch, capsys) -> None:
    DigitsTask(model="mlp").baseline()
    capsys.readouterr()
    DigitsTask(model="mlp").baseline()  # cached: no training
    assert "training" not in capsys.readouterr().err
    DigitsTask(model="mlp", epochs=2).baseline()
    assert "training the digits mlp baseline" in capsys.readouterr().err


def test_unknown_task_and_options() -> None:
    with pytest.raises(TaskError, match="unknown task 'digitz'"):
        build_task("digitz")
    with pytest.raises(TaskError, match="task.options"):
        build_task("digits", modell="mlp")
    with pytest.raises(TaskError, match="digits has mlp, cnn, cnn-swish, got 'vit'"):
        build_task("digits", model="vit")


def test_python_path_task(tmp_path, monkeypatch) -> None:
    (tmp_path / "my_tasks.py").write_text(
        textwrap.dedent(
            """
            from frontier.experiments import DigitsTask

            def build(width="mlp"):
                return DigitsTask(model=width)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    task = build_task("my_tasks:build", width="cnn")
    assert isinstance(task, Task) and task.family == "cnn"
    with pytest.raises(TaskError, match="has no attribute 'nope'"):
        build_task("my_tasks:nope")
    sys.modules.pop("my_tasks", None)


def test_image_folder_task_with_weights(tmp_path) -> None:
    import torchvision

    image_folder(tmp_path / "data")
    ref = torchvision.models.get_model("resnet18", weights=None, num_classes=2)
    torch.save({"state_dict": ref.state_dict()}, tmp_path / "w.pt")
    task = ImageFolderTask(
        root=str(tmp_path / "data"),
        model="resnet18",
        weights=str(tmp_path / "w.pt"),
        image_size=32,
    )
    x, y = next(iter(task.loaders(batch_size=4).train))
    assert x.shape == (4, 3, 32, 32) and set(y.tolist()) <= {0, 1}
    model = task.baseline()
    assert torch.equal(model.fc.weight, ref.fc.weight)
    assert task.example_inputs().shape == (1, 3, 32, 32)


def test_image_folder_errors(tmp_path) -> None:
    with pytest.raises(TaskError, match="train is not a directory"):
        ImageFolderTask(root=str(tmp_path), model="resnet18")
    image_folder(tmp_path / "d")
    task = ImageFolderTask(root=str(tmp_path / "d"), model="resnet18", weights="missing.pt")
    with pytest.raises(TaskError, match="missing.pt does not exist"):
        task.baseline()
    torch.save(nn.Linear(2, 2).state_dict(), tmp_path / "bad.pt")
    with pytest.raises(TaskError, match="does not fit ResNet"):
        load_weights(torchvision_resnet(), tmp_path / "bad.pt")


def torchvision_resnet() -> nn.Module:
    import torchvision

    return torchvision.models.resnet18(num_classes=2)
