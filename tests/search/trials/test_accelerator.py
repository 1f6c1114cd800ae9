"""Where trials train: ``backend.accelerator`` resolved per worker, models and batches
placed there, the device recorded; on a machine without a GPU nothing changes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from frontier.search import ConfigError, load_config, run
from frontier.search.trials._accelerator import resolve
from frontier.spaces import CPU, Accelerator

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")


@no_gpu
def test_auto_and_cpu_resolve_to_the_cpu_without_a_gpu() -> None:
    assert resolve("auto") == CPU
    assert resolve("cpu") == CPU
    assert resolve("auto", "off") == CPU
    # bf16 asked for on the CPU is the user's choice
    assert resolve("cpu", "bf16") == Accelerator("cpu", bf16=True)


@no_gpu
def test_cuda_without_a_gpu_names_the_field_and_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"backend.accelerator is 'cuda'.*has no GPU.*'auto'"):
        resolve("cuda", where="worker 0")
    # the driver whose trials run in workers never needs one
    assert resolve("cuda", required=False) == CPU


def test_a_ray_task_without_an_assigned_gpu_trains_on_the_cpu() -> None:
    # gpus=0: Ray assigned this task no GPU (gpus_per_trial 0), whatever the node has
    assert resolve("auto", gpus=0) == CPU
    with pytest.raises(ConfigError, match="has no GPU"):
        resolve("cuda", gpus=0, where="this Ray task")


def test_workers_share_the_gpus_round_robin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Test GPU")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    picked = [resolve("auto", slot=s, gpus=2).device for s in range(5)]
    assert picked == ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"]
    found = resolve("cuda:1", "off", slot=0, gpus=2)
    assert found == Accelerator("cuda:1", bf16=False, name="Test GPU")
    assert resolve("cuda", slot=1, gpus=2).describe() == "cuda:1 (Test GPU, bf16)"
    with pytest.raises(ConfigError, match=r"sees 2 GPU\(s\)"):
        resolve("cuda:2", gpus=2)


def test_the_config_refuses_an_unknown_accelerator(write_config) -> None:
    with pytest.raises(ConfigError, match="backend.accelerator"):
        load_config(write_config(backend={"accelerator": "gpu"}))
    with pytest.raises(ConfigError, match="backend.mixed_precision"):
        load_config(write_config(backend={"mixed_precision": "fp8"}))


@no_gpu
def test_cpu_and_auto_run_the_same_trials_and_record_the_device(write_config) -> None:
    """A search with ``accelerator: cpu`` and one with ``auto`` on a machine without a
    GPU: the same plans, the same accuracies, each trial's run tagged ``cpu``."""
    results = []
    for setting in ("cpu", "auto"):
        path = write_config(f"{setting}.yaml", name=setting, backend={"accelerator": setting})
        results.append(run(path, trials=6, progress=False))
    cpu, auto = (r.trials.sort_values("trial").reset_index(drop=True) for r in results)
    assert cpu[["trial", "accuracy", "size_bytes"]].equals(
        auto[["trial", "accuracy", "size_bytes"]]
    )
    client = MlflowClient(tracking_uri=f"sqlite:///{Path.cwd() / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("cpu")
    runs = client.search_runs([experiment.experiment_id], "tags.`frontier.trial` != ''")
    assert len(runs) == 6
    assert {r.data.tags.get("frontier.train_device") for r in runs} == {"cpu"}


def test_the_training_loop_trains_under_bf16_autocast_and_hands_back_fp32() -> None:
    """The shared training loop on an accelerator with bf16 autocast (the CPU's, here):
    it learns, and the model comes back on the CPU in FP32."""
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from frontier.experiments import fit, use_accelerator

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=gen)
    y = (x[:, 0] > 0).long()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    val = DataLoader(TensorDataset(x[:128], y[:128]), batch_size=64)
    with use_accelerator(Accelerator("cpu", bf16=True)):
        best = fit(
            model,
            lambda epoch: [(x[i : i + 64], y[i : i + 64]) for i in range(0, 512, 64)],
            val,
            epochs=3,
            opt=opt,
            loss_fn=nn.CrossEntropyLoss(),
        )
    assert best > 0.9
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in model.parameters())
