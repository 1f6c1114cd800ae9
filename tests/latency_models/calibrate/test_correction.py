import dataclasses

import numpy as np

from frontier.latency_models import LatencyModel
from frontier.latency_models.calibrate._choose import Corrected
from frontier.latency_models.calibrate._correction import features
from frontier.latency_models.device._table import DeviceTable
from frontier.latency_models.ops._ops import OpSpec
from tests.latency_models.synthetic import synthetic_table

OVERHEAD_MS = 0.005


def _spec(precision: str, cin: int, cout: int) -> OpSpec:
    return OpSpec("Conv", (), ((1, cin, 4, 4),), (1, cout, 4, 4), (), (1, 1), 1, precision)


def _isolated_ms(spec: OpSpec) -> float:
    return 0.001 * spec.input_shapes[0][1] * spec.output_shape[1] / 16


def _whole_ms(specs: list[OpSpec]) -> float:
    """In a whole model, INT8 convolutions into 32 channels run 1.6x their isolated time
    (a kernel the graph runs differently) and each FP32 -> INT8 edge costs 3 us: both
    op-specific, so no scale of the convolutions' sum captures them."""
    total = OVERHEAD_MS
    for i, s in enumerate(specs):
        slow = s.precision == "int8" and s.output_shape[1] == 32
        total += _isolated_ms(s) * (1.6 if slow else 1.0)
        if i and specs[i - 1].precision == "fp32" and s.precision == "int8":
            total += 0.003
    return total


def _plan(rng: np.random.Generator) -> list[OpSpec]:
    chans = [3, *(int(c) for c in rng.choice([8, 16, 32], size=4))]
    precisions = rng.choice(["fp32", "int8"], size=4)
    return [_spec(str(p), a, b) for p, a, b in zip(precisions, chans[:-1], chans[1:], strict=True)]


def _table(calibration: list[list[OpSpec]], whole_ms=_whole_ms) -> DeviceTable:
    ops = [_spec(p, a, b) for a in (3, 8, 16, 32) for b in (8, 16, 32) for p in ("fp32", "int8")]
    return synthetic_table(
        ops, lambda s: _isolated_ms(s) + OVERHEAD_MS, calibration, whole_ms, OVERHEAD_MS
    )


def test_features_count_op_keys_and_precision_edges() -> None:
    specs = [_spec("fp32", 3, 8), _spec("int8", 8, 8), _spec("int8", 8, 8)]
    f = features(specs)
    assert f[f"op:{specs[1].key}"] == 2 and f[f"op:{specs[0].key}"] == 1
    assert f["edge:0:fp32>int8"] == 1 and f["edge:1:int8>int8"] == 1 and len(f) == 4


def test_per_op_correction_learns_what_isolated_ops_miss() -> None:
    rng = np.random.default_rng(0)
    lm = LatencyModel(_table([_plan(rng) for _ in range(60)]))
    held_out = [_plan(rng) for _ in range(30)]
    truth = np.array([_whole_ms(s) for s in held_out])
    corrected = np.array([lm.predict_ops(s).latency_ms for s in held_out])
    assert lm.correction is not None and lm.method.endswith("per-op corrected")
    assert lm.method_cv[lm.method] == min(lm.method_cv.values())
    # the correction wraps the calibration it corrects: unwrapped, the same model without it
    assert isinstance(lm.calibrated, Corrected) and lm.calibrated.correction is lm.correction
    lm.whole.choice = dataclasses.replace(lm.choice, predictor=lm.calibrated.inner)
    calibrated = np.array([lm.predict_ops(s).latency_ms for s in held_out])
    mape = {
        "corrected": float(np.mean(np.abs(corrected / truth - 1))),
        "calibrated": float(np.mean(np.abs(calibrated / truth - 1))),
    }
    assert mape["corrected"] < 0.02 and mape["calibrated"] > 2 * mape["corrected"], mape


def test_no_correction_where_it_does_not_help() -> None:
    """Whole models that are their ops' sum leave nothing to correct: CV keeps the
    calibration as it is."""
    rng = np.random.default_rng(1)
    plans = [_plan(rng) for _ in range(40)]
    lm = LatencyModel(_table(plans, whole_ms=lambda s: sum(map(_isolated_ms, s)) + OVERHEAD_MS))
    lm.choose_calibration()
    assert lm.correction is None and "corrected" not in str(lm.method)
