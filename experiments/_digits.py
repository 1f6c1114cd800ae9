"""The built-in ``digits`` task: scikit-learn's 8x8 digits, an MLP or a small CNN.

The data ships inside scikit-learn, so nothing is downloaded. Baselines train here in
seconds and are cached on disk, keyed by a hash of the recipe: a changed recipe retrains.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from frontier.spaces import CNN_CHANNELS, MLP_HIDDEN, StudentSpec, build_student

from ._tasks import Loaders, TaskError, TensorTask, cache_dir, register_task
from ._training import fit

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipe:
    """Everything that determines a trained baseline; its hash names the cache file."""

    family: str
    epochs: int = 40
    lr: float = 3e-3
    weight_decay: float = 1e-4
    label_smoothing: float = 0.1
    batch_size: int = 64
    seed: int = 0
    architecture: tuple[int, ...] = ()
    split_seed: int = 0

    def key(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_digits_splits(seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Digits as (N, 1, 8, 8) floats in [0, 1], split 60/20/20 (stratified, seeded)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = (data.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = data.target.astype(np.int64)
    x_train, x_rest, y_train, y_rest = train_test_split(
        x, y, test_size=0.4, random_state=seed, stratify=y
    )
    x_val, x_test, y_val, y_test = train_test_split(
        x_rest, y_rest, test_size=0.5, random_state=seed, stratify=y_rest
    )
    return {
        "train": (torch.from_numpy(x_train), torch.from_numpy(y_train)),
        "val": (torch.from_numpy(x_val), torch.from_numpy(y_val)),
        "test": (torch.from_numpy(x_test), torch.from_numpy(y_test)),
    }


def train_classifier(model: nn.Module, loaders: Loaders, recipe: Recipe) -> float:
    """Train with AdamW and label-smoothed cross-entropy; keep the best validation epoch.

    Returns:
        The best validation accuracy.
    """
    torch.manual_seed(recipe.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    return fit(
        model,
        lambda epoch: loaders.train,
        loaders.val,
        epochs=recipe.epochs,
        opt=opt,
        loss_fn=nn.CrossEntropyLoss(label_smoothing=recipe.label_smoothing),
        sched=torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=recipe.epochs),
        sched_per="epoch",
    )


class SwishBeta(nn.Module):
    """Swish with a learned slope, ``x * sigmoid(beta * x)``: a custom activation that
    many accelerators cannot run (it exports to ONNX as Mul, Sigmoid, Mul)."""

    def __init__(self, beta: float = 1.0) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.tensor(beta))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.beta * x)


#: Digits baselines: the family's student architecture, and for ``cnn-swish`` the CNN
#: with every ReLU a ``SwishBeta``.
DIGITS_MODELS = ("mlp", "cnn", "cnn-swish")


@register_task("digits")
class DigitsTask(TensorTask):
    """scikit-learn's digits (1,797 8x8 images, 10 classes) with an MLP or CNN baseline.

    Args:
        model: baseline, "mlp", "cnn" or "cnn-swish" (the CNN with SwishBeta activations).
        seed: seed of the data split and of training.
        epochs: training epochs of the baseline.
    """

    name = "digits"
    num_classes = 10

    def __init__(self, *, model: str = "mlp", seed: int = 0, epochs: int = 40) -> None:
        if model not in DIGITS_MODELS:
            raise TaskError(
                f"task.options.model: digits has {', '.join(DIGITS_MODELS)}, got {model!r}"
            )
        self.family = model
        self.seed = seed
        self.recipe = Recipe(
            family=model,
            epochs=epochs,
            seed=seed,
            split_seed=seed,
            architecture=MLP_HIDDEN if model == "mlp" else CNN_CHANNELS,
        )

    def load_splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        return load_digits_splits(self.seed)

    def untrained(self) -> nn.Module:
        return self.new_model()

    def new_model(self) -> nn.Module:
        """A freshly initialised baseline architecture (seeded)."""
        torch.manual_seed(self.seed)
        model = build_student(
            StudentSpec(self.family.removesuffix("-swish")),
            num_classes=self.num_classes,
            example_inputs=self.example_inputs(),
        )
        if self.family.endswith("-swish"):
            features = model.features
            assert isinstance(features, nn.Sequential)
            for i, layer in enumerate(features):
                if isinstance(layer, nn.ReLU):
                    features[i] = SwishBeta()
        return model

    def cache_path(self) -> Path:
        return cache_dir() / f"digits-{self.family}-{self.recipe.key()}.pt"

    def train_baseline(self, model: nn.Module) -> None:
        start = time.perf_counter()
        print(
            f"training the digits {self.family} baseline (cached at {self.cache_path()}) ...",
            file=sys.stderr,
        )
        val_acc = train_classifier(
            model, self.loaders(batch_size=self.recipe.batch_size), self.recipe
        )
        took_s = time.perf_counter() - start
        print(f"trained in {took_s:.1f} s, validation accuracy {val_acc:.4f}", file=sys.stderr)
