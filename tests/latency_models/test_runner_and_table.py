import csv
import json
import time
import zipfile

import pytest

from frontier.latency_models import (
    DeviceMeta,
    DeviceStore,
    TableError,
    measure_bundle,
    read_manifest,
    read_table,
)
from frontier.latency_models._table import write_rows
from frontier.latency_models.runner import main as runner_main
from frontier.latency_models.runner import normalise, time_session


def test_runner_measures_every_model(measured) -> None:
    out, manifest = measured
    rows = list(csv.DictReader(out.open()))
    measurable = {m["id"] for m in manifest["models"] if m["kind"] != "reference"}
    assert {r["model_id"] for r in rows} == measurable
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == len(rows)
    assert all(float(r["p10_ms"]) <= float(r["median_ms"]) <= float(r["p90_ms"]) for r in ok)
    assert all(float(r["raw_median_ms"]) > 0 for r in ok)
    meta = json.loads((out.parent / "table.csv.meta.json").read_text())
    for field in ("device", "cpu", "cores", "threads", "onnxruntime", "provider", "os", "date"):
        assert meta[field] not in (None, "")
    # every model was timed beside the bundle's reference of its size, kept beside the table
    assert set(manifest["references"]) == set(meta["references"]) == {"op", "model"}
    for role, ref in meta["references"].items():
        assert ref["level_ms"] > 0
        assert (out.parent / f"table.csv.reference-{role}.onnx").stat().st_size > 0


def _busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


@pytest.mark.parametrize("slowdown", [1.0, 2.0])
def test_a_slow_machine_does_not_shift_normalised_rows(slowdown: float) -> None:
    """A model that takes 1 ms beside a reference of 0.5 ms level reads 1 ms whether the
    machine runs at full speed or at half: the slowdown hits both."""
    stats = time_session(
        lambda: _busy(1.0 * slowdown),
        reference=lambda: _busy(0.5 * slowdown),
        min_runs=20,
        time_cap_s=0.2,
    )
    assert stats["median_ms"] == pytest.approx(slowdown, rel=0.2)  # what was measured
    normalised = normalise(stats, level_ms=0.5)
    assert normalised["median_ms"] == pytest.approx(1.0, rel=0.1)
    assert normalised["raw_median_ms"] == stats["median_ms"]


def test_resume_skips_what_is_measured(bundle, measured, tmp_path, capsys) -> None:
    path, manifest = bundle
    full, _ = measured
    lines = full.read_text().splitlines()
    half = tmp_path / "half.csv"
    half.write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    (tmp_path / "half.csv.meta.json").write_text((full.parent / "table.csv.meta.json").read_text())
    measure_bundle(path, half, device="test-cpu", time_cap_s=0.02)
    kept, total = len(lines) // 2 - 1, len(manifest["models"]) - 2  # header; references
    assert f"{kept} of {total} models already measured, {total - kept} to go" in (
        capsys.readouterr().err
    )
    resumed = half.read_text().splitlines()
    assert resumed[: len(lines) // 2] == lines[: len(lines) // 2]  # kept, not remeasured
    ids = [r["model_id"] for r in csv.DictReader(half.open())]
    assert len(ids) == len(set(ids)) == len(manifest["models"]) - 2  # all but the references
    # the resumed rows are in the first rows' units: the reference level is kept
    meta = json.loads((tmp_path / "half.csv.meta.json").read_text())
    first = json.loads((full.parent / "table.csv.meta.json").read_text())
    assert meta["references"] == first["references"]
    measure_bundle(path, half, device="test-cpu", time_cap_s=0.02)  # complete: a no-op
    assert half.read_text().splitlines() == resumed
    assert "nothing left to measure" in capsys.readouterr().err


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
        "version": 1,
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
    assert runner_main([str(bundle), "--device", "d", "--out", str(out)]) == 0
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
    reference = again.reference("model")  # the model and level that set the rows' units
    assert reference is not None
    assert reference[1] == again.meta["references"]["model"]["level_ms"]
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
        "'--time-cap', '0.01']; runpy.run_path('runner.py', run_name='__main__')"
    )
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=300)
    rows = list(csv.DictReader((tmp_path / "pi.csv").open()))
    assert len(rows) == sum(m["kind"] != "reference" for m in manifest["models"])
    assert all(float(r["raw_median_ms"]) > 0 for r in rows)


def test_no_reference_times_each_model_alone(bundle, tmp_path) -> None:
    """``--no-reference``: no reference levels, and every row's median is as measured."""
    from frontier.latency_models.runner import main

    path, _ = bundle
    out = tmp_path / "alone.csv"
    assert (
        main(
            [str(path), "--device", "d", "--out", str(out), "--time-cap", "0.01", "--no-reference"]
        )
        == 0
    )
    meta = json.loads((tmp_path / "alone.csv.meta.json").read_text())
    assert "references" not in meta
    assert not list(tmp_path.glob("alone.csv.reference-*.onnx"))
    rows = list(csv.DictReader(out.open()))
    assert rows and all(r["median_ms"] == r["raw_median_ms"] for r in rows)


def test_one_slow_session_does_not_move_a_whole_model(bundle, tmp_path, monkeypatch) -> None:
    """Whole models are timed in several fresh sessions and their row is the median: a
    session that runs 5 ms slower (a bad memory placement, a busy neighbour) is outvoted.
    Timed in one session, the same model reads slow."""
    from frontier.latency_models import runner

    path, manifest = bundle
    with zipfile.ZipFile(path) as zf:
        whole = {zf.read(m["file"]) for m in manifest["models"] if m["kind"] == "validation"}
    opened: dict[bytes, int] = {}
    real_open = runner.open_session

    def open_session(data: bytes, *args, **kwargs):
        run, feeds = real_open(data, *args, **kwargs)
        opened[data] = opened.get(data, 0) + 1
        if data in whole and opened[data] == 1:  # each model's first session is slow

            def slow_run():
                _busy(5.0)
                return run()

            return slow_run, feeds
        return run, feeds

    monkeypatch.setattr(runner, "open_session", open_session)
    # The spin that makes a session slow here also slows the reference beside it, which
    # the slow-spell gate (tested on its own below) would rightly retime; this test is
    # about sessions outvoting one another, so the gate is off.
    monkeypatch.setattr(runner, "SLOW_RETRIES", 0)
    medians = {}
    for sessions in (1, 3):
        opened.clear()
        out = tmp_path / f"s{sessions}.csv"
        measure_bundle(path, out, device="d", time_cap_s=0.02, sessions=sessions)
        rows = [r for r in csv.DictReader(out.open()) if r["kind"] == "validation"]
        medians[sessions] = [float(r["median_ms"]) for r in rows]
        assert all(opened[w] == sessions for w in whole)
    # the MLP runs in tens of microseconds; the slow session adds 5 ms to each run
    assert min(medians[1]) > 1.0  # one session: the slow one is the row
    assert max(medians[3]) < 0.5  # three: the two normal sessions outvote it


def test_slow_spells_are_told_by_the_reference() -> None:
    from frontier.latency_models.runner import SlowSpells

    # the first sessions set the calm level (one of them in a spell)
    spells = SlowSpells()
    seen = [1.0, 1.0, 2.0, 1.0, 1.0]
    assert [spells.slow({"reference_ms": ms}) for ms in seen] == [False] * 5
    assert spells.slow({"reference_ms": 1.5}) and not spells.slow({"reference_ms": 1.1})
    assert not spells.slow({"median_ms": 9.0})  # timed without a reference


def test_a_session_in_a_slow_spell_is_timed_again(bundle, tmp_path, monkeypatch) -> None:
    """In a shared machine's slow spell a model and its reference both slow down, by
    different factors, so the normalised row moves. The reference tells the spell, and
    the session is timed again once it has passed."""
    from frontier.latency_models import runner

    path, manifest = bundle
    with zipfile.ZipFile(path) as zf:
        keys = {
            zf.read(m["file"]): m["key"]
            for m in manifest["models"]
            if m["kind"] in ("calibration", "validation")
        }
    opened: dict[bytes, int] = {}
    spell = {"on": False}
    spelled: set[str] = set()
    real_open = runner.open_session

    def open_session(data: bytes, *args, **kwargs):
        run, feeds = real_open(data, *args, **kwargs)
        seen = sum(opened.get(d, 0) for d in keys)
        opened[data] = opened.get(data, 0) + 1
        # a whole model's first session falls in a spell, once the gate has seen enough
        # sessions to know the calm level; opening any other session ends it
        spell["on"] = data in keys and opened[data] == 1 and seen > runner.SlowSpells.MIN_SEEN
        if spell["on"]:
            spelled.add(keys[data])
        extra_ms = 5.0 if data in keys else 1.0  # the model, or its reference

        def timed_run():
            if spell["on"]:
                _busy(extra_ms)
            return run()

        return timed_run, feeds

    monkeypatch.setattr(runner, "open_session", open_session)
    out = tmp_path / "spells.csv"
    measure_bundle(path, out, device="d", time_cap_s=0.02, sessions=1)
    rows = {r["key"]: r for r in csv.DictReader(out.open())}
    # the MLP runs in tens of microseconds; in the spell each run took 5 ms more
    assert spelled and max(float(rows[k]["median_ms"]) for k in spelled) < 0.5
    assert all(opened[d] >= 2 for d, k in keys.items() if k in spelled)
    meta = json.loads((tmp_path / "spells.csv.meta.json").read_text())
    assert meta["slow_sessions_retimed"] >= len(spelled)  # (and any real spell here)
