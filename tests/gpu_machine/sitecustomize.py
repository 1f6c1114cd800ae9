"""A lent GPU machine's Python, as far as imports go: put this folder on PYTHONPATH and
the packages that machine lacks are not installed (an import fails, a probe such as
``importlib.util.find_spec`` finds nothing), nor is Frontier itself (``bench_gpu.py``
imports it from the checkout). torch, torchvision, onnx, onnxruntime, numpy, pandas and
their own dependencies are there."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any

LACKING = {
    "codecarbon", "matplotlib", "mlflow", "moocore", "optuna", "psycopg", "pydantic",
    "ray", "rich", "safetensors", "scipy", "sklearn", "tokenizers", "torch_pruning",
    "transformers", "yaml",
}  # fmt: skip


def _lacking(name: str) -> bool:
    top = name.split(".")[0]
    if top == "torch_pruning":  # bench_gpu.py carries it as a zip
        return not any(p.endswith("torch_pruning.zip") for p in sys.path)
    if top == "frontier":  # bench_gpu.py links the checkout's parts
        return not any("frontier-shim" in p for p in sys.path)
    return top in LACKING


class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if _lacking(name):
            raise ModuleNotFoundError(f"No module named {name!r} (not on the GPU machine)")
        return None


_find_spec = importlib.util.find_spec


def _probe(name: str, package: str | None = None) -> Any:
    return None if _lacking(name) else _find_spec(name, package)


importlib.util.find_spec = _probe
sys.meta_path.insert(0, _NotInstalled())
