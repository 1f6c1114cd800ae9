"""The anchor on the measured uncompressed model: a made-up device whose uncompressed
model runs slower than its calibration models say (an FP32 graph of the widest layers
pays what no calibration model's ops do), as fresh ResNet-18 tables priced it 7% fast."""

import numpy as np
import pytest

from frontier.latency_models import LatencyModel
from frontier.latency_models.device._table import Row
from frontier.latency_models.ops._ops import OpSpec
from tests.latency_models.calibrate.test_calibration import WIDTHS, _plan, _spec, _table, _whole_ms

#: the uncompressed model: every layer FP32 at the widest width
BASE = [_spec("fp32", a, b) for a, b in zip([3, *[64] * 5], [64] * 6, strict=True)]
#: how much slower it runs than the device's rule for every other model
MISS = 1.3


def _anchored_table(rng: np.random.Generator) -> tuple[list[list[OpSpec]], LatencyModel]:
    calibration = [_plan(rng, WIDTHS[:-1], 0.5) for _ in range(60)]
    table = _table(calibration)
    ms = _whole_ms(BASE) * MISS
    table.rows.append(Row("baseline-t", "baseline", "baseline-t", "", "", "ok", ms, ms, ms, 9))
    table.models["baseline-t"] = {"kind": "baseline", "op_keys": [s.key for s in BASE]}
    return calibration, LatencyModel(table, anchor=True)


def test_the_anchor_prices_the_uncompressed_model_as_measured_and_plans_by_shared_ops() -> None:
    rng = np.random.default_rng(0)
    calibration, anchored = _anchored_table(rng)
    plain = LatencyModel(anchored.table)
    measured = _whole_ms(BASE) * MISS
    # unanchored, the calibration prices the uncompressed model near the device's rule
    assert plain.predict_ops(BASE, as_measured=False).latency_ms < measured / 1.2
    # anchored, at its measurement
    assert anchored.predict_ops(BASE, as_measured=False).latency_ms == pytest.approx(measured)
    # a plan that keeps half the uncompressed model's ops moves part of the way
    half = [*BASE[:3], *(_spec("int8", 64, 64) for _ in range(3))]
    p, a = (m.predict_ops(half, as_measured=False).latency_ms for m in (plain, anchored))
    assert p < a < p * MISS
    # a plan that shares no op with it is priced as before
    other = calibration[0]
    assert not {s.key for s in other} & {s.key for s in BASE}
    assert anchored.predict_ops(other).latency_ms == pytest.approx(
        plain.predict_ops(other).latency_ms
    )
