"""At the end of a search every front member's exported model is timed here, beside the
latency its device table predicted."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from frontier.search import run
from frontier.search.cli import main


@pytest.mark.slow
def test_every_front_member_is_measured_beside_its_prediction(write_config, capsys) -> None:
    path = write_config(
        objectives=[{"name": "accuracy", "options": {"steps": 20}}, "latency_ms@local-cpu"],
        constraints=[],
        search={"trials": 8, "population": 4, "fidelity": {"rungs": ["proxy", "short"]}},
        carbon={"intensity_g_per_kwh": 100.0, "price_per_kwh": 0.25},
    )
    result = run(path, progress=False)
    client = MlflowClient(
        tracking_uri=f"sqlite:///{Path.cwd() / 'mlflow.db'}"
    )  # absolute: cached by URI
    parent = client.get_run(result.mlflow_run_id)
    runs = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{result.mlflow_run_id}'",
    )
    measured = {
        int(r.data.tags["frontier.trial"]): r.data.metrics
        for r in runs
        if "latency_measured_ms/local-cpu" in r.data.metrics
    }
    assert set(measured) == set(result.pareto.trial)  # the front, and only the front
    # the uncompressed model, timed beside them, on the parent; the table's figure of it
    now_base = parent.data.metrics["baseline_latency_measured_ms/local-cpu"]
    table_base = json.loads(parent.data.tags["frontier.baseline"])["latency_ms@local-cpu"]
    gaps = []
    for metrics in measured.values():
        ratio = metrics["latency_ms/local-cpu"] / metrics["latency_measured_ms/local-cpu"]
        assert 0.2 < ratio < 5  # a prediction and a measurement of the same model
        # predicted against measured speed-up over the uncompressed model
        gaps.append(abs(ratio * now_base / table_base - 1))
    # the parent's error is the median gap of the members' speed-ups
    assert parent.data.metrics["latency_error/local-cpu"] == pytest.approx(
        float(np.median(gaps)), rel=1e-3
    )
    # the measured members joined the table's calibration, each at its measured ratio to
    # the uncompressed model (timed in the same rounds), stated against the table's own
    # measurement of it: one factor for all, the machine's speed then against now
    from frontier.latency_models import DeviceStore

    table = DeviceStore().load("local-cpu")
    learned = sorted(
        r.median_ms for r in table.whole_models("calibration") if r.key.startswith("front-")
    )
    # members sampled with the same plan are one model measured twice: one row, their median
    same_plan: dict[str, list[float]] = {}
    for r in runs:
        if "latency_measured_ms/local-cpu" in r.data.metrics:
            plan = json.dumps(r.data.params, sort_keys=True)
            same_plan.setdefault(plan, []).append(r.data.metrics["latency_measured_ms/local-cpu"])
    now = [float(np.median(ms)) for ms in same_plan.values()]

    def joined(factor: float) -> bool:
        return all(any(m == pytest.approx(ms * factor, rel=1e-4) for m in learned) for ms in now)

    assert any(joined(m / now[0]) and 0.5 < m / now[0] < 2 for m in learned)
    capsys.readouterr()
    assert main(["pareto", "--experiment", "tiny"]) == 0
    shown = capsys.readouterr().out
    assert "pred/meas@local-cpu" in shown and "serving_" not in shown

    # a year of serving, for each member, against the baseline the search measured
    baseline = json.loads(parent.data.tags["frontier.baseline"])["latency_ms@local-cpu"]
    search_co2e = parent.data.metrics.get("search_co2e_g")
    for r in runs:
        m = r.data.metrics
        if int(r.data.tags["frontier.trial"]) not in measured:
            assert not any(k.startswith("serving_") for k in m)  # front members only
            continue
        saved_ms = m["serving_latency_saved_ms/local-cpu"]
        assert saved_ms == pytest.approx(baseline - m["latency_ms/local-cpu"])
        kwh = m["serving_energy_saved_kwh/local-cpu"]
        assert (kwh > 0) == (saved_ms > 0)  # energy is latency x the device's power
        assert m["serving_co2e_saved_g/local-cpu"] == pytest.approx(kwh * 100.0)
        assert m["serving_money_saved/local-cpu"] == pytest.approx(kwh * 0.25)
        day = m.get("serving_breakeven_day_co2e/local-cpu")
        if search_co2e and kwh > 0:
            assert day == pytest.approx(search_co2e / (kwh * 100.0 / 365))
    assert main(["pareto", "--experiment", "tiny", "--savings", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all("serving_co2e_saved_g@local-cpu" in row for row in rows)
    assert main(["pick", "--best", "latency_ms@local-cpu", "--no-measure"]) == 0
    picked = json.loads(capsys.readouterr().out)
    assert picked["serving"]["serving_latency_saved_ms@local-cpu"] > 0  # the fastest member
    # pick times its model beside the uncompressed one the search logged on the parent,
    # and compares speed-ups, which a change of the machine's speed does not move
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "baseline")} == {
        "baseline/model.onnx"
    }
    assert main(["pick", "--best", "latency_ms@local-cpu", "--export", "fastest"]) == 0
    picked = json.loads(capsys.readouterr().out)
    speedup = picked["speedup"]["local-cpu"]
    assert speedup["priced"] == pytest.approx(baseline / picked["metrics"]["latency_ms@local-cpu"])
    assert 0.5 < speedup["measured"] / speedup["priced"] < 2
    assert picked["latency_measured_ms"]["local-cpu"] > 0

    # each member profiled layer by layer beside the baseline
    import pandas as pd

    for r in runs:
        if int(r.data.tags["frontier.trial"]) in measured:
            names = {a.path for a in client.list_artifacts(r.info.run_id, "profile")}
            assert names == {"profile/profile.csv", "profile/profile.png"}
            local = client.download_artifacts(r.info.run_id, "profile/profile.csv")
            layers = pd.read_csv(local)
            assert {"layer", "ms", "macs", "base_ms", "base_macs"} <= set(layers.columns)
            assert (layers.ms > 0).any() and (layers.base_ms > 0).any()
            # each layer's price in the device table, beside its time in the whole model
            assert {"table_ms", "base_table_ms"} <= set(layers.columns)
            # every compute layer priced (an op unknown to the table is NaN, not free); an
            # op that ran alone within the table's session overhead is priced 0
            priced = layers[layers.macs > 0].table_ms
            assert priced.notna().all() and (priced >= 0).all() and priced.sum() > 0

    # frontier profile RUN_ID --device: the same prices, by hand
    member = next(r for r in runs if int(r.data.tags["frontier.trial"]) in measured)
    capsys.readouterr()
    args = ["profile", member.info.run_id, "--device", "local-cpu", "--runs", "10"]
    assert main([*args, "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)["layers"]
    priced = [row["table_ms"] for row in shown if row["macs"] > 0]
    assert all(ms >= 0 for ms in priced) and sum(priced) > 0  # NaN fails both
    assert main(["profile", "model.onnx", "--device", "local-cpu"]) == 2  # a file: no plan
    assert "--device needs a run id" in capsys.readouterr().err


@pytest.mark.slow
def test_a_front_measured_on_a_remote_device_lands_on_its_trials(
    write_config, workdir: Path, capsys
) -> None:
    """lut front -> the device runner (a process of its own, as on the device) -> lut
    import: each front member's run gets the device's measured latency, and the
    baseline, measured beside them, each member's speed-up there."""
    import subprocess
    import sys

    path = write_config(
        objectives=[{"name": "accuracy", "options": {"steps": 20}}, "size_bytes"],
        constraints=[],
        metrics=["latency_ms@local-cpu"],  # the store gets a table of this space
        search={"trials": 6, "population": 3, "fidelity": {"rungs": ["proxy"]}},
        tracking={"measure_front": False},
    )
    result = run(path, progress=False)
    bundle = workdir / "front.zip"
    assert main(["lut", "front", "--device", "edge-box", "--out", str(bundle)]) == 0
    out = workdir / "device" / "edge-box-front.csv"
    out.parent.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "frontier.latency_models.runner", str(bundle),
         "--device", "edge-box", "--out", str(out), "--rounds", "2", "--round-s", "0.02"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    capsys.readouterr()
    assert main(["lut", "import", str(out)]) == 0
    said = capsys.readouterr().out
    assert "attached" in said and "no device table named 'edge-box'" in said
    assert said.count("the baseline's speed there") == len(result.pareto)

    # with a table of that device in the store, the measurements join its calibration
    import shutil

    from frontier.latency_models import DeviceStore

    store = DeviceStore()
    shutil.copytree(store.root / "devices" / "local-cpu", store.root / "devices" / "edge-box")
    assert main(["lut", "import", str(out)]) == 0
    assert "members joined edge-box's calibration" in capsys.readouterr().out
    stored = {r.key: r.median_ms for r in store.load("edge-box").whole_models("calibration")}
    manifest = json.loads(Path(str(out) + ".manifest.json").read_text())
    key_of = {e["key"]: e["calibration_key"] for e in manifest["models"]}
    with out.open() as f:
        timed = {r["key"]: float(r["median_ms"]) for r in csv.DictReader(f) if r["kind"] == "front"}
    parent = manifest["front"]["parent"]
    assert all(e["weights"] for e in manifest["models"])  # stripped: drawn on the device
    assert len(timed) == len(result.pareto) + 1  # and the baseline, under the search's run
    for run_id, ms in timed.items():  # each member's row holds what the device measured
        assert stored[key_of[run_id]] == pytest.approx(ms)
    from mlflow import MlflowClient

    tracking = f"sqlite:///{Path.cwd() / 'mlflow.db'}"  # the search's, not global state
    logged = MlflowClient(tracking_uri=tracking).get_run(parent).data.metrics
    assert logged["baseline_latency_measured_ms/edge-box"] == pytest.approx(timed[parent])
    assert main(["pareto", "--experiment", "tiny", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["trial"] for r in rows} == set(result.pareto.trial)
    assert all(r["latency_measured_ms@edge-box"] > 0 for r in rows)


def test_a_machine_faster_now_than_its_table_flags_no_member() -> None:
    """A table built while the machine ran slowly (the uncompressed model at 9.8 us)
    predicts a member at 7.2 us; at the end the machine runs everything 1.6x faster
    (the uncompressed model at 6.1 us, the member at 4.5 us). ``frontier pareto``'s
    check compares speed-ups (1.36x against 1.36x): not off. A member whose speed-up the
    table got wrong is still flagged."""
    from types import SimpleNamespace

    import pandas as pd

    from frontier.search.tracking._results import latency_checks

    parent = SimpleNamespace(
        data=SimpleNamespace(
            tags={"frontier.baseline": json.dumps({"latency_ms@local-cpu": 0.0098})},
            metrics={"baseline_latency_measured_ms/local-cpu": 0.0098 / 1.6},
        )
    )
    frame = pd.DataFrame(
        {
            "trial": [1, 2],
            "latency_ms@local-cpu": [0.0072, 0.0072],
            "latency_measured_ms@local-cpu": [0.0072 / 1.6, 0.0098 / 1.6],
        }
    )
    shown = latency_checks(frame, parent)["pred/meas@local-cpu"].tolist()
    assert shown == ["1.00", "0.73 !"]
    # without the uncompressed model's measurement: milliseconds against milliseconds
    assert latency_checks(frame)["pred/meas@local-cpu"].tolist() == ["1.60 !", "1.18 !"]
