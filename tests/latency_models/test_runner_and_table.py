import csv
import json
import zipfile

import numpy as np
import pytest

from frontier.latency_models import (
    DeviceMeta,
    DeviceStore,
    TableError,
    measure_bundle,
    read_manifest,
    read_table,
)
from frontier.latency_models.device._table import write_rows
from frontier.latency_models.runner import PROTOCOL_NAME, time_models
from frontier.latency_models.runner import main as runner_main


def test_runner_measures_every_model(measured) -> None:
    out, manifest = measured
    rows = list(csv.DictReader(out.open()))
    assert {r["model_id"] for r in rows} == {m["id"] for m in manifest["models"]}
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == len(rows)
    assert all(float(r["p10_ms"]) <= float(r["median_ms"]) <= float(r["p90_ms"]) for r in ok)
    assert all(float(r["raw_median_ms"]) > 0 for r in ok)
    meta = json.loads((out.parent / "table.csv.meta.json").read_text())
    for field in ("device", "cpu", "cores", "threads", "onnxruntime", "provider", "os", "date"):
        assert meta[field] not in (None, "")
    # the table says how it was timed
    assert meta["protocol"]["name"] == PROTOCOL_NAME and meta["protocol"]["threads"] == 1
    assert meta["protocol"]["rounds"] == 3


class FakeClock:
    """A clock and a timer on it: a model is a call that returns what one run of it
    costs (ms); timing it moves the clock by that much, as a run moves the wall clock."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def timer(self, run) -> float:
        ms = float(run())
        self.now_s += ms / 1000
        return ms

    def model(self, cost_ms):
        """A model whose run costs ``cost_ms(clock seconds)``, untimed runs included."""

        def run() -> float:
            ms = cost_ms(self.now_s)
            return ms

        def untimed() -> float:  # warm-up and untimed runs move the clock too
            ms = run()
            self.now_s += ms / 1000
            return ms

        untimed.timed = run  # type: ignore[attr-defined]
        return untimed


def _fake(clock: FakeClock, **options):
    """``time_models`` options that time on ``clock``: its timer reads a model's cost
    without running it twice (the untimed call moves the clock; the timed one is read)."""
    return {"clock": clock, "timer": lambda run: clock.timer(run.timed), **options}


def test_the_protocol_reads_what_a_plain_loop_reads() -> None:
    """A model that takes 0.5 ms reads 0.5 ms, and one that takes 1 ms beside it 1 ms,
    however its runs scatter: no reference, no scaling, milliseconds of the machine."""
    clock = FakeClock()
    rng = np.random.default_rng(0)
    fast = clock.model(lambda now: 0.5 * (1 + 0.05 * rng.standard_normal()))
    slow = clock.model(lambda now: 1.0 * (1 + 0.05 * rng.standard_normal()))
    a, b = time_models([fast, slow], **_fake(clock, round_s=0.02))
    assert a["median_ms"] == pytest.approx(0.5, rel=0.02)
    assert b["median_ms"] == pytest.approx(1.0, rel=0.02)
    assert a["p10_ms"] < a["median_ms"] < a["p90_ms"]
    # a visit runs for round_s of the clock: about 0.02 s / 0.5 ms = 40 runs
    assert 5 * 35 <= a["runs"] <= 5 * 45


def test_a_warm_up_by_time_runs_until_its_seconds_are_spent() -> None:
    """A GPU's warm-up (``warmup_s``) runs a model until that much clock time has
    passed, however many runs that takes; without it, ``warmup_runs`` runs."""
    for warmup_s, expected in ((0.0, 30), (0.01, 100)):
        clock, calls = FakeClock(), {"n": 0}

        def cost(now_s: float, calls: dict[str, int] = calls) -> float:
            calls["n"] += 1
            return 0.1  # ms: 100 runs make 10 ms

        options = _fake(clock, rounds=1, round_s=1e-6, warmup_runs=30, warmup_s=warmup_s)
        time_models([clock.model(cost)], **options)
        # 8: the round's 3 untimed and 5 timed runs; one more where 100 x 0.1 ms of float
        # sums to a hair under 10 ms
        assert expected <= calls["n"] - 8 <= expected + 1


def test_a_slow_round_is_outvoted() -> None:
    """A model's latency is the median of its round medians: a neighbour's load that
    slows one round of five (here by 5 ms a run) does not move it."""
    clock = FakeClock()
    calls = {"n": 0}

    def cost(now_s: float) -> float:
        # rounds of 5 timed runs after 3 untimed ones, after a warm-up of 30: calls
        # 39-46 are the second round, run while a neighbour is busy
        calls["n"] += 1
        return 5.2 if 39 <= calls["n"] <= 46 else 0.2

    options = _fake(clock, rounds=5, round_s=1e-6, warmup_runs=30)
    (stats,) = time_models([clock.model(cost)], **options)
    assert calls["n"] == 30 + 5 * 8
    assert stats["median_ms"] == pytest.approx(0.2)
    assert max(stats["round_medians"]) == pytest.approx(5.2)  # the slow round is there
    assert stats["spread"] > 10  # and said


def test_resume_skips_what_is_measured(bundle, measured, tmp_path, capsys) -> None:
    path, manifest = bundle
    full, _ = measured
    lines = full.read_text().splitlines()
    half = tmp_path / "half.csv"
    half.write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    (tmp_path / "half.csv.meta.json").write_text((full.parent / "table.csv.meta.json").read_text())
    measure_bundle(path, half, device="test-cpu", rounds=3, round_s=0.01)
    kept, total = len(lines) // 2 - 1, len(manifest["models"])  # the header
    assert f"{kept} of {total} models already measured, {total - kept} to go" in (
        capsys.readouterr().err
    )
    resumed = half.read_text().splitlines()
    assert resumed[: len(lines) // 2] == lines[: len(lines) // 2]  # kept, not remeasured
    ids = [r["model_id"] for r in csv.DictReader(half.open())]
    assert len(ids) == len(set(ids)) == len(manifest["models"])
    measure_bundle(path, half, device="test-cpu", rounds=3, round_s=0.01)  # complete: a no-op
    assert half.read_text().splitlines() == resumed
    assert "nothing left to measure" in capsys.readouterr().err
    # a table is resumed only by the protocol that measured its first rows
    with pytest.raises(ValueError, match="another timing protocol"):
        measure_bundle(path, half, device="test-cpu", rounds=4, round_s=0.01)


def test_unsupported_op_is_recorded_not_a_crash(tmp_path, capsys) -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    node = helper.make_node("SwishBeta", ["x0"], ["y"], domain="custom.ops")
    model = helper.make_model(
        helper.make_graph([node], "g", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.ops", 1)],
    )
    bundle = tmp_path / "b.zip"
    manifest = {
        "format": "frontier-op-bundle",
        "version": 3,
        "bundle_id": "x",
        "models": [
            {
                "id": "op-0",
                "kind": "op",
                "file": "m.onnx",
                "key": "swish",
                "op_type": "swishbeta",
                "precision": "fp32",
            }
        ],
    }
    with zipfile.ZipFile(bundle, "w") as zf:
        zf.writestr("m.onnx", model.SerializeToString())
        zf.writestr("manifest.json", json.dumps(manifest))
    out = tmp_path / "t.csv"
    assert runner_main([str(bundle), "--device", "d", "--out", str(out), "--rounds", "1"]) == 0
    row = next(csv.DictReader(out.open()))
    assert row["status"] == "unsupported" and row["error"]
    assert read_table(out).unsupported_types == {"swishbeta"}
    assert "1 model, 0 measured, 1 unsupported" in capsys.readouterr().out


def test_bundle_version_is_checked(tmp_path) -> None:
    bundle = tmp_path / "b.zip"
    with zipfile.ZipFile(bundle, "w") as zf:
        zf.writestr("manifest.json", json.dumps({"format": "frontier-op-bundle", "version": 9}))
    with pytest.raises(ValueError, match="bundle version 9"):
        read_manifest(bundle)


def test_table_round_trip(measured, store: DeviceStore) -> None:
    out, manifest = measured
    meta = DeviceMeta(active_power_w=5, extra={"note": "bench"})
    table = store.import_table(out, name="test-cpu", manifest=manifest, meta=meta)
    again = store.load("test-cpu")
    assert again.rows == read_table(out).rows == table.rows
    assert again.active_power_w == 5 and store.names() == ["test-cpu"]
    typed = again.device_meta  # the runner's fields, typed; its other keys kept as they were
    assert typed.device == "test-cpu" and typed.threads == 1 and typed.extra["note"] == "bench"
    assert DeviceMeta.from_dict(typed.to_dict()) == typed
    npu = again.derive("npu", unsupported=["Gemm"], offload="test-cpu", transfer_gbps=2.0)
    assert npu.device_meta.offload_device == "test-cpu" and npu.unsupported_types >= {"Gemm"}
    assert again.summary()["protocol"]["name"] == PROTOCOL_NAME
    assert len(again.models) == len(manifest["models"])
    copy = out.parent / "copy.csv"
    write_rows(copy, again.rows)
    assert read_table(copy).rows == again.rows


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda rows: rows[2].update(median_ms="-1"), "row 4: median_ms must be finite and > 0"),
        (lambda rows: rows[3].update(median_ms="nan"), "row 5: median_ms must be finite"),
        (lambda rows: rows[2].update(key=rows[1]["key"]), "row 4: duplicate key"),
        (lambda rows: rows[1].update(kind="opp"), "row 3: kind must be one of"),
        (lambda rows: rows[1].update(status="fine"), "row 3: status must be ok or unsupported"),
    ],
    ids=["negative", "nan", "duplicate", "kind", "status"],
)
def test_malformed_tables_name_rows(measured, tmp_path, edit, needle: str) -> None:
    out, _ = measured
    rows = list(csv.DictReader(out.open()))
    edit(rows)
    bad = tmp_path / "bad.csv"
    with bad.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(TableError) as err:
        read_table(bad)
    assert needle in str(err.value) and str(bad) in str(err.value)


def test_missing_column_and_unknown_device(tmp_path, store: DeviceStore) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("model_id,kind,key\nop-0,op,k\n")
    with pytest.raises(TableError, match=r"missing required column\(s\) \['status', 'median_ms'\]"):
        read_table(bad)
    with pytest.raises(TableError, match="no device table named 'pi9'"):
        store.load("pi9")


def test_runner_is_one_standalone_file(bundle, tmp_path) -> None:
    """On a device: one copied file, onnxruntime and numpy, no Frontier, no torch."""
    import shutil
    import subprocess
    import sys

    import frontier.latency_models.runner as runner

    path, manifest = bundle
    shutil.copy(runner.__file__, tmp_path / "runner.py")
    code = (
        "import sys, runpy; sys.modules['frontier'] = None; sys.modules['torch'] = None; "
        f"sys.argv = ['runner.py', {str(path)!r}, '--device', 'pi', '--out', 'pi.csv', "
        "'--rounds', '1', '--round-s', '0.005']; runpy.run_path('runner.py', run_name='__main__')"
    )
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=300)
    rows = list(csv.DictReader((tmp_path / "pi.csv").open()))
    assert len(rows) == len(manifest["models"])
    assert all(float(r["median_ms"]) > 0 for r in rows)


def test_a_table_times_some_whole_models_twice_and_keeps_its_noise(measured, store) -> None:
    """The second pass comes after every other chunk; the table keeps how well the two
    agreed, and says what that means (what `lut validate`, a search and `pick` print)."""
    out, manifest = measured
    meta = json.loads((out.parent / "table.csv.meta.json").read_text())
    whole = [m for m in manifest["models"] if m["kind"] in ("calibration", "validation")]
    assert meta["noise_models"] == min(len(whole), 24) >= 4
    assert 0 <= meta["noise_pct"] < 100 and 0 <= meta["noise_within_10pct"] <= 1
    table = store.import_table(out, name="noisy")
    band = store.load("noisy").device_meta.noise_band()
    assert table.device_meta.noise_pct == meta["noise_pct"]
    assert f"differences under {meta['noise_pct']:.1f}% on " in band and "timed twice" in band
    # every row is still one model, timed once: the second pass adds no row
    ids = [r["model_id"] for r in csv.DictReader(out.open())]
    assert len(ids) == len(set(ids)) == len(manifest["models"])
    assert DeviceMeta().noise_band() == ""  # a table that did not measure it says nothing


def test_a_table_of_two_spaces_prices_each_by_its_own_models(
    measured, mlp_setup, store, tmp_path
) -> None:
    """A device's table keeps the rows of every space measured on it. A model of one
    space is calibrated on that space's models alone, and what a search, `lut validate`
    and `pick` say of its noise is its own space's (calibrated on every space's models,
    ResNet-50's plans were priced 60% fast; a model measured at 26% noise read as 5%)."""
    import shutil

    from frontier.latency_models import LatencyModel

    out, manifest = measured
    store.import_table(out, name="cpu", manifest=manifest)
    own = store.load("cpu").device_meta
    _, model, x, space = mlp_setup
    alone = LatencyModel(store.load("cpu"))
    alone.bind(model, x, space)
    plans = [space.sample(np.random.default_rng(seed)) for seed in range(5)]
    before = [alone.predict(model, p, as_measured=False).latency_ms for p in plans]

    # another space, measured later on the same device while it ran noisier: its own
    # uncompressed model, its ops shared with the first, and whole models that run three
    # times their ops' sum
    later, new_id = tmp_path / "later", "0000aaaa0000aaaa"
    shutil.copytree(out.parent, later)
    for path in later.iterdir():
        if path.suffix in (".csv", ".json", ".jsonl"):
            path.write_text(path.read_text().replace(own.bundle_id or "?", new_id))
    csv_path = later / out.name
    with csv_path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        if row["kind"] == "calibration":
            for col in ("median_ms", "p10_ms", "p90_ms", "raw_median_ms", "relative"):
                row[col] = str(3 * float(row[col]))
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    meta_path = later / f"{out.name}.meta.json"
    meta = json.loads(meta_path.read_text())
    meta.update(noise_pct=31.5, date="2026-12-03T00:00:00+00:00")
    meta_path.write_text(json.dumps(meta))
    other = json.loads(json.dumps(manifest).replace(own.bundle_id or "?", new_id))
    for entry in other["models"]:
        if entry["kind"] == "baseline":
            entry["op_keys"] = entry["op_keys"][::-1]  # another model than the first's
    store.import_table(csv_path, name="cpu", manifest=other, merge=True)

    both = store.load("cpu")
    calibration = both.whole_models("calibration")
    assert len(calibration) == 2 * len(alone.calibration_samples())  # both spaces' kept
    assert both.device_meta.noise_pct == 31.5  # the table as a whole: its latest space
    assert both.bundle_meta(new_id).noise_pct == 31.5
    latency = LatencyModel(both)
    latency.bind(model, x, space)
    after = [latency.predict(model, p, as_measured=False).latency_ms for p in plans]
    assert np.allclose(after, before, rtol=1e-6), (after, before)
    first = latency.device_meta(model)  # what a search of the first space states
    assert first.noise_pct == own.noise_pct and first.date == own.date
    assert f"differences under {own.noise_pct:.1f}% " in first.noise_band()
