"""ImageNet/CIFAR-style data from disk: an ImageFolder tree and a weights file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from frontier.spaces import recalibrate_bn

from ._tasks import Loaders, Task, TaskError, register_task
from ._training import pin_memory

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


#: Images per split of the synthetic stand-in data (no ``root``).
SYNTHETIC_IMAGES = {"train": 64, "val": 32, "test": 32}


@register_task("imagefolder")
class ImageFolderTask(Task):
    """Classification on an ImageFolder tree (``root/train/<class>/*.png``, ``root/val``,
    optionally ``root/test``) with a torchvision architecture.

    Without ``root`` the data is a seeded synthetic stand-in (Gaussian images with random
    labels, ``num_classes`` classes): enough to price and prune the architecture and to
    run zero-cost proxies against the teacher, meaningless for accuracy. ``trained`` is
    False then, and whenever ``weights`` is missing; the search then scores accuracy by
    the proxy rung only and says so.

    Args:
        root: the data directory, or None for synthetic data.
        model: a torchvision classification model name (``mobilenet_v2``, ``resnet50``).
        weights: a state-dict file for the model; without it the weights are random.
        image_size: side of the square crop fed to the model.
        num_classes: classes of the synthetic data (a root's classes are its folders).
        seed: seed of the training loader's shuffle and of the synthetic data.
    """

    name = "imagefolder"

    def __init__(
        self,
        *,
        model: str,
        root: str | None = None,
        weights: str | None = None,
        image_size: int = 224,
        num_classes: int = 10,
        seed: int = 0,
    ) -> None:
        self.root = Path(root) if root else None
        if self.root is not None:
            if not (self.root / "train").is_dir():
                raise TaskError(f"task.options.root: {self.root}/train is not a directory")
            if not (self.root / "val").is_dir():
                raise TaskError(f"task.options.root: {self.root}/val is not a directory")
        if image_size < 16:
            raise TaskError(f"task.options.image_size: must be >= 16, got {image_size}")
        self.model_name = model
        self.weights = weights
        self.image_size = image_size
        self.num_classes = num_classes
        self.seed = seed
        self._baseline: nn.Module | None = None

    @property
    def trained(self) -> bool:
        """Whether accuracy means anything: real data and a weights file."""
        return self.root is not None and self.weights is not None

    def limitations(self) -> list[str]:
        """What this task cannot measure, for the search to print and record."""
        missing = [
            what
            for what, absent in (
                ("an ImageFolder root (task.options.root)", self.root is None),
                ("a weights file (task.options.weights)", self.weights is None),
            )
            if absent
        ]
        if not missing:
            return []
        return [
            f"{self.model_name}: {' and '.join(missing)} not given: random weights"
            + (" and synthetic images" if self.root is None else "")
            + "; accuracy is the proxy rung only (agreement with the untrained teacher), "
            "not a real accuracy. Latency, size and MACs are real."
        ]

    def _dataset(self, split: str) -> Any:
        from torchvision import datasets, transforms

        if self.root is None:
            return _synthetic(split, self.image_size, self.num_classes, self.seed)

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
        if self.root is None:
            return [f"class{i}" for i in range(self.num_classes)]
        classes: list[str] = self._dataset("train").classes
        return classes

    def loaders(self, *, batch_size: int = 64) -> Loaders:
        gen = torch.Generator().manual_seed(self.seed)
        pin = pin_memory()
        has_test = self.root is None or (self.root / "test").is_dir()
        test_split = "test" if has_test else "val"
        return Loaders(
            train=DataLoader(
                self._dataset("train"),
                batch_size=batch_size,
                shuffle=True,
                generator=gen,
                pin_memory=pin,
            ),
            val=DataLoader(self._dataset("val"), batch_size=batch_size, pin_memory=pin),
            test=DataLoader(self._dataset(test_split), batch_size=batch_size, pin_memory=pin),
        )

    def example_inputs(self) -> torch.Tensor:
        return torch.zeros(1, 3, self.image_size, self.image_size)

    def baseline(self) -> nn.Module:
        if self._baseline is not None:
            return self._baseline
        import torchvision

        try:
            # seeded, so every worker process builds the same random-weight teacher
            with torch.random.fork_rng():
                torch.manual_seed(self.seed)
                model = torchvision.models.get_model(
                    self.model_name, weights=None, num_classes=len(self.classes)
                )
        except ValueError as err:
            raise TaskError(f"task.options.model: {err}") from err
        if self.weights is not None:
            load_weights(model, self.weights)
        else:
            # batch-norm statistics of its data, as training would give it: with the
            # initial ones (mean 0, variance 1) the teacher disagrees with any copy
            # whose statistics a proxy re-estimates, its own included
            recalibrate_bn(model, self.calibration_batches(batches=2, batch_size=32))
        self._baseline = model.eval()
        return self._baseline


def _synthetic(split: str, image_size: int, num_classes: int, seed: int) -> Any:
    """Seeded Gaussian images with random labels: a stand-in with the data's shape."""
    from torch.utils.data import TensorDataset

    offset = {"train": 0, "val": 1, "test": 2}[split]
    gen = torch.Generator().manual_seed(seed * 3 + offset)
    count = SYNTHETIC_IMAGES[split]
    x = torch.randn(count, 3, image_size, image_size, generator=gen)
    y = torch.randint(0, num_classes, (count,), generator=gen)
    return TensorDataset(x, y)
