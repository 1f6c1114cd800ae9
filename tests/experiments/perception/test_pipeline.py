"""The perception-pipeline experiment, shrunk: three scene tasks (detection,
segmentation, depth) on a few scenes, searched as one pipeline end to end, each stage
fine-tuned and scored by its own metric."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from frontier.experiments import builtin_configs, write_idx
from frontier.search import PipelineSearch, load_config


def _fashion(root: Path) -> Path:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True)
    for split, n in (("train", 120), ("t10k", 30)):
        items = np.zeros((n, 28, 28), np.uint8)
        for i in range(n):
            y0, x0 = rng.integers(0, 8, 2)
            items[i, y0 : 28 - rng.integers(0, 8), x0 : 28 - rng.integers(0, 8)] = 200
        write_idx(root / f"{split}-images-idx3-ubyte", items)
        write_idx(root / f"{split}-labels-idx1-ubyte", rng.integers(0, 10, n).astype(np.uint8))
    return root


@pytest.mark.slow
def test_the_perception_pipeline_searches_its_three_stages_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FRONTIER_CACHE_DIR", str(tmp_path / "cache"))
    data = yaml.safe_load(builtin_configs()["perception-pipeline"].read_text())
    root = _fashion(tmp_path / "fashion")
    tiny = {"epochs": 1, "scenes": {"train": 32, "val": 16, "test": 8}, "root": str(root)}
    for stage in data["pipeline"]["stages"]:
        stage["task"]["options"] = tiny
        stage["accuracy"] = {"steps": 2, "batch_size": 8}
        stage["space"] = {"prune_ratios": [0.0, 0.5], "weight_bits": [32], "act_bits": [32]}
    data["devices"] = ["local-cpu"]
    data["device_store"] = str(tmp_path / "store")
    data["local_table"] = {"calibration": 0, "round_s": 0.01}
    data["search"] |= {"sampler": "random", "trials": 3}
    data["tracking"] = {"export_front": False}
    path = tmp_path / "perception.yaml"
    path.write_text(yaml.safe_dump(data))
    search = PipelineSearch(load_config(path))
    result = search.run()
    assert [t.state for t in result.trials] == ["complete"] * 3
    base = result.baseline.values
    for stage in ("det", "seg", "depth"):
        # each stage scored by its own metric, in [0, 1], fine-tuned at the short rung
        assert 0.0 <= base[f"{stage}.accuracy"] <= 1.0
        assert base[f"{stage}.latency_ms"] > 0
    assert base["latency_ms@frame"] == pytest.approx(
        sum(base[f"{s}.latency_ms"] for s in ("det", "seg", "depth"))
    )  # one device: the stages run one after another
    assert result.evaluations["det"] >= 1 and result.measured  # the front ran here
