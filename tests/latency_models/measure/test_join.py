"""Whole models measured where a search went join a table's calibration."""

from __future__ import annotations

import pytest

from frontier.latency_models import LatencyModel, learn, learned_entry
from frontier.spaces import CompressionPlan


def _plans(space) -> list[CompressionPlan]:
    names = [g.name for g in space.groups][:2]
    return [
        CompressionPlan(prune={names[0]: 0.5}),
        CompressionPlan(prune={n: 0.5 for n in names}),
    ]


def test_measured_models_become_calibration_models(table, store, mlp_setup) -> None:
    _, model, x, space = mlp_setup
    lm = LatencyModel(table)
    lm.bind(model, x, space)
    plans = _plans(space)
    before = len(table.whole_models("calibration"))
    entries = [learned_entry(lm, model, p, 0.123 + 0.01 * i) for i, p in enumerate(plans)]
    got = learn(store, "test-cpu", entries)
    assert got.added == 2 and got.calibration_models == before + 2
    stored = store.load("test-cpu")
    rows = {r.key: r.median_ms for r in stored.whole_models("calibration")}
    assert [rows[e["key"]] for e in entries] == pytest.approx([0.123, 0.133])
    # the refitted model reads them as samples, with their ops
    samples = LatencyModel(stored).calibration_samples()
    assert sum(s.measured_ms in (0.123, 0.133) for s in samples) == 2
    assert store.load("test-cpu").meta["learned_models"] == 2

    # the same plan measured again replaces its row; unknown ops are skipped
    again = learned_entry(lm, model, plans[0], 0.2)
    bogus = {**again, "key": "front-bogus", "op_keys": ["no-such-op"]}
    got = learn(store, "test-cpu", [again, bogus])
    assert got.added == 1 and got.calibration_models == before + 2
    rows = {r.key: r.median_ms for r in store.load("test-cpu").whole_models("calibration")}
    assert rows[again["key"]] == pytest.approx(0.2) and "front-bogus" not in rows

    # two front members of one plan are one model measured twice: one row, their median
    twice = [learned_entry(lm, model, plans[1], ms) for ms in (0.3, 0.5)]
    got = learn(store, "test-cpu", twice)
    assert got.added == 1 and got.calibration_models == before + 2
    calibration = store.load("test-cpu").whole_models("calibration")
    assert [r.median_ms for r in calibration if r.key == twice[0]["key"]] == pytest.approx([0.4])


def test_an_entry_holds_the_plans_ops_as_the_table_keys_them(table, mlp_setup) -> None:
    _, model, x, space = mlp_setup
    lm = LatencyModel(table)
    lm.bind(model, x, space)
    entry = learned_entry(lm, model, CompressionPlan(), 1.0)
    assert entry["op_keys"] and all(table.get(k) is not None for k in entry["op_keys"])
    assert len(entry["op_nodes"]) == len(entry["op_keys"])


def test_an_uncalibrated_table_is_left_as_it_is(table, store, mlp_setup) -> None:
    """A table without calibration models predicts the plain sum of its ops; a few
    front models cannot calibrate it, so nothing is added."""
    from frontier.latency_models import read_table
    from frontier.latency_models.device._table import write_rows

    path = store.root / "devices" / "test-cpu" / "table.csv"
    write_rows(path, [r for r in read_table(path).rows if r.kind != "calibration"])
    _, model, x, space = mlp_setup
    lm = LatencyModel(table)
    lm.bind(model, x, space)
    got = learn(store, "test-cpu", [learned_entry(lm, model, CompressionPlan(), 0.5)])
    assert got.added == 0 and "fewer than 8" in got.skipped
    assert not store.load("test-cpu").whole_models("calibration")
