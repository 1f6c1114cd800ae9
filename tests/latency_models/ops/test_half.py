"""Half precision priced as a GPU runs it: a device whose 16-bit layers run in FP16
measures FP16 op models (weights FP16, casts in and out, as ``export_onnx(half=True)``
writes each layer) and predicts a plan through them; a CPU keeps pricing them FP32."""

import dataclasses

import numpy as np
import onnx
import pytest

from frontier.experiments import DigitsTask
from frontier.latency_models import (
    DeviceStore,
    LatencyModel,
    LocalDevice,
    ensure_local_table,
    plan_ops,
    register_local,
    runner,
    runner_torch,
    space_ops,
)
from frontier.latency_models.device import _devices
from frontier.latency_models.ops._op_models import op_model_bytes
from frontier.spaces import CompressionPlan, SpaceOptions, discover


@pytest.fixture(scope="module")
def half_setup():
    task = DigitsTask(model="mlp")
    model, x = task.new_model().eval(), task.example_inputs()
    options = SpaceOptions(prune_ratios=(0.0, 0.5), weight_bits=(16, 32), act_bits=(32,))
    return task, model, x, discover(model, x, options)


def _sixteen_bit(space) -> CompressionPlan:
    names = [q.name for q in space.layers]
    return CompressionPlan(weight_bits=dict.fromkeys(names, 16))


def test_a_half_device_prices_16_bit_layers_at_fp16(half_setup) -> None:
    _, model, x, space = half_setup
    plan = _sixteen_bit(space)
    cpu = space_ops(model, x, space)
    gpu = space_ops(model, x, space, batch_size=1, half=True)
    assert not any(s.precision == "fp16" for s in cpu.ops)  # a CPU: FP32, as exported
    fp16 = [s for s in gpu.ops if s.precision == "fp16"]
    assert fp16 and all(s.weighted for s in fp16)
    priced = plan_ops(gpu.templates["teacher"], plan)
    weighted = [s for s in priced if s.weighted]
    assert weighted and all(s.precision == "fp16" for s in weighted)
    assert all(s.precision == "fp32" for s in plan_ops(cpu.templates["teacher"], plan))


def test_an_fp16_op_model_is_what_the_export_writes_and_runs(half_setup) -> None:
    _, model, x, space = half_setup
    spec = next(s for s in space_ops(model, x, space, half=True).ops if s.precision == "fp16")
    data = op_model_bytes(spec)
    graph = onnx.load_from_string(data).graph
    assert [n.op_type for n in graph.node][:2] == ["Cast", spec.op_type]
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in graph.initializer)
    # ONNX Runtime's CPU provider and the PyTorch runner both run it, and agree
    run, _ = runner.open_session(data, runner.session_options(1))
    want = run()[0]
    got, _ = runner_torch.TorchBackend("cpu").open(
        data, {}, batch_size=1, rng=np.random.default_rng(0)
    )
    np.testing.assert_allclose(got()[0].float().numpy(), want, rtol=2e-2, atol=2e-2)


@dataclasses.dataclass(frozen=True)
class HalfCpu(LocalDevice):
    """A device timed by ONNX Runtime on this CPU whose 16-bit layers run FP16."""


def test_a_half_table_predicts_through_its_fp16_rows(half_setup, monkeypatch, tmp_path) -> None:
    task, model, x, space = half_setup
    monkeypatch.setattr(_devices, "_RESOLVERS", list(_devices._RESOLVERS))
    register_local(
        lambda name: HalfCpu(name, precisions=("fp32", "fp16")) if name == "half-cpu" else None
    )
    store = DeviceStore(tmp_path)
    table = ensure_local_table(
        model, x, space, store=store, name="half-cpu", calibration=8,
        calibration_data=task.calibration_batches(), rounds=1, round_s=0.002,
    )  # fmt: skip
    assert table.meta["half"] is True and table.meta["precisions"] == ["fp32", "fp16"]
    rows = [r for r in table.ops() if r.precision == "fp16"]
    assert rows and all(r.status == "ok" for r in rows)
    lm = LatencyModel(table)
    lm.bind(model, x, space)
    estimate = lm.predict(model, _sixteen_bit(space), as_measured=False)
    fp16_keys = {r.key for r in rows}
    assert {c.key for c in estimate.ops} & fp16_keys  # priced from the FP16 rows
    assert estimate.coverage["fallback"] == 0 and estimate.latency_ms > 0
