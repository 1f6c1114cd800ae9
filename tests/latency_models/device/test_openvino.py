"""OpenVINO as a second runtime: ``local-openvino`` measures op bundles and ONNX exports
with OpenVINO's CPU plugin (INT8 in QDQ format: ONNX Runtime's QOperator format OpenVINO
does not convert), and its table predicts its own whole models; the runner times with it
on a remote device (``--runtime openvino``); ``pick`` writes its IR; without the package,
naming the device is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from frontier.experiments import DigitsTask
from frontier.latency_models import (
    DeviceStore,
    LatencyModel,
    error_summary,
    local_device,
    measure_bundle,
    runner,
    write_bundle,
)
from frontier.spaces import SpaceOptions, discover
from tests.latency_models.measure.test_cli import CONFIG

pytest.importorskip("openvino")
RUNNER = Path(runner.__file__)
ROOT = Path(__file__).resolve().parents[3]


def _cnn_bundle(
    path: Path, bits: tuple[int, ...], calibration: int, validation: int, qdq: bool = False
) -> Path:
    task = DigitsTask(model="cnn")
    model, x = task.new_model().eval(), task.example_inputs()
    options = SpaceOptions(prune_ratios=(0.0, 0.5), weight_bits=bits, act_bits=bits, round_to=4)
    space = discover(model, x, options)
    write_bundle(path, model=model, example_inputs=x, space=space, calibration=calibration,
                 validation=validation, calibration_data=task.calibration_batches(),
                 qdq=qdq)  # fmt: skip
    return path


def _bound(mape: float, table) -> float:
    """A prediction is judged no finer than its table repeats itself: ``mape`` widened by
    the table's own noise band. The digits CNN's models run in tens of microseconds, and
    a CI machine's neighbours move them by tens of percent: a prediction is an op sum
    against a whole model, each measured under that noise, so its error is the
    predictor's own plus the noise (CI once saw 21% against a 15% band)."""
    noise = table.device_meta.noise_pct
    assert noise is not None, "a table built by measure_bundle states its noise band"
    return mape + noise / 100


@pytest.fixture(scope="module")
def cnn_bundle(tmp_path_factory):
    """The digits CNN's space in FP32 (what OpenVINO runs of Frontier's exports), with
    validation plans."""
    return _cnn_bundle(tmp_path_factory.mktemp("ov") / "ops.zip", (32,), 12, 12)


def test_openvino_computes_what_onnx_runtime_computes(cnn_bundle) -> None:
    ov = runner.OvBackend(1, "f32")
    options = runner.session_options(1)
    checked = 0
    with zipfile.ZipFile(cnn_bundle) as zf:
        for entry in json.loads(zf.read("manifest.json"))["models"]:
            data = zf.read(entry["file"])
            run, feeds = ov.open(data, entry, batch_size=1, rng=np.random.default_rng(0))
            got = list(run().values())
            session = runner.inference_session(data, options, **runner.weights_of(entry))
            want = session.run(None, feeds)
            scale = float(np.abs(want[0]).max()) or 1.0
            np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4 * scale)
            checked += entry["kind"] in ("calibration", "validation")
    assert checked == 24


def test_int8_models_are_unsupported_and_say_why(tmp_path) -> None:
    """ONNX Runtime's INT8 operators (QOperator) are not what OpenVINO reads: those rows
    are unsupported, each naming the operators and the format OpenVINO wants."""
    bundle = _cnn_bundle(tmp_path / "mixed.zip", (8, 32), 0, 0)
    out = tmp_path / "t.csv"
    measure_bundle(bundle, out, device="t", rounds=1, round_s=0.002, backend=runner.OvBackend())
    import csv

    with out.open() as f:
        rows = list(csv.DictReader(f))
    int8 = [r for r in rows if r["precision"].startswith("int8") and r["kind"] == "op"]
    fp32 = [r for r in rows if r["precision"] == "fp32" and r["kind"] == "op"]
    assert fp32 and all(r["status"] == "ok" for r in fp32)
    # the weighted INT8 ops are refused (a QLinearConv whose input and output channels
    # are equal loads, its per-channel scales read along the wrong axis: not a price to
    # trust either); Quantize/DequantizeLinear alone load
    refused = [r for r in int8 if r["status"] == "unsupported"]
    assert len(refused) >= 10 and all("QDQ" in r["error"] for r in refused)
    assert {"QLinearConv", "QGemm"} <= {w.strip(",") for r in refused for w in r["error"].split()}


def test_the_runner_times_with_openvino_and_its_table_predicts_its_whole_models(
    cnn_bundle, tmp_path
) -> None:
    """``runner.py --runtime openvino`` writes a table the store imports; its threads
    and precision are recorded; it predicts its own validation plans (a loose bound:
    this test runs beside others; the benchmark holds the real target)."""
    out = tmp_path / "ov.csv"
    args = [sys.executable, str(RUNNER), str(cnn_bundle), "--device", "nuc", "--out", str(out),
            "--runtime", "openvino", "--threads", "1", "--rounds", "3", "--round-s", "0.05"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    meta = json.loads(Path(str(out) + ".meta.json").read_text())
    assert meta["provider"] == "openvino-CPU" and meta["precision_hint"] == "f32"
    assert meta["threads"] == meta["protocol"]["threads"] == 1
    table = DeviceStore(tmp_path / "store").import_table(out, name="nuc")
    assert not [r for r in table.rows if r.status != "ok"]  # every FP32 op runs
    lm = LatencyModel(table)
    pred, meas = [], []
    for row in table.whole_models("validation"):
        pred.append(
            lm.predict_ops([lm.spec_of(k) for k in table.models[row.key]["op_keys"]]).latency_ms
        )
        meas.append(row.median_ms)
    summary = error_summary(pred, meas)
    assert summary["samples"] == 12 and summary["mape"] < _bound(0.15, table), summary


def test_a_backend_is_recorded_with_its_own_threads(cnn_bundle, tmp_path) -> None:
    """A table measured through a backend states the threads that backend ran with,
    not a separate argument's."""
    out = tmp_path / "t.csv"
    measure_bundle(cnn_bundle, out, device="t", rounds=1, round_s=0.002,
                   kinds=("overhead",), backend=runner.OrtBackend(threads=2))  # fmt: skip
    meta = json.loads(Path(str(out) + ".meta.json").read_text())
    assert meta["threads"] == meta["protocol"]["threads"] == 2


def test_local_openvino_is_a_device_of_this_machine() -> None:
    device = local_device("local-openvino-2t")
    assert device is not None and device.kind == "openvino" and not device.unavailable()
    backend = device.backend()
    assert backend.threads == 2 and backend.describe()["precision_hint"] == "f32"


def test_without_openvino_naming_the_device_is_one_line_and_exit_2(tmp_path) -> None:
    hide = tmp_path / "site"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import importlib.abc, importlib.util, sys\n"
        "_find = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda n, p=None: None if n.split('.')[0] == 'openvino' else _find(n, p)\n"
        "class H(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, n, p, t=None):\n"
        "        if n.split('.')[0] == 'openvino': raise ModuleNotFoundError(n)\n"
        "sys.meta_path.insert(0, H())\n"
    )
    config = tmp_path / "c.yaml"
    objectives = ["accuracy", "latency_ms@local-openvino"]
    config.write_text(yaml.safe_dump({**CONFIG, "objectives": objectives,
                                      "device_store": str(tmp_path / "store")}))  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(hide)}
    frontier = Path(sys.executable).with_name("frontier")
    done = subprocess.run([str(frontier), "search", str(config)], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=300)  # fmt: skip
    err = done.stderr.strip()
    assert done.returncode == 2, err
    assert len(err.splitlines()) == 1 and "pip install 'frontier[openvino]'" in err, err


@pytest.fixture(scope="module")
def qdq_bundle(tmp_path_factory):
    """The digits CNN's space with INT8 or FP32 layers, INT8 in QDQ format."""
    return _cnn_bundle(tmp_path_factory.mktemp("qdq") / "ops.zip", (8, 32), 12, 12, qdq=True)


def test_a_qdq_bundle_runs_every_int8_op_on_openvino_and_predicts_its_plans(
    qdq_bundle, tmp_path
) -> None:
    """With INT8 in QDQ format every op runs on OpenVINO, INT8 kernels included, and
    the table predicts its own mixed-precision validation plans (a loose bound: this test
    runs beside others; the benchmark holds the real target)."""
    out = tmp_path / "t.csv"
    measure_bundle(qdq_bundle, out, device="t", rounds=3, round_s=0.05,
                   backend=runner.OvBackend())  # fmt: skip
    table = DeviceStore(tmp_path / "store").import_table(out, name="t")
    assert table.device_meta.int8_qdq
    failed = [(r.key, r.status) for r in table.rows if r.status != "ok"]
    assert not failed, failed[:5]
    int8 = [r for r in table.rows if r.kind == "op" and r.precision.startswith("int8")]
    assert len(int8) >= 10
    lm = LatencyModel(table)
    pred, meas = [], []
    for row in table.whole_models("validation"):
        keys = table.models[row.key]["op_keys"]
        pred.append(lm.predict_ops([lm.spec_of(k) for k in keys]).latency_ms)
        meas.append(row.median_ms)
    summary = error_summary(pred, meas)
    assert summary["samples"] == 12 and summary["mape"] < _bound(0.2, table), summary


def test_openvino_runs_a_qdq_export_as_onnx_runtime_runs_its_qoperator_twin(tmp_path) -> None:
    """An all-INT8 plan exported twice (QOperator for ONNX Runtime, QDQ for OpenVINO)
    computes alike on each runtime, and the IR ``pick`` writes for OpenVINO loads and
    computes what the QDQ file computes."""
    import openvino as ov

    from frontier.latency_models import runtime_of
    from frontier.spaces import apply_plan, export_onnx

    task = DigitsTask(model="cnn")
    model, x = task.new_model().eval(), task.example_inputs()
    space = discover(model, x, SpaceOptions(prune_ratios=(0.0,), weight_bits=(8,), act_bits=(8,)))
    plan = space.plan_of(space.sample(0))
    compressed = apply_plan(model, plan, x, calibration_data=task.calibration_batches())
    qop, qdq = tmp_path / "qop.onnx", tmp_path / "model.onnx"
    calibration = task.calibration_batches()
    export_onnx(compressed, plan, x, qop, calibration_data=calibration)
    export_onnx(compressed, plan, x, qdq, calibration_data=calibration, qdq=True)
    feeds = {"input": x.numpy()}
    want = runner.inference_session(qop.read_bytes(), runner.session_options(1)).run(None, feeds)
    core = ov.Core()
    got = core.compile_model(str(qdq), "CPU").create_infer_request().infer(feeds)
    scale = float(np.abs(want[0]).max())
    np.testing.assert_allclose(next(iter(got.values())), want[0], atol=0.05 * scale)
    files = runtime_of("openvino").deploy(qdq)
    assert set(files) == {"model.xml", "model.bin"}
    ir = core.compile_model(str(files["model.xml"]), "CPU").create_infer_request().infer(feeds)
    np.testing.assert_allclose(
        next(iter(ir.values())), next(iter(got.values())), rtol=1e-5, atol=1e-5
    )
    assert runtime_of("cpu").deploy(qop) == {}  # ONNX Runtime loads the ONNX file itself
