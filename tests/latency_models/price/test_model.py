import math

import numpy as np
import pytest

from frontier.latency_models import DeviceMeta, DeviceStore, LatencyModel, measure_bundle, validate
from frontier.latency_models.bundle._bundle import TEACHER
from frontier.latency_models.device._table import DeviceTable
from frontier.latency_models.ops._ops import OpSpec, plan_ops
from frontier.latency_models.price._pricer import fit_fallback


def test_prediction_sums_table_ops_plus_one_overhead(table, mlp_setup) -> None:
    _, model, x, space = mlp_setup
    lm = LatencyModel(table, calibrate=False)
    lm.bind(model, x, space)
    est = lm.predict(model, space.sample(0))
    assert est.coverage == {
        "table": len(est.ops),
        "fallback": 0,
        "offload": 0,
        "sparse_as_dense": 0,
    }
    # each op is its measured median minus the per-run overhead, never below zero
    expected = sum(max(table.get(o.key).median_ms - table.overhead_ms, 0.0) for o in est.ops)
    assert est.latency_ms == pytest.approx(expected + table.overhead_ms)
    assert est.energy_mj == pytest.approx(est.latency_ms * 10.0)  # mJ = ms x W


def test_missing_op_uses_the_reported_fallback(table, mlp_setup, ops) -> None:
    _, model, x, space = mlp_setup
    plan = space.sample(1)
    used = plan_ops(ops.templates[TEACHER], plan)
    missing = next(o for o in used if o.kind == "linear")
    table.rows = [r for r in table.rows if r.key != missing.key]
    table.__post_init__()
    lm = LatencyModel(table, calibrate=False)
    lm.bind(model, x, space)
    est = lm.predict(model, plan)
    assert est.coverage["fallback"] == 1
    fallback = next(c for c in est.ops if c.source == "fallback")
    assert fallback.key == missing.key and math.isfinite(fallback.latency_ms)
    assert fallback.latency_ms > 0
    fit = lm.fallbacks[f"{missing.kind}/{missing.precision}"]
    assert fit.method in ("linear", "power", "gbr") and fit.rows >= 3


def test_unsupported_op_priced_on_offload_device_plus_transfer(table, mlp_setup, ops) -> None:
    _, model, x, space = mlp_setup
    offload = DeviceTable(name="host", meta=dict(table.meta), rows=list(table.rows))
    table.meta["unsupported_ops"] = ["linear"]
    table.__post_init__()  # the typed metadata is read once: read it again
    lm = LatencyModel(table, offload=offload, calibrate=False)
    lm.bind(model, x, space)
    plan = space.sample(2)
    est = lm.predict(model, plan)
    assert est.coverage["offload"] == 3  # the three Gemm layers
    for cost in est.ops:
        if cost.source != "offload":
            continue
        spec = lm.spec_of(cost.key) or next(o for o in ops.ops if o.key == cost.key)
        elems = sum(math.prod(s) for s in spec.input_shapes) + math.prod(spec.output_shape)
        assert cost.transfer_ms == pytest.approx(4 * elems / 2e9 * 1e3)
        base = max(offload.get(cost.key).median_ms - offload.overhead_ms, 0.0)
        assert cost.latency_ms == pytest.approx(base + cost.transfer_ms)


def test_validation_report_and_files(table, mlp_setup, tmp_path) -> None:
    _, model, x, space = mlp_setup
    report = validate(
        LatencyModel(table),
        model=model,
        example_inputs=x,
        space=space,
        samples=3,
        out_dir=tmp_path,
        measure="table",
    )
    assert report.samples == 3 and report.measured == "table"
    # the measurements are the device's own validation rows, and the figures are theirs
    stored = sorted(r.median_ms for r in table.rows if r.kind == "validation")
    assert sorted(r["measured_ms"] for r in report.rows) == pytest.approx(stored)
    errors = [r["predicted_ms"] / r["measured_ms"] - 1 for r in report.rows]
    assert report.within_10pct == pytest.approx(sum(abs(e) <= 0.1 for e in errors) / 3)
    assert report.mape == pytest.approx(sum(abs(e) for e in errors) / 3)
    assert report.csv_path.exists() and report.plot_path.stat().st_size > 1000
    assert math.isfinite(report.mape)


def test_local_cpu_table_is_measured_once(mlp_setup, store, capsys) -> None:
    from frontier.latency_models import ensure_local_table
    from frontier.latency_models.device._devices import LOCAL_CPU

    task, model, x, space = mlp_setup
    first = ensure_local_table(
        model,
        x,
        space,
        store=store,
        calibration=8,
        calibration_data=task.calibration_batches(),
    )
    assert "measuring" in capsys.readouterr().err
    assert store.names() == [LOCAL_CPU] and first.active_power_w > 0
    assert "CodeCarbon" in first.meta["power_source"]
    again = ensure_local_table(model, x, space, store=store)
    assert "measuring" not in capsys.readouterr().err
    assert again.rows == first.rows
    est = LatencyModel(again)
    est.bind(model, x, space)
    assert est.predict(model, space.sample(3)).coverage["fallback"] == 0


@pytest.mark.parametrize(
    "stale",
    [{"bundle_version": 2}, {"protocol": {"name": "reference-interleaved", "version": 0}}],
    ids=["old-bundle", "old-protocol"],
)
def test_a_local_table_timed_the_old_way_is_measured_again(mlp_setup, store, capsys, stale) -> None:
    """A local-cpu table of an older bundle version or timing protocol is never mixed
    with rows timed now: the next use measures the whole table again."""
    import json

    from frontier.latency_models import ensure_local_table
    from frontier.latency_models.runner import PROTOCOL_VERSION

    task, model, x, space = mlp_setup
    data = task.calibration_batches()
    ensure_local_table(model, x, space, store=store, calibration=8, calibration_data=data)
    meta_path = store.root / "devices" / "local-cpu" / "table.csv.meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, **stale}))
    capsys.readouterr()
    again = ensure_local_table(model, x, space, store=store, calibration=8, calibration_data=data)
    assert "measuring" in capsys.readouterr().err
    assert again.meta["protocol"]["version"] == PROTOCOL_VERSION
    assert again.meta["bundle_version"] == 3


def test_sparsity_only_pays_with_a_sparse_kernel_row(table, mlp_setup, ops) -> None:
    import dataclasses

    _, model, x, space = mlp_setup
    dense_plan = space.sample(4)
    sparse_plan = dataclasses.replace(dense_plan, sparsity={"features.3": 0.9})
    spec = next(o for o in plan_ops(ops.templates[TEACHER], sparse_plan) if o.sparsity > 0)
    # make the layer's dense kernel clearly measurable: 1 ms above the overhead
    dense_row = dataclasses.replace(table.get(spec.dense.key), median_ms=table.overhead_ms + 1.0)
    table.rows = [dense_row if r.key == dense_row.key else r for r in table.rows]
    table.__post_init__()
    lm = LatencyModel(table, calibrate=False)
    lm.bind(model, x, space)
    dense, sparse = lm.predict(model, dense_plan), lm.predict(model, sparse_plan)
    assert sparse.latency_ms == pytest.approx(dense.latency_ms)  # no sparse kernel measured
    assert sparse.coverage["sparse_as_dense"] == 1
    sparse_row = dataclasses.replace(
        dense_row, key=spec.key, model_id="sparse-0", median_ms=table.overhead_ms + 0.1
    )
    table.rows.append(sparse_row)
    table.__post_init__()
    lm = LatencyModel(table, calibrate=False)
    lm.bind(model, x, space)
    measured = lm.predict(model, sparse_plan)
    assert measured.coverage["sparse_as_dense"] == 0
    assert measured.latency_ms == pytest.approx(dense.latency_ms - 0.9)


@pytest.mark.slow  # the real runtime is the point: local timing against the runner's
def test_local_validation_measures_by_the_protocol_the_table_was_measured_with(
    table, mlp_setup, bundle, tmp_path
) -> None:
    """``--measure local`` times the exported models as the runner timed the table's
    validation models (the same protocol on the same machine): the two agree within 50%.
    The models take microseconds and the table was timed minutes earlier on a shared
    machine, so each attempt also re-times the validation models with the runner, by the
    table's protocol, just before; the local timing must agree with the stored or the
    fresh runner timing. A different protocol (threads, warm-up, statistic) would
    disagree with both. Every timing is reported."""
    _, model, x, space = mlp_setup
    path, manifest = bundle

    def validation_ms(t: DeviceTable) -> dict[int, float]:
        return {
            e["seed"]: t.get(k).median_ms for k, e in t.models.items() if e["kind"] == "validation"
        }

    stored = validation_ms(table)
    attempts = []
    for attempt in range(3):
        out = tmp_path / f"again{attempt}.csv"
        measure_bundle(
            path, out, device="test-cpu", kinds=("overhead", "validation"), rounds=3, round_s=0.01
        )
        again = validation_ms(
            DeviceStore(tmp_path / f"store{attempt}").import_table(
                out, name="test-cpu", manifest=manifest, meta=DeviceMeta(active_power_w=10.0)
            )
        )
        report = validate(
            LatencyModel(table), model=model, example_inputs=x, space=space, samples=3,
            measure="local",
        )  # fmt: skip
        rows = [(r["measured_ms"], stored[r["seed"]], again[r["seed"]]) for r in report.rows]
        attempts.append(
            ", ".join(f"local {m:.4g} vs stored {s:.4g} / runner {a:.4g} ms" for m, s, a in rows)
        )
        if rows and all(min(abs(m / s - 1), abs(m / a - 1)) <= 0.5 for m, s, a in rows):
            return
    pytest.fail("local and runner timings disagree by more than 50%: " + " | ".join(attempts))


def _conv(cin: int, cout: int, hw: int) -> OpSpec:
    return OpSpec("Conv", (), ((1, cin, hw, hw),), (1, cout, hw, hw), (), (3, 3), 1, "fp32")


def test_fallback_keeps_the_predictor_that_fits_the_kind_best() -> None:
    """Convs whose time follows a power law of their sizes (as cache-bound kernels do)
    get the power law, and it predicts a held-out conv within 5%; linear times get the
    linear fit."""
    rng = np.random.default_rng(0)
    specs = [
        _conv(int(rng.integers(4, 64)), int(rng.integers(4, 64)), int(rng.choice([7, 14, 28])))
        for _ in range(40)
    ]
    held_out = _conv(48, 40, 14)

    def power_ms(s: OpSpec) -> float:
        return 1e-4 * s.macs**0.7

    fit = fit_fallback("conv/fp32", specs, np.array([power_ms(s) for s in specs]))
    assert fit.method == "power" and fit.cv_wape < 0.05 and fit.rows == 40
    assert fit.predict(held_out) == pytest.approx(power_ms(held_out), rel=0.05)

    def linear_ms(s: OpSpec) -> float:
        return 1e-6 * s.macs + 1e-5 * s.bytes_moved + 0.01

    fit = fit_fallback("conv/fp32", specs, np.array([linear_ms(s) for s in specs]))
    assert fit.method == "linear" and fit.cv_wape < 0.01
