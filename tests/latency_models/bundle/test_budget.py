"""A first table's calibration within a time budget: as many whole models as fit, at
least ``BUDGET_MIN_MODELS`` (a small model's default: at least ``CALIBRATION_MODELS``),
the same seeded plans as a bundle of that many, the budget spent as estimated."""

from __future__ import annotations

import json
import zipfile

from frontier.latency_models import write_bundle
from frontier.latency_models.bundle._bundle import BUDGET_MIN_MODELS, CALIBRATION_MODELS
from frontier.latency_models.bundle._corners import calibration_plans
from frontier.latency_models.bundle._whole import timing_calibration


def _calibration(manifest: dict) -> list[dict]:
    return [m for m in manifest["models"] if m["kind"] == "calibration"]


def test_a_tight_budget_keeps_the_minimum_of_the_same_plans(mlp_setup, tmp_path, capsys) -> None:
    task, model, x, space = mlp_setup
    common = {"model": model, "example_inputs": x, "space": space}
    data = task.calibration_batches()
    cut = write_bundle(
        tmp_path / "cut.zip", **common, calibration_data=data, calibration_budget_s=0.01
    )
    assert "calibration: 30 of 200 whole models" in capsys.readouterr().err
    models = _calibration(cut)
    assert len(models) == BUDGET_MIN_MODELS
    seeds = [seed for seed, _ in calibration_plans(space, BUDGET_MIN_MODELS, 10_000)]
    assert [m["seed"] for m in models] == seeds
    # the models timed for the estimate are the ones a bundle of 30 holds
    plain = write_bundle(
        tmp_path / "plain.zip", **common, calibration=BUDGET_MIN_MODELS, calibration_data=data
    )
    assert [m["plan"] for m in _calibration(plain)] == [m["plan"] for m in models]
    with zipfile.ZipFile(tmp_path / "cut.zip") as a, zipfile.ZipFile(tmp_path / "plain.zip") as b:
        assert json.loads(a.read("manifest.json"))["bundle_id"] == plain["bundle_id"]
        for m in models[:3]:
            assert a.read(m["file"]) == b.read(m["file"])


def test_a_count_given_is_kept_whatever_the_budget(mlp_setup, tmp_path) -> None:
    _, model, x, space = mlp_setup
    manifest = write_bundle(
        tmp_path / "b.zip",
        model=model,
        example_inputs=x,
        space=space,
        calibration=8,
        calibration_budget_s=0.01,
    )
    assert len(_calibration(manifest)) == 8


def test_timing_calibration_is_one_small_batch() -> None:
    import torch

    batches = [(torch.zeros(128, 4), torch.zeros(128)), (torch.ones(128, 4), torch.ones(128))]
    (x, y), *rest = timing_calibration(batches)
    assert not rest and x.shape == (8, 4) and y.shape == (8,)
    ids = timing_calibration([({"input_ids": torch.zeros(64, 12)}, torch.zeros(64))])
    assert ids[0][0]["input_ids"].shape == (8, 12)
    assert timing_calibration(None) is None and timing_calibration([]) is None


def test_a_small_models_first_table_keeps_at_least_60(mlp_setup, store, monkeypatch, capsys):
    """A search's first local-cpu table of a small model, count and budget left to
    their defaults, keeps as many of its 200 calibration models as fit the small-model
    budget: here none fit, and it keeps 60."""
    from frontier.latency_models import ensure_local_table
    from frontier.latency_models.bundle import _bundle

    _, model, x, space = mlp_setup
    monkeypatch.setattr(_bundle, "SMALL_MODEL_CALIBRATION_S", 0.01)
    table = ensure_local_table(model, x, space, store=store, calibration_data=[x])
    assert "calibration: 60 of 200 whole models" in capsys.readouterr().err
    assert len(table.whole_models("calibration")) == CALIBRATION_MODELS


def test_the_estimate_is_the_time_the_runner_spends(mlp_setup) -> None:
    """``calibration_measure_s`` of a whole model is within a factor of 3 of what timing it by the
    protocol and profiling it take (the budget's estimate of each model's measuring)."""
    import time

    from frontier.latency_models.bundle._whole import whole_model_bytes
    from frontier.latency_models.runner import (
        calibration_measure_s,
        open_session,
        profile_nodes,
        session_options,
        time_models,
    )

    _, model, x, space = mlp_setup
    data = whole_model_bytes(model, space.sample(3), x)
    estimate = calibration_measure_s(data)
    start = time.perf_counter()
    run, feeds = open_session(data, session_options(1))
    time_models([run])
    profile_nodes(data, feeds, 1, "CPUExecutionProvider")
    took = time.perf_counter() - start
    assert took / 3 < estimate < took * 3


def test_whole_models_too_large_for_two_builders_are_built_one_at_a_time(
    mlp_setup, monkeypatch
) -> None:
    """Each builder of a bundle's whole models takes a few times its model's weights
    (regnet_y_128gf: two forked builders went past 20 GB): where two do not fit the
    memory free, the models are built one at a time, in this process."""
    import os

    from frontier.latency_models.bundle import _whole

    _, model, x, space = mlp_setup
    plans = [space.sample(s) for s in (1, 2, 3)]
    built_in: list[int] = []
    real = _whole.whole_model_bytes

    def spy(*args, **kwargs):  # the real build; where it ran is recorded here only
        built_in.append(os.getpid())
        return real(*args, **kwargs)

    monkeypatch.setattr(_whole, "whole_model_bytes", spy)
    monkeypatch.setattr(_whole, "BUILD_MEMORY_PER_WEIGHT", 1e15)
    alone = list(_whole.build_whole(model, plans, x, None))
    assert built_in == [os.getpid()] * 3
    if (os.cpu_count() or 1) >= 2:
        monkeypatch.setattr(_whole, "BUILD_MEMORY_PER_WEIGHT", 4.0)
        built_in.clear()
        assert list(_whole.build_whole(model, plans, x, None)) == alone
        assert built_in == []  # built by forked workers, as a small model's are
