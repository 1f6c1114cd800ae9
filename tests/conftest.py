"""Shared fixtures: small models built here, a per-session baseline cache."""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

warnings.filterwarnings("ignore", category=UserWarning, module="torch.onnx")


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Baselines train once per test session into a private cache.
    path = tmp_path_factory.mktemp("frontier-cache")
    os.environ["FRONTIER_CACHE_DIR"] = str(path)
    # Device tables the tests measure (and learn into) stay out of the user's own store.
    os.environ["FRONTIER_DATA_DIR"] = str(tmp_path_factory.mktemp("frontier-data"))
    return path


@pytest.fixture
def sigint_as_at_a_terminal() -> Iterator[None]:
    """SIGINT as a terminal's foreground process gets it (Python's KeyboardInterrupt
    handler). A shell's background job starts with SIGINT ignored, and Python then
    leaves it ignored: a test of Ctrl-C run that way (``pytest &``, CI under nohup)
    must not inherit it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


class SmallCNN(nn.Module):
    """A CNN with a residual add and a concatenation, to exercise coupled channels."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.a = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.b = nn.Conv2d(16, 24, 1)
        self.c = nn.Conv2d(16, 8, 1)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x + self.a(x)
        x = torch.cat([self.b(x), self.c(x)], dim=1)
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


@pytest.fixture
def small_cnn() -> SmallCNN:
    torch.manual_seed(0)
    return SmallCNN().eval()


@pytest.fixture
def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Flatten(), nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, 10)
    ).eval()
