"""A made-up device's table: conv op rows priced by a rule, calibration models priced
by another, for tests of how a table turns op prices into whole-model latency."""

from collections.abc import Callable, Iterable

from frontier.latency_models import DeviceTable, OpSpec, Row


def synthetic_table(
    ops: Iterable[OpSpec],
    op_ms: Callable[[OpSpec], float],
    calibration: list[list[OpSpec]],
    whole_ms: Callable[[list[OpSpec]], float],
    overhead_ms: float,
) -> DeviceTable:
    """A table with the overhead row, a row per op in ``ops`` (``op_ms``, overhead
    included) and a calibration model per plan in ``calibration`` (``whole_ms``)."""
    rows = [Row("identity", "overhead", "identity", "Identity", "fp32", "ok", overhead_ms, 0, 0, 9)]
    models: dict[str, dict] = {}
    for s in ops:
        ms = op_ms(s)
        rows.append(Row(s.key, "op", s.key, "conv", s.precision, "ok", ms, ms, ms, 9))
        models[s.key] = {"kind": "op", "spec": s.to_dict()}
    for i, specs in enumerate(calibration):
        key = f"calibration-test-{i}"
        ms = whole_ms(specs)
        rows.append(Row(key, "calibration", key, "", "", "ok", ms, ms, ms, 9))
        models[key] = {"kind": "calibration", "seed": i, "op_keys": [s.key for s in specs]}
    return DeviceTable("synthetic", {}, rows, models=models)
