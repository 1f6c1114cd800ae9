"""The PyTorch device runner (``runner_torch``): the same models as ONNX Runtime runs,
the same protocol and files, INT8 recorded as unsupported. Run on the CPU here; on a GPU
the only difference is the timer (CUDA events)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from frontier.experiments import DigitsTask
from frontier.latency_models import (
    DeviceStore,
    LatencyModel,
    measure_bundle,
    runner,
    runner_torch,
    write_bundle,
)
from frontier.spaces import SpaceOptions, discover

RUNNER_TORCH = Path(runner_torch.__file__)


@pytest.fixture(scope="module")
def cnn_fp32_bundle(tmp_path_factory):
    """The digits CNN's space without INT8: convolutions, pooling, GEMM."""
    task = DigitsTask(model="cnn")
    model, x = task.new_model().eval(), task.example_inputs()  # latency needs no training
    options = SpaceOptions(prune_ratios=(0.0, 0.5), weight_bits=(32,), act_bits=(32,), round_to=4)
    space = discover(model, x, options)
    path = tmp_path_factory.mktemp("cnn") / "ops.zip"
    write_bundle(path, model=model, example_inputs=x, space=space, calibration=8, validation=3)
    return path


def _models(bundle: Path):
    with zipfile.ZipFile(bundle) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        for entry in manifest["models"]:
            yield entry, zf.read(entry["file"])


def test_pytorch_computes_what_onnx_runtime_computes(cnn_fp32_bundle):
    backend = runner_torch.TorchBackend("cpu")
    options = runner.session_options(1)
    checked = 0
    for entry, data in _models(cnn_fp32_bundle):
        run, feeds = backend.open(data, entry, batch_size=1, rng=np.random.default_rng(0))
        got = run()
        session = runner.inference_session(data, options, **runner.weights_of(entry))
        want = session.run(None, {k: v.numpy() for k, v in feeds.items()})
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape, entry["id"]
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-4, atol=1e-5 * np.abs(w).max())
        checked += 1
    kinds = {e["kind"] for e, _ in _models(cnn_fp32_bundle)}
    assert checked > 10 and {"op", "calibration", "validation"} <= kinds


def test_int8_models_are_unsupported_not_faked(bundle, tmp_path):
    path, _ = bundle  # the MLP space with INT8 choices
    out = tmp_path / "t.csv"
    measure_bundle(
        path, out, device="t", rounds=1, round_s=0.002, backend=runner_torch.TorchBackend("cpu")
    )
    with out.open() as f:
        rows = list(csv.DictReader(f))
    int8 = [r for r in rows if r["kind"] == "op" and r["precision"] == "int8"]
    fp32 = [r for r in rows if r["kind"] == "op" and r["precision"] == "fp32"]
    assert int8 and all(r["status"] == "unsupported" and "INT8" in r["error"] for r in int8)
    assert fp32 and all(r["status"] == "ok" and float(r["median_ms"]) > 0 for r in fp32)


def test_script_on_a_device_writes_a_table_frontier_imports(cnn_fp32_bundle, tmp_path):
    """As on a GPU machine: runner_torch.py run as a script (beside runner.py, no
    package), then ``lut import`` here; the table's protocol names its engine."""
    out = tmp_path / "gpu.csv"
    args = [sys.executable, str(RUNNER_TORCH), str(cnn_fp32_bundle), "--device", "gpu"]
    args += ["--out", str(out), "--torch-device", "cpu", "--rounds", "1", "--round-s", "0.002"]
    done = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    meta = json.loads(Path(str(out) + ".meta.json").read_text())
    assert meta["provider"] == "torch-cpu-graph" and "torch" in meta  # graph by default
    table = DeviceStore(tmp_path / "store").import_table(out, name="gpu")
    lm = LatencyModel(table)
    (plan_row,) = table.whole_models("validation")[:1]
    specs = [lm.spec_of(k) for k in table.models[plan_row.key]["op_keys"]]
    assert lm.predict_ops(specs).latency_ms > 0


def test_bad_bundle_is_exit_2(tmp_path):
    bad = tmp_path / "x.zip"
    bad.write_text("not a zip")
    args = [sys.executable, str(RUNNER_TORCH), str(bad), "--device", "g", "--out"]
    done = subprocess.run(
        [*args, str(tmp_path / "o.csv"), "--torch-device", "cpu"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "not a readable op bundle" in done.stderr


def test_reduce_mean_with_axes_as_an_attribute_runs(tmp_path):
    """``x.mean([2, 3])`` exports (opset 17) as ReduceMean with an ``axes`` attribute,
    as MnasNet's head does: PyTorch computes what ONNX Runtime computes."""
    import torch

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.conv(x).relu().mean([2, 3]))

    path = tmp_path / "head.onnx"
    torch.onnx.export(Head().eval(), (torch.randn(1, 3, 16, 16),), str(path), opset_version=17,
                      dynamo=False)  # fmt: skip
    data = path.read_bytes()
    run, feeds = runner_torch.TorchBackend("cpu").open(
        data, {}, batch_size=1, rng=np.random.default_rng(0)
    )
    session = runner.inference_session(data, runner.session_options(1))
    want = session.run(None, {k: v.numpy() for k, v in feeds.items()})
    np.testing.assert_allclose(run()[0].numpy(), want[0], rtol=1e-4, atol=1e-5)


def test_the_graph_runner_records_the_launch_floor_host_time_and_energy(cnn_fp32_bundle, tmp_path):
    """The deployed-GPU backend on a CPU: no graph to capture, but every whole model's
    row records its eager time, host time and (from the counter given) energy, and the
    table's power is read from those energies."""
    clock = {"mj": 0.0}

    def counter() -> float:  # a device drawing 50 W while it runs: 50 J a second
        import time

        now = time.perf_counter()
        clock["mj"] += 50_000.0 * (now - clock.setdefault("t", now))
        clock["t"] = now
        return clock["mj"]

    backend = runner_torch.GraphBackend("cpu", energy=counter, energy_window_s=0.05)
    out = tmp_path / "g.csv"
    measure_bundle(cnn_fp32_bundle, out, device="g", rounds=1, round_s=0.002, backend=backend)
    with out.open() as f:
        rows = list(csv.DictReader(f))
    whole = [r for r in rows if r["kind"] in ("calibration", "validation", "baseline")]
    ops = [r for r in rows if r["kind"] == "op"]
    assert whole and all(float(r["eager_ms"]) > 0 and float(r["host_ms"]) > 0 for r in whole)
    assert all(r["energy_mj"] for r in whole) and not any(r["energy_mj"] for r in ops)
    # energy per run is the counter's 50 W times each run's host time (W x ms = mJ)
    for r in whole:
        assert float(r["energy_mj"]) == pytest.approx(50.0 * float(r["host_ms"]), rel=0.05)
    meta = json.loads(Path(str(out) + ".meta.json").read_text())
    assert "warmup_s" not in meta["protocol"]  # a GPU's warm-up by time; a CPU's by runs
    assert meta["execution"].startswith("eager")


def test_energy_per_run_divides_the_counter_by_the_replays() -> None:
    ticks = iter(range(100))
    state = {"runs": 0}

    def run() -> None:
        state["runs"] += 1

    energy, host = runner_torch.energy_per_run(
        run, lambda: 7.0 * state["runs"], window_s=5, clock=lambda: float(next(ticks))
    )
    # 7 mJ a run on the counter, 1 s a run on the (fake) clock
    assert energy == pytest.approx(7.0) and host == pytest.approx(1000.0)


@pytest.fixture(scope="module")
def cnn_half_bundle(tmp_path_factory):
    """The digits CNN's space at 16 or 32 bits, as a GPU's bundle: FP16 op models and
    whole models whose 16-bit layers run in FP16."""
    task = DigitsTask(model="cnn")
    model, x = task.new_model().eval(), task.example_inputs()
    options = SpaceOptions(
        prune_ratios=(0.0, 0.5), weight_bits=(16, 32), act_bits=(32,), round_to=4
    )
    space = discover(model, x, options)
    path = tmp_path_factory.mktemp("cnn16") / "ops.zip"
    write_bundle(
        path, model=model, example_inputs=x, space=space, calibration=8, validation=0, half=True
    )
    return path


def test_the_half_bundle_runs_in_fp16_as_onnx_runtime_does(cnn_half_bundle):
    """What the CUDA test below checks on a GPU, checked here on the CPU: every model
    of a GPU's bundle runs, FP16 ones included, and computes what ONNX Runtime does."""
    backend = runner_torch.TorchBackend("cpu")
    precisions = set()
    for entry, data in _models(cnn_half_bundle):
        _agrees_with_onnx_runtime(backend, entry, data, tol=2e-2)
        precisions.add(entry.get("precision", ""))
    assert "fp16" in precisions


def _agrees_with_onnx_runtime(backend, entry, data, *, tol: float):
    """``backend``'s run of a bundle model at batch 2, checked against ONNX Runtime's on
    the same inputs (shapes, and values within ``tol`` of the output's scale); the run
    and its inputs."""
    run, feeds = backend.open(data, entry, batch_size=2, rng=np.random.default_rng(0))
    session = runner.inference_session(data, runner.session_options(1), **runner.weights_of(entry))
    want = session.run(None, {k: v.numpy() for k, v in feeds.items()})
    for g, w in zip(run(), want, strict=True):
        assert tuple(g.shape) == w.shape, entry["id"]
        scale = float(np.abs(w).max()) or 1.0
        np.testing.assert_allclose(g.float().numpy(), w, rtol=tol, atol=tol * scale)
    return run, feeds


@pytest.fixture(scope="module", params=["fp32", "fp16"], ids=str)
def text_bundle(request, tmp_path_factory):
    """A text student's space (heads, FFN widths, dropped layers) as a GPU measures it:
    LayerNorm, GELU's Erf, the masked mean pooling, embeddings and int64 token ids."""
    import torch

    from frontier.spaces import TextTransformer, TransformerShape

    shape = TransformerShape(vocab_size=50, max_positions=12, hidden=96, heads=(4, 4, 4),
                             ffn=(64, 64, 64), head_dim=24, num_classes=3)  # fmt: skip
    torch.manual_seed(0)
    model = TextTransformer(shape).eval()
    ids = torch.randint(1, 50, (1, 12))
    half = request.param == "fp16"
    options = SpaceOptions(
        prune_ratios=(0.0,),
        weight_bits=(16, 32) if half else (32,),
        act_bits=(32,),
        techniques={"transformer-prune": {}, "layer-drop": {}},
    )
    space = discover(model, ids, options)
    path = tmp_path_factory.mktemp("text") / "ops.zip"
    write_bundle(path, model=model, example_inputs=ids, space=space, calibration=8,
                 validation=2, half=half, batch_size=2)  # fmt: skip
    return path


def test_a_text_bundle_travels_without_its_embeddings_or_fp16_weights(text_bundle):
    """An embedding table and FP16 weights are left to the runner's seed, as FP32 and
    INT8 weights are: a MiniLM whole model keeps its 47 MB table out of the bundle."""
    import onnx

    dtypes, whole = set(), 0
    for entry, data in _models(text_bundle):
        layout = {name: dtype for name, dtype, _ in entry.get("weights", [])}
        dtypes |= set(layout.values())
        if entry["kind"] in ("calibration", "validation", "baseline"):
            assert "word.weight" in layout, entry["id"]
            whole += 1
        big = [i for i in onnx.load_from_string(data).graph.initializer if len(i.raw_data) > 4096]
        assert not big, (entry["id"], [i.name for i in big])
    assert whole >= 10
    assert ("float16" in dtypes) == bool(runner.read_manifest(text_bundle).get("half"))


def test_a_text_student_runs_on_the_gpu_runner_as_onnx_runtime_runs_it(text_bundle):
    """Every op model and whole model of a text space runs as PyTorch and computes what
    ONNX Runtime does; a whole model's shape arithmetic (Shape, Gather of a dimension,
    Range, Concat) is computed once before the runs, so none of it is left to run."""
    backend = runner_torch.TorchBackend("cpu")
    whole, ops = 0, set()
    for entry, data in _models(text_bundle):
        run, feeds = _agrees_with_onnx_runtime(backend, entry, data, tol=1e-2)
        left = set(run.graph.op_types.values())
        if entry["kind"] in ("calibration", "validation", "baseline"):
            assert [v.dtype for v in feeds.values()] == [__import__("torch").int64]
            assert not left & {"Shape", "Range", "Concat"}, entry["id"]
            whole += 1
        ops |= left
    assert whole >= 10
    assert {"LayerNormalization", "Erf", "ReduceSum", "Gather", "Softmax", "MatMul"} <= ops


@pytest.mark.skipif(
    not __import__("torch").cuda.is_available(),
    reason="needs a CUDA GPU: checks that a captured CUDA graph's replay returns what eager "
    "PyTorch computes and what ONNX Runtime computes on the CPU, FP32 and FP16, and is timed",
)
@pytest.mark.parametrize("which", ["fp32", "fp16"])
def test_a_captured_graph_replays_what_eager_computes(
    which, cnn_fp32_bundle, cnn_half_bundle
):  # pragma: no cover
    """Tolerances: FP32 within 1e-2 of the output's scale (cuDNN's TF32 convolutions,
    PyTorch's default, keep 10 mantissa bits); FP16 within 3e-2."""
    import torch

    bundle = cnn_fp32_bundle if which == "fp32" else cnn_half_bundle
    tol = 1e-2 if which == "fp32" else 3e-2
    backend = runner_torch.GraphBackend("cuda")
    checked = 0
    for entry, data in _models(bundle):
        if entry["kind"] not in ("calibration", "op"):
            continue
        replay, feeds = backend.open(data, entry, batch_size=4, rng=np.random.default_rng(0))
        for t in feeds.values():  # new inputs where the graph reads them
            t.copy_(torch.randn_like(t))
        got = [o.clone() for o in replay()]
        torch.cuda.synchronize()
        eager = replay.eager()
        session = runner.inference_session(
            data, runner.session_options(1), **runner.weights_of(entry)
        )
        cpu = session.run(None, {k: v.cpu().numpy() for k, v in feeds.items()})
        for g, e, c in zip(got, eager, cpu, strict=True):
            scale = float(np.abs(c).max()) or 1.0
            np.testing.assert_allclose(g.float().cpu().numpy(), e.float().cpu().numpy(),
                                       rtol=1e-3, atol=1e-3 * scale)  # fmt: skip
            np.testing.assert_allclose(g.float().cpu().numpy(), c, rtol=tol, atol=tol * scale)
        assert backend.timer(replay) > 0
        checked += 1
        if checked >= 6:
            break
    assert checked >= 6


def test_the_runner_takes_the_bundles_batch_and_import_refuses_a_mixed_one(tmp_path):
    """A batch-4 bundle is timed at batch 4 without being told; asked for batch 1 the
    runner refuses (exit 2, one line); a table whose metadata says its whole models ran
    at another batch than its ops is refused on import, naming both."""
    task = DigitsTask(model="mlp")
    model, x = task.new_model().eval(), task.example_inputs()
    space = discover(
        model, x, SpaceOptions(prune_ratios=(0.0, 0.5), weight_bits=(32,), act_bits=(32,))
    )
    bundle = tmp_path / "b4.zip"
    write_bundle(bundle, model=model, example_inputs=x, space=space, calibration=8, batch_size=4)
    out = tmp_path / "t.csv"
    measure_bundle(
        bundle, out, device="t", rounds=1, round_s=0.002, backend=runner_torch.TorchBackend("cpu")
    )
    meta_path = Path(str(out) + ".meta.json")
    meta = json.loads(meta_path.read_text())
    assert meta["batch_size"] == meta["op_batch_size"] == 4
    DeviceStore(tmp_path / "store").import_table(out, name="b4")  # consistent: imported

    args = [sys.executable, str(RUNNER_TORCH), str(bundle), "--device", "g", "--out"]
    done = subprocess.run([*args, str(tmp_path / "o.csv"), "--torch-device", "cpu", "--batch-size", "1"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "built at batch 4" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1

    meta_path.write_text(json.dumps({**meta, "batch_size": 1}))  # as the old runner wrote it
    from frontier.latency_models import TableError

    with pytest.raises(
        TableError, match="whole models timed at batch 1, op models built at batch 4"
    ):
        DeviceStore(tmp_path / "store2").import_table(out, name="mixed")
