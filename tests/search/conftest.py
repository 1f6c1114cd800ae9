"""Small search configs written to a temporary working directory."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

BASE: dict[str, Any] = {
    "name": "tiny",
    "task": {"name": "digits", "options": {"model": "mlp"}},
    "space": {
        "prune_ratios": [0.0, 0.5, 0.75],
        "weight_bits": [4, 8, 32],
        "act_bits": [32],
        "round_to": 8,
    },
    "objectives": [{"name": "accuracy", "options": {"steps": 20}}, "size_bytes"],
    "constraints": ["size_bytes <= 60000"],
    "search": {
        "trials": 12,
        "population": 4,
        "seed": 0,
        "fidelity": {"rungs": ["proxy", "short"], "promote": 0.5},
    },
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory: mlflow.db and the Optuna journal land here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def write_config(workdir: Path):
    def write(filename: str = "tiny.yaml", **over: Any) -> Path:
        path = workdir / filename
        path.write_text(yaml.safe_dump(_merge(BASE, over)))
        return path

    return write
