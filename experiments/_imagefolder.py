"""ImageNet/CIFAR-style data from disk: an ImageFolder tree and a weights file."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from ._tasks import Loaders, Task, TaskError, register_task

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def load_weights(model: nn.Module, path: str | Path) -> None:
    """Load a state dict saved with ``torch.save`` into ``model``, safely.

    Only tensors are read (``weights_only=True``). A checkpoint that wraps the state dict
    under ``state_dict`` or ``model`` is unwrapped.
    """
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"weights: {path} does not exist or is not a file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise TaskError(f"weights: {path} is not a readable weights file ({err})") from err
    if isinstance(state, dict):
        for key in ("state_dict", "model"):
            if isinstance(state.get(key), dict):
                state = state[key]
    if not isinstance(state, dict):
        raise TaskError(f"weights: {path} holds a {type(state).__name__}, not a state dict")
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise TaskError(f"weights: {path} does not fit {type(model).__name__}: {err}") from err


@register_task("imagefolder")
class ImageFolderTask(Task):
    """Classification on an ImageFolder tree (``root/train/<class>/*.png``, ``root/val``,
    optionally ``root/test``) with a torchvision architecture.

    Args:
        root: the data directory.
        model: a torchvision classification model name (``mobilenet_v2``, ``resnet50``).
        weights: a state-dict file for the model; without it the weights are random and
            ``pretrained`` is False (callers should say so and limit themselves to proxies).
        image_size: side of the square crop fed to the model.
        seed: seed of the training loader's shuffle.
    """

    name = "imagefolder"

    def __init__(
        self,
        *,
        root: str,
        model: str,
        weights: str | None = None,
        image_size: int = 224,
        seed: int = 0,
    ) -> None:
        self.root = Path(root)
        if not (self.root / "train").is_dir():
            raise TaskError(f"task.options.root: {self.root}/train is not a directory")
        if not (self.root / "val").is_dir():
            raise TaskError(f"task.options.root: {self.root}/val is not a directory")
        self.model_name = model
        self.weights = weights
        self.image_size = image_size
        self.seed = seed
        self.pretrained = weights is not None
        self._baseline: nn.Module | None = None

    def _dataset(self, split: str) -> Any:
        from torchvision import datasets, transforms

        tf = transforms.Compose(
            [
                transforms.Resize(self.image_size),
                transforms.CenterCrop(self.image_size),
                transforms.ToTensor(),
                transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            ]
        )
        return datasets.ImageFolder(str(self.root / split), transform=tf)

    @property
    def classes(self) -> list[str]:
        classes: list[str] = self._dataset("train").classes
        return classes

    def loaders(self, *, batch_size: int = 64) -> Loaders:
        gen = torch.Generator().manual_seed(self.seed)
        test_split = "test" if (self.root / "test").is_dir() else "val"
        return Loaders(
            train=DataLoader(
                self._dataset("train"), batch_size=batch_size, shuffle=True, generator=gen
            ),
            val=DataLoader(self._dataset("val"), batch_size=batch_size),
            test=DataLoader(self._dataset(test_split), batch_size=batch_size),
        )

    def example_inputs(self) -> torch.Tensor:
        return torch.zeros(1, 3, self.image_size, self.image_size)

    def baseline(self) -> nn.Module:
        if self._baseline is not None:
            return self._baseline
        import torchvision

        try:
            model = torchvision.models.get_model(
                self.model_name, weights=None, num_classes=len(self.classes)
            )
        except ValueError as err:
            raise TaskError(f"task.options.model: {err}") from err
        if self.weights is None:
            warnings.warn(
                f"{self.model_name}: no weights file given, using random weights",
                stacklevel=2,
            )
        else:
            load_weights(model, self.weights)
        self._baseline = model.eval()
        return self._baseline
