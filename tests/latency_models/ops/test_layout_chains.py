"""A run of kernels in one layout converts into it once and out of it once: an op's
table row, timed alone, pays both conversions, and a plan's prediction pays them only
where the chain starts and ends."""

import dataclasses
import itertools

import numpy as np
import pytest

from frontier.latency_models import LatencyModel
from frontier.latency_models.device._table import DeviceTable, Row
from frontier.latency_models.ops._op_models import op_model_bytes
from frontier.latency_models.ops._ops import OpSpec
from frontier.latency_models.runner import glue_split, open_session, profile_nodes, session_options

OVERHEAD_MS = 0.005
#: the made-up device: a convolution alone spends these shares of its time converting
#: its input into its layout and its output back (FP32 blocked, INT8 channels-last)
IN_SHARE, OUT_SHARE = 0.2, 0.25
LAYOUT = {"fp32": "nchwc", "int8": "channels-last"}


def _conv(precision: str, cin: int, cout: int) -> OpSpec:
    return OpSpec("Conv", (), ((1, cin, 8, 8),), (1, cout, 8, 8), (), (3, 3), 1, precision)


def _op(op_type: str, c: int, precision: str = "fp32") -> OpSpec:
    return OpSpec(op_type, (), ((1, c, 8, 8),), (1, c, 8, 8), (), (), 1, precision)


def _alone_ms(spec: OpSpec) -> float:
    """What an op costs alone, its conversions included (less the session overhead)."""
    if spec.op_type == "Conv":
        return 0.0005 * spec.input_shapes[0][1] * spec.output_shape[1] / 8
    return 0.002


def _whole_ms(specs: list[OpSpec]) -> float:
    """The made-up device's whole model: each op's time alone, except that where a
    convolution's output reaches the next convolution in the same layout (directly or
    through a Relu or an Add, which run in any layout) neither converts."""
    total = OVERHEAD_MS + sum(map(_alone_ms, specs))
    last: OpSpec | None = None
    for spec in specs:
        if spec.op_type == "Conv":
            if last is not None and last.precision == spec.precision:
                total -= OUT_SHARE * _alone_ms(last) + IN_SHARE * _alone_ms(spec)
            last = spec
        elif spec.op_type not in ("Relu", "Add"):
            last = None
    return total


def _table(specs: list[OpSpec], *, layouts: bool = True) -> DeviceTable:
    rows = [Row("identity", "overhead", "identity", "Identity", "fp32", "ok", OVERHEAD_MS, 0, 0, 9)]
    models: dict[str, dict] = {}
    for s in specs:
        ms = _alone_ms(s) + OVERHEAD_MS
        row = Row(s.key, "op", s.key, s.op_type.lower(), s.precision, "ok", ms, ms, ms, 9)
        if layouts and s.op_type == "Conv":
            row = dataclasses.replace(
                row, glue_in_share=IN_SHARE, glue_out_share=OUT_SHARE, layout=LAYOUT[s.precision]
            )
        rows.append(row)
        models[s.key] = {"kind": "op", "spec": s.to_dict()}
    return DeviceTable("made-up", {}, rows, models=models)


def test_a_chain_in_one_layout_pays_its_conversions_once() -> None:
    rng = np.random.default_rng(0)
    plans = []
    for _ in range(40):
        chans = [int(c) for c in rng.choice([8, 16, 32], size=6)]
        plan = []
        for a, b in itertools.pairwise(chans):
            plan.append(_conv(str(rng.choice(["fp32", "int8"])), a, b))
            extra = rng.choice(["", "Relu", "Add", "Flatten"])
            if extra:
                plan.append(_op(str(extra), b, plan[-1].precision))
        plans.append(plan)
    ops = {s.key: s for plan in plans for s in plan}
    truth = np.array([_whole_ms(p) for p in plans])

    chain = LatencyModel(_table(list(ops.values())), calibrate=False)
    predicted = np.array([chain.predict_ops(p).latency_ms for p in plans])
    assert predicted == pytest.approx(truth, rel=1e-9)

    # without the rows' layouts, every op pays its conversions: the fast plans (long
    # chains) are priced too slow, by up to the conversions' share
    alone = LatencyModel(_table(list(ops.values()), layouts=False), calibrate=False)
    before = np.array([alone.predict_ops(p).latency_ms for p in plans]) / truth - 1
    assert before.max() > 0.2 and (before >= 0).all()


def test_a_precision_change_breaks_the_chain() -> None:
    plan = [_conv("fp32", 8, 16), _conv("int8", 16, 16), _conv("int8", 16, 8)]
    lm = LatencyModel(_table(plan), calibrate=False)
    prices = lm.pricer.chain_ms(plan)
    alone = [_alone_ms(s) for s in plan]
    assert prices[0] == pytest.approx(alone[0])  # FP32 -> INT8: both convert
    assert prices[1] == pytest.approx(alone[1] * (1 - OUT_SHARE))
    assert prices[2] == pytest.approx(alone[2] * (1 - IN_SHARE))


@pytest.mark.parametrize(("precision", "layout"), [("fp32", "nchwc"), ("int8", "channels-last")])
def test_the_runtime_profile_shows_a_convolution_converting_its_layout(precision, layout) -> None:
    """ONNX Runtime runs an FP32 convolution in blocked NCHWc and an INT8 one in NHWC:
    alone, each converts its input in and its output back, and ``glue_split`` finds
    both conversions in its profile; an op that runs in the plain layout has none."""
    spec = OpSpec("Conv", ("Relu",), ((1, 32, 20, 20),), (1, 64, 20, 20),
                  (("pads", (1, 1, 1, 1)),), (3, 3), 1, precision)  # fmt: skip
    glue = _glue(spec)
    assert glue["layout"] == layout
    assert 0 < float(glue["glue_in_share"]) < 0.5 and 0 < float(glue["glue_out_share"]) < 0.5
    flatten = OpSpec("Flatten", (), ((1, 64, 1, 1),), (1, 64), (("axis", 1),), (), 1, precision)
    assert _glue(flatten)["layout"] == ""


def _glue(spec: OpSpec) -> dict[str, str]:
    """``spec``'s op model's layout glue, from ONNX Runtime's profile of it."""
    data = op_model_bytes(spec)
    _, feeds = open_session(data, session_options(1), rng=np.random.default_rng(0))
    return glue_split(profile_nodes(data, feeds, 1, "CPUExecutionProvider", runs=10))
