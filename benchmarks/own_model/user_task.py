"""A task as a new user writes one from docs/tasks.md's "Your own model": torchvision's
MNASNet 0.5 with a one-channel stem, trained here on Fashion-MNIST images padded to
32x32 (the user's own data and model; no built-in task is used).

Run a search on it with ``frontier search benchmarks/own_model/mnasnet.yaml``.
"""

from __future__ import annotations

import gzip
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from frontier.experiments import Loaders, Task, cache_dir, register_task

ROOT = Path(os.environ.get("FASHION_ROOT", "/usr/share/datasets/fashion-mnist"))


def _idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def _images(name: str, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = _idx(ROOT / f"{name}-images-idx3-ubyte.gz")[:count]
    y = _idx(ROOT / f"{name}-labels-idx1-ubyte.gz")[:count]
    images = torch.from_numpy(x.copy()).float().div(255).sub(0.286).div(0.353)
    return F.pad(images.unsqueeze(1), (2, 2, 2, 2)), torch.from_numpy(y.astype(np.int64))


@register_task("own-mnasnet")
class OwnMnasnet(Task):
    """MNASNet 0.5 on 32x32 Fashion-MNIST: 10,000 training, 2,000 validation and 2,000
    test images."""

    name = "own-mnasnet"

    def __init__(self, *, epochs: int = 4, seed: int = 0) -> None:
        self.epochs, self.seed = epochs, seed
        self._data: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None
        self._model: nn.Module | None = None

    def data(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        if self._data is None:
            x, y = _images("train", 12_000)
            tx, ty = _images("t10k", 2_000)
            self._data = {"train": (x[:10_000], y[:10_000]), "val": (x[10_000:], y[10_000:]),
                          "test": (tx, ty)}  # fmt: skip
        return self._data

    def loaders(self, *, batch_size: int = 128) -> Loaders:
        d = self.data()
        shuffle = torch.Generator().manual_seed(self.seed)
        return Loaders(
            train=DataLoader(
                TensorDataset(*d["train"]), batch_size, shuffle=True, generator=shuffle
            ),
            val=DataLoader(TensorDataset(*d["val"]), batch_size),
            test=DataLoader(TensorDataset(*d["test"]), batch_size),
        )

    def example_inputs(self) -> torch.Tensor:
        return self.data()["train"][0][:1].clone()

    def new_model(self) -> nn.Module:
        torch.manual_seed(self.seed)
        model = torchvision.models.mnasnet0_5(num_classes=10)
        model.layers[0] = nn.Conv2d(1, 16, 3, stride=2, padding=1, bias=False)
        # torchvision's MNASNet keeps 0.9997 of its batch-norm statistics per step: after
        # a few epochs they still describe the initial weights, and the trained model
        # scored chance (Frontier's baseline check said so). PyTorch's default instead:
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.momentum = 0.1
        return model

    def baseline(self) -> nn.Module:
        # every worker builds the task and calls this: train once, then read the cache
        if self._model is not None:
            return self._model
        path = cache_dir() / f"{self.name}-bn-e{self.epochs}-s{self.seed}.pt"
        model = self.new_model()
        if path.exists():
            model.load_state_dict(torch.load(path, weights_only=True))
        else:
            start = time.perf_counter()
            opt = torch.optim.Adam(model.parameters(), lr=2e-3)
            for epoch in range(self.epochs):
                model.train()
                for x, y in self.loaders(batch_size=64).train:
                    opt.zero_grad()
                    F.cross_entropy(model(x), y).backward()
                    opt.step()
                print(f"epoch {epoch + 1}/{self.epochs} ({time.perf_counter() - start:.0f} s)",
                      file=sys.stderr)  # fmt: skip
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(), path)
        self._model = model.eval()
        return self._model
