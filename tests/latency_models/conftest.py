"""A tiny digits-MLP space, its bundle and its measured table, shared by the tests."""

from __future__ import annotations

import pytest

from frontier.experiments import DigitsTask
from frontier.latency_models import (
    DeviceMeta,
    DeviceStore,
    DeviceTable,
    measure_bundle,
    space_ops,
    write_bundle,
)
from frontier.spaces import SpaceOptions, discover


@pytest.fixture(scope="session")
def mlp_setup():
    task = DigitsTask(model="mlp")
    model = task.baseline()
    x = task.example_inputs()
    options = SpaceOptions(
        prune_ratios=(0.0, 0.5), weight_bits=(8, 32), act_bits=(8, 32), round_to=8
    )
    space = discover(model, x, options)
    return task, model, x, space


@pytest.fixture(scope="session")
def bundle(mlp_setup, tmp_path_factory):
    task, model, x, space = mlp_setup
    path = tmp_path_factory.mktemp("bundle") / "ops.zip"
    manifest = write_bundle(
        path,
        model=model,
        example_inputs=x,
        space=space,
        calibration=8,
        validation=3,
        calibration_data=task.calibration_batches(),
    )
    return path, manifest


@pytest.fixture(scope="session")
def measured(bundle, tmp_path_factory):
    path, manifest = bundle
    out = tmp_path_factory.mktemp("table") / "table.csv"
    measure_bundle(path, out, device="test-cpu", rounds=3, round_s=0.01)
    return out, manifest


@pytest.fixture
def store(tmp_path) -> DeviceStore:
    return DeviceStore(tmp_path / "store")


@pytest.fixture(scope="session")
def ops(mlp_setup):
    _, model, x, space = mlp_setup
    return space_ops(model, x, space)


@pytest.fixture
def table(measured, store: DeviceStore) -> DeviceTable:
    out, manifest = measured
    return store.import_table(
        out,
        name="test-cpu",
        manifest=manifest,
        meta=DeviceMeta(active_power_w=10.0, transfer_gbps=2.0),
    )
