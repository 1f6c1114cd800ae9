"""Local devices are one object each, resolved through one registry: the built-in CPU
and GPU names, and any device a user registers; every caller that times or prices
takes the device."""

import dataclasses

import pytest
import torch
import yaml

from frontier.latency_models import (
    DeviceStore,
    DeviceUnavailable,
    LocalDevice,
    Runtime,
    ensure_local_table,
    local_device,
    measure_local,
    register_local,
    register_runtime,
    whole_model_bytes,
)
from frontier.latency_models.device import _devices
from frontier.latency_models.measure._local import table_device
from frontier.latency_models.runner import OrtBackend
from frontier.search.cli import main
from frontier.spaces import CompressionPlan
from tests.latency_models.measure.test_cli import CONFIG


@pytest.mark.parametrize(
    ("name", "kind", "threads", "batch"),
    [
        ("local-cpu", "cpu", 1, 1),
        ("local-cpu-4t", "cpu", 4, 1),
        ("local-cuda", "cuda", 1, 1),
        ("local-cuda-b32", "cuda", 1, 32),
        ("local-openvino", "openvino", 1, 1),
        ("local-openvino-2t", "openvino", 2, 1),
    ],
)
def test_builtin_names(name: str, kind: str, threads: int, batch: int) -> None:
    device = local_device(name)
    assert device is not None and device.name == name
    assert (device.kind, device.threads, device.batch_size) == (kind, threads, batch)
    # a GPU runs 16-bit layers in FP16 and no INT8 (no GPU runtime here has INT8
    # kernels); a CPU runtime runs INT8 (OpenVINO's exported as QDQ), and 16-bit layers
    # in FP32 as they are exported for it
    assert ("int8" in device.precisions) == (kind != "cuda")
    assert device.half == (kind == "cuda")
    assert device.int8_qdq == (kind == "openvino")


@pytest.mark.parametrize("name", ["local-cpu-0t", "local-cuda-b0", "local-gpu", "pi4"])
def test_other_names_are_stored_tables(name: str) -> None:
    assert local_device(name) is None


class CountingBackend(OrtBackend):
    """ONNX Runtime on the CPU, counting the models it opens."""

    opened = 0

    def open(self, *args, **kwargs):
        CountingBackend.opened += 1
        return super().open(*args, **kwargs)


class Counting(Runtime):
    """A runtime of its own: ONNX Runtime on this CPU, counting the models it opens. Its
    devices are plain ``LocalDevice`` objects of its kind: nothing else is subclassed."""

    kind = "counted"
    names = "local-counted"

    def resolve(self, name):
        return LocalDevice(name, kind=self.kind) if name == "local-counted" else None

    def backend(self, device):
        return CountingBackend(device.provider, device.threads)


def test_a_new_device_kind_is_one_registration(monkeypatch, mlp_setup, tmp_path) -> None:
    monkeypatch.setattr(_devices, "_RESOLVERS", list(_devices._RESOLVERS))
    monkeypatch.setattr(_devices, "_RUNTIMES", dict(_devices._RUNTIMES))
    register_runtime(Counting())
    assert "local-counted" in _devices.local_names()
    task, model, x, space = mlp_setup
    store = DeviceStore(tmp_path / "store")
    table = ensure_local_table(
        model, x, space, store=store, name="local-counted", calibration=8,
        calibration_data=task.calibration_batches(), rounds=1, round_s=0.002,
    )  # fmt: skip
    # the table was measured by the registered device's backend, and is stored by name
    opened = CountingBackend.opened
    assert opened >= len(table.rows) and store.names() == ["local-counted"]
    # measuring a model again goes through the same device
    device = table_device(table)
    assert device.kind == "counted" and isinstance(device.runtime, Counting)
    ms = measure_local(whole_model_bytes(model, CompressionPlan(), x), device=device)
    assert ms > 0 and CountingBackend.opened == opened + 1
    # ... and a search resolves it as a device measured here: the stored table
    from frontier.search import TrialRunner, parse_config

    config = parse_config({**CONFIG, "devices": ["local-counted"]})
    evaluation = TrialRunner(config, store=store)
    assert evaluation.tables["local-counted"].rows == store.load("local-counted").rows
    assert CountingBackend.opened == opened + 1  # found, not measured again


def test_devices_that_run_alike_are_one_device() -> None:
    one = local_device("local-cpu")
    assert one is not None and one.runs_like(LocalDevice("local-cpu-1t", threads=1))
    assert not one.runs_like(local_device("local-cpu-2t"))
    assert not one.runs_like(local_device("local-cuda"))
    assert not one.runs_like(None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_gpu_device_without_a_gpu_is_refused_in_one_line(mlp_setup, tmp_path, capsys) -> None:
    _task, model, x, space = mlp_setup
    with pytest.raises(DeviceUnavailable, match=r"torch.cuda.is_available\(\) is False"):
        ensure_local_table(model, x, space, store=DeviceStore(tmp_path), name="local-cuda-b32")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    code = main(["lut", "validate", "--device", "local-cuda", str(config), "--store",
                 str(tmp_path / "store"), "--out", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "local-cuda" in err and "PyTorch sees none" in err


def test_a_batched_device_prices_ops_at_its_batch(mlp_setup) -> None:
    from frontier.latency_models import space_ops

    _, model, x, space = mlp_setup
    one = space_ops(model, x, space).ops
    many = space_ops(model, x, space, batch_size=32).ops
    # the same ops, each at batch 32: other keys, 32x the work
    assert len(one) == len(many) and not {s.key for s in one} & {s.key for s in many}
    assert sum(s.macs for s in many) == 32 * sum(s.macs for s in one)


def test_a_gpu_table_states_the_power_its_counter_measured(tmp_path) -> None:
    from frontier.latency_models.measure._local import device_power_w

    out = tmp_path / "t.csv"
    out.write_text(
        "kind,status,median_ms,energy_mj\n"
        "op,ok,0.1,\n"
        "calibration,ok,2.0,400\n"  # 200 W
        "calibration,ok,1.0,250\n"  # 250 W
        "validation,ok,4.0,1200\n"  # 300 W
        "calibration,unsupported,,\n"
    )
    gpu, cpu = local_device("local-cuda"), local_device("local-cpu")
    assert gpu is not None and cpu is not None
    power, source = device_power_w(gpu, out)
    assert power == pytest.approx(250.0) and "NVML" in source and "3 whole models" in source
    # a row's energy is taken over its replays' own time (host_ms) where it has one
    out.write_text(
        "kind,status,median_ms,energy_mj,host_ms\n"
        "calibration,ok,2.0,400,1.0\n"  # 400 W over its own window (200 W by its median)
        "calibration,ok,1.0,250,\n"
        "validation,ok,4.0,1200,\n"
    )
    assert device_power_w(gpu, out)[0] == pytest.approx(300.0)
    out.write_text("kind,status,median_ms,energy_mj\ncalibration,ok,2.0,\n")
    assert device_power_w(gpu, out)[0] is None  # no counter: unknown, not made up
    power, source = device_power_w(cpu, out)
    assert power > 0 and "CodeCarbon" in source


@dataclasses.dataclass(frozen=True)
class TorchCpuDevice(LocalDevice):
    """The GPU pipeline end to end on this CPU: PyTorch's graph backend (eager here, no
    CUDA graph), batch 8, 16-bit layers in FP16, energy from a fake 40 W counter."""

    def backend(self):
        from frontier.latency_models import runner_torch

        state = {"mj": 0.0, "t": None}

        def counter() -> float:
            import time

            now = time.perf_counter()
            state["mj"] += 40_000.0 * (now - (state["t"] or now))  # 40 W: 40 J a second
            state["t"] = now
            return state["mj"]

        return runner_torch.GraphBackend("cpu", energy=counter, energy_window_s=0.02)


def test_a_gpu_like_device_measures_and_prices_at_its_batch_and_precision(
    monkeypatch, tmp_path
) -> None:
    from frontier.experiments import DigitsTask
    from frontier.spaces import SpaceOptions, discover

    monkeypatch.setattr(_devices, "_RESOLVERS", list(_devices._RESOLVERS))
    device = TorchCpuDevice("torch-cpu-b8", batch_size=8, precisions=("fp32", "fp16"))
    register_local(lambda name: device if name == device.name else None)
    task = DigitsTask(model="mlp")
    model, x = task.new_model().eval(), task.example_inputs()
    space = discover(model, x, SpaceOptions(prune_ratios=(0.0, 0.5), weight_bits=(16, 32),
                                            act_bits=(32,)))  # fmt: skip
    table = ensure_local_table(
        model, x, space, store=DeviceStore(tmp_path), name=device.name, calibration=8,
        calibration_data=task.calibration_batches(), rounds=1, round_s=0.002,
    )  # fmt: skip
    assert table.meta["op_batch_size"] == 8 and table.meta["half"] is True
    whole = [r for r in table.rows if r.kind in ("calibration", "baseline")]
    assert whole and all(r.eager_ms > 0 and r.host_ms > 0 for r in whole)
    assert all(r.energy_mj is not None and r.energy_mj > 0 for r in whole)
    assert table.active_power_w == pytest.approx(40.0, rel=0.2)  # read from the counter
    assert "measured" in table.meta["power_source"]
    # every op of a plan the device prices is a row it measured (batch 8, FP16 where 16)
    from frontier.latency_models import LatencyModel

    lm = LatencyModel(table)
    lm.bind(model, x, space)
    names = [q.name for q in space.layers]
    plan = CompressionPlan(weight_bits=dict.fromkeys(names, 16))
    estimate = lm.predict(model, plan)
    assert estimate.coverage["fallback"] == 0 and estimate.latency_ms > 0
    assert all(c.key.split("|")[1].startswith("in=8x") for c in estimate.ops if "in=" in c.key)
    assert any(c.key.endswith("|fp16") for c in estimate.ops)
    # energy: the counter's power times the latency
    assert estimate.energy_mj == pytest.approx(estimate.latency_ms * table.active_power_w)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_search_on_a_missing_gpu_stops_before_building_its_task(
    tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the study and MLflow files a search would write
    config = tmp_path / "gpu.yaml"
    objectives = ["accuracy", "latency_ms@local-cpu", "latency_ms@local-cuda"]
    store = str(tmp_path / "store")
    config.write_text(yaml.safe_dump({**CONFIG, "objectives": objectives, "device_store": store}))
    code = main(["search", str(config)])
    err = capsys.readouterr().err
    assert code == 2 and "local-cuda is timed on this machine's CUDA GPU" in err
    assert "building" not in err  # refused before the task (and its baseline) is built
    assert not (tmp_path / "store").exists()


def test_a_gpu_device_claims_only_the_precisions_a_plan_can_export() -> None:
    """FP16 is exported (``export_onnx(half=True)``) and priced; BF16 and INT8 are
    neither, so ``local-cuda`` does not list them."""
    from frontier.latency_models import local_device

    for name in ("local-cuda", "local-cuda-b32"):
        assert local_device(name).precisions == ("fp32", "fp16")
