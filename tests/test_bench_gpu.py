"""The GPU benchmark's dry run: ``prepare --quick``, ``measure --device cpu --quick`` and
``report`` on this machine, as on a GPU machine but with the CPU, so the script a lent
GPU runs cannot rot while none is lent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"
#: on PYTHONPATH, makes this Python lack what a lent GPU machine lacks
GPU_MACHINE = Path(__file__).resolve().parent / "gpu_machine"


@pytest.mark.slow
def test_the_gpu_benchmark_dry_run_writes_every_phase_and_both_reports(tmp_path) -> None:
    folder, out, logs = tmp_path / "gpu", tmp_path / "out", tmp_path / "logs"

    def step(*args: str, env: dict[str, str] | None = None) -> None:
        done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                              text=True, timeout=400, env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]

    step("prepare", str(folder), "--quick")
    prepared = json.loads((folder / "prepare.json").read_text())
    # everything measure needs is in the folder, and it is small enough to carry
    assert prepared["travel_mib"] < 40
    assert {"image-b1", "image-b2", "text-b1", "text-b2"} == set(prepared["bundles"])
    assert (folder / "torch_pruning.zip").stat().st_size > 10_000

    # measure runs with only what a GPU machine has: no Frontier installed, no optuna,
    # mlflow, scikit-learn, scipy, pydantic, yaml or Torch-Pruning
    there = {**os.environ, "PYTHONPATH": str(GPU_MACHINE)}
    start = time.monotonic()
    step("measure", str(folder), "--out", str(out), "--device", "cpu", "--quick", env=there)
    assert time.monotonic() - start < 180
    measured = json.loads((out / "measure.json").read_text())["phases"]
    assert set(measured) == {"selftest", "tables", "training", "energy"}
    assert not any("error" in phase for phase in measured.values())
    assert not any("error" in str(v) for v in measured["training"].values())
    checks = [v for v in measured["selftest"].values() if isinstance(v, dict) and "kind" in v]
    assert any(c["precision"] == "fp16" for c in checks)
    assert all(c["replay_vs_eager_rel_err"] < 1e-3 for c in checks)
    for name in prepared["bundles"]:
        assert measured["tables"][name]["rc"] == 0
        assert measured["tables"][name]["rows"].get("validation:ok", 0) >= 4

    step("report", str(folder), str(out), "--out-dir", str(logs))
    tables = json.loads((logs / "gpu-tables.json").read_text())
    assert tables["travel_mib"] == prepared["travel_mib"]
    for name, entry in tables["tables"].items():
        assert entry["validation"]["samples"] >= 4, name
        assert {"within_10pct", "mape", "kendall_tau"} <= set(entry["validation"]), name
    accel = json.loads((logs / "accelerator.json").read_text())
    assert set(accel["models"]) == {"mobilenet_v2", "resnet50", "text-student"}
    for model, row in accel["models"].items():
        assert row["trial_s_gpu"] > 0 and row["trial_s_cpu"] > 0, model
        assert any("speedup" in key for key in row), model

    # REPORT.md renders them, and says a dry run is not a GPU's figure
    sys.path.insert(0, str(SCRIPT.parent))
    from report_sections import logged_sections

    text = "\n".join(logged_sections(logs))
    assert "### The GPU path" in text and "a dry run, not a GPU" in text
    assert text.count("| text-b") == 2 and "| resnet50 |" in text
