"""ONNX export of compressed digits baselines: INT8 that agrees with its simulation."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from frontier.experiments import DigitsTask
from frontier.spaces import CompressionPlan, apply_plan, discover, export_onnx


@pytest.fixture(scope="module", params=["mlp", "cnn"], ids=str)
def task(request) -> DigitsTask:
    return DigitsTask(model=request.param)


def _onnx_top1(path, x: torch.Tensor) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x.numpy()})[0].argmax(axis=1)


def test_int8_export_agrees_with_fake_quant(task: DigitsTask, tmp_path) -> None:
    model = task.baseline()
    example = task.example_inputs()
    space = discover(model, example)
    names = [q.name for q in space.layers]
    prunable = [g.name for g in space.groups]
    plan = CompressionPlan(
        prune={prunable[0]: 0.25},
        weight_bits=dict.fromkeys(names, 8),
        act_bits=dict.fromkeys(names, 8),
    )
    calib = task.calibration_batches()
    compressed = apply_plan(model, plan, example, calibration_data=calib)
    result = export_onnx(compressed, plan, example, tmp_path / "int8.onnx", calibration_data=calib)
    assert result.precision == "int8" and set(result.int8_layers) == set(names)
    ops = {n.op_type for n in onnx.load(str(result.path)).graph.node}
    assert ops & {"QLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger", "ConvInteger"}
    x_test, y_test = task.splits()["test"]
    with torch.no_grad():
        want = compressed(x_test).argmax(dim=1).numpy()
    got = _onnx_top1(result.path, x_test)
    # the pruned plan is not fine-tuned, so some test images sit at near-ties that INT8
    # rounding flips either way (8 of 360 on one baseline): what deploys must score what
    # the search scored, and agree image by image bar those ties
    agree = float((got == want).mean())
    y = y_test.numpy()
    gap = abs(float((got == y).mean()) - float((want == y).mean()))
    assert agree >= 0.97, f"INT8 ONNX agrees with the simulation on {agree:.3f} of the test split"
    assert gap <= 0.015, f"INT8 ONNX accuracy is {gap:.3f} off the simulation's"


def test_mixed_plan_excludes_layers_above_8_bits(task: DigitsTask, tmp_path) -> None:
    model = task.baseline()
    example = task.example_inputs()
    names = [q.name for q in discover(model, example).layers]
    plan = CompressionPlan(
        weight_bits={names[0]: 8, names[-1]: 16}, act_bits={names[0]: 8, names[-1]: 16}
    )
    compressed = apply_plan(model, plan, example, calibration_data=task.calibration_batches())
    result = export_onnx(compressed, plan, example, tmp_path / "mixed.onnx")
    assert result.int8_layers == (names[0],)
    assert names[-1] in result.fp32_layers
    assert names[-1] in result.simulated_bits
    _onnx_top1(result.path, task.splits()["test"][0][:8])


def _int8_kernels_run(path, tmp_path) -> int:
    """How many INT8 Conv/Gemm kernels ONNX Runtime runs for the model at ``path``, after
    its default graph optimizations (read back from the optimized graph)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    nodes = onnx.load(so.optimized_model_filepath).graph.node
    return sum(n.op_type in ("QLinearConv", "QGemm", "QLinearMatMul") for n in nodes)


def test_fp32_layer_between_int8_layers_runs_fp32(task: DigitsTask, tmp_path) -> None:
    """ONNX Runtime quantizes the weights of an FP32 layer that sits between two INT8
    layers unless the export stops it; the plan's FP32 layer must run in FP32."""
    model = task.baseline()
    example = task.example_inputs()
    names = [q.name for q in discover(model, example).layers]
    int8 = [names[0], names[2]]  # names[1] stays FP32 between them
    plan = CompressionPlan(weight_bits=dict.fromkeys(int8, 8), act_bits=dict.fromkeys(int8, 8))
    calib = task.calibration_batches()
    compressed = apply_plan(model, plan, example, calibration_data=calib)
    result = export_onnx(compressed, plan, example, tmp_path / "mixed.onnx", calibration_data=calib)
    assert set(result.int8_layers) == set(int8)
    assert _int8_kernels_run(result.path, tmp_path) == len(int8)
    x_test, _ = task.splits()["test"]
    with torch.no_grad():
        want = compressed(x_test).argmax(dim=1).numpy()
    assert float((_onnx_top1(result.path, x_test) == want).mean()) >= 0.98


def test_low_bits_export_fp32_with_metadata(task: DigitsTask, tmp_path) -> None:
    model = task.baseline()
    example = task.example_inputs()
    name = discover(model, example).layers[0].name
    plan = CompressionPlan(weight_bits={name: 4})
    compressed = apply_plan(model, plan, example)
    with pytest.warns(UserWarning, match="cannot run bit widths below 8"):
        result = export_onnx(compressed, plan, example, tmp_path / "low.onnx")
    assert result.precision == "fp32"
    meta = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    assert CompressionPlan.from_json(meta["frontier.plan"]) == plan
    assert '"' + name + '": [4, 32]' in meta["frontier.simulated_bits"]
    # the file computes with the 4-bit weight levels, as the simulated model did
    x = task.splits()["test"][0][:64]
    sess = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"input": x.numpy()})[0]
    with torch.no_grad():
        want = compressed(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("node", "module"),
    [
        ("/fc/Gemm", "fc"),
        ("/layer1/layer1.0/conv1/Conv", "layer1.0.conv1"),
        ("/layer2/layer2.0/downsample/downsample.0/Conv", "layer2.0.downsample.0"),
        ("/features/features.0/features.0.0/Conv", "features.0.0"),
        ("/features/features.2/conv/conv.1/conv.1.0/Conv", "features.2.conv.1.0"),
    ],
    ids=["top", "resnet", "downsample", "nested-sequential", "mobilenet-block"],
)
def test_onnx_node_names_map_to_modules(node: str, module: str) -> None:
    from frontier.spaces import onnx_module_name

    assert onnx_module_name(node) == module


def test_every_weighted_node_maps_to_a_module(tmp_path) -> None:
    import torchvision

    model = torchvision.models.mobilenet_v2(num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    result = export_onnx(model, CompressionPlan(), x, tmp_path / "m.onnx")
    names = {
        n for n, m in model.named_modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)
    }
    assert set(result.fp32_layers) == names


def test_int8_export_of_shared_constants(tmp_path) -> None:
    """Freshly initialised BN layers fold to equal biases that the exporter shares
    through Identity nodes; INT8 quantization must still find each bias."""
    import torchvision

    model = torchvision.models.mobilenet_v2(num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    names = [q.name for q in discover(model, x).layers][:12]
    plan = CompressionPlan(weight_bits=dict.fromkeys(names, 8), act_bits=dict.fromkeys(names, 8))
    result = export_onnx(apply_plan(model, plan, x), plan, x, tmp_path / "q.onnx")
    assert result.precision == "int8" and len(result.int8_layers) == 12
    assert _onnx_top1(result.path, x).shape == (1,)


class _Residual(torch.nn.Module):
    """conv0 -> conv1 -> conv2 (+ conv1's output) -> conv3: the Add joins two FP32 layers
    when only conv0 and conv3 are INT8."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv1 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.conv3 = torch.nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.conv0(x))
        b = torch.relu(self.conv1(a))
        return self.conv3(torch.relu(self.conv2(b)) + b)


def test_ops_between_fp32_layers_stay_fp32(tmp_path) -> None:
    """Only ops fed entirely by INT8 layers run INT8: a residual Add of two FP32 layers is
    not wrapped in Quantize/Dequantize nodes of its own."""
    torch.manual_seed(0)
    model = _Residual().eval()
    x = torch.randn(4, 3, 8, 8)
    plan = CompressionPlan(weight_bits={"conv0": 8, "conv3": 8}, act_bits={"conv0": 8, "conv3": 8})
    compressed = apply_plan(model, plan, x[:1])
    result = export_onnx(compressed, plan, x[:1], tmp_path / "res.onnx", calibration_data=[x])
    assert set(result.int8_layers) == {"conv0", "conv3"}
    ops = [n.op_type for n in onnx.load(str(result.path)).graph.node]
    assert "QLinearAdd" not in ops and "Add" in ops
    assert _int8_kernels_run(result.path, tmp_path) == 2


def test_half_export_runs_16_bit_layers_in_fp16(task: DigitsTask, tmp_path) -> None:
    """``half=True`` (a GPU's export): the plan's 16-bit layers are FP16 nodes in the
    file, the 8-bit ones INT8, the rest FP32; it computes what the simulation does."""
    model = task.baseline()
    example = task.example_inputs()
    names = [q.name for q in discover(model, example).layers]
    plan = CompressionPlan(
        weight_bits={**dict.fromkeys(names[1:], 16), names[0]: 8},
        act_bits={**dict.fromkeys(names[1:], 16), names[0]: 8},
    )
    calib = task.calibration_batches()
    compressed = apply_plan(model, plan, example, calibration_data=calib)
    result = export_onnx(
        compressed, plan, example, tmp_path / "half.onnx", calibration_data=calib, half=True
    )
    assert set(result.fp16_layers) == set(names[1:]) and result.int8_layers == (names[0],)
    assert not set(result.fp32_layers) & set(names) and not result.simulated_bits
    graph = onnx.load(str(result.path)).graph
    half = {i.name for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT16}
    weighted = [n for n in graph.node if n.op_type in ("Gemm", "MatMul", "Conv")]
    assert weighted and all(n.input[1] in half for n in weighted)
    assert graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # I/O FP32
    # the FP16 layers compute what the simulated model does, within FP16 rounding
    x_test, _ = task.splits()["test"]
    with torch.no_grad():
        want = compressed(x_test).argmax(dim=1).numpy()
    agree = float((_onnx_top1(result.path, x_test) == want).mean())
    assert agree >= 0.98, f"FP16 ONNX agrees with the simulation on {agree:.3f} of the test split"
    # without half the same plan stays FP32 with simulated bits, as a CPU prices it
    plain = export_onnx(compressed, plan, example, tmp_path / "plain.onnx", calibration_data=calib)
    assert not plain.fp16_layers and set(plain.simulated_bits) == set(names[1:])


def test_half_export_of_an_fp32_plan_is_fp32(task: DigitsTask, tmp_path) -> None:
    model = task.baseline()
    example = task.example_inputs()
    result = export_onnx(model, CompressionPlan(), example, tmp_path / "m.onnx", half=True)
    assert result.precision == "fp32" and not result.fp16_layers
    types = {i.data_type for i in onnx.load(str(result.path)).graph.initializer}
    assert onnx.TensorProto.FLOAT16 not in types


def test_an_untrained_mobilenet_at_16_bits_exports_a_model_onnx_runtime_loads(tmp_path) -> None:
    """Untrained, MobileNetV2's BN-folded conv biases are equal and the exporter shares
    them through ``Identity`` nodes: each is still stored FP16 (no Cast of a bias at run
    time, no two Casts of one name), and the file computes what the simulation does."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    space = discover(model, x)
    plan = CompressionPlan(weight_bits={q.name: 16 for q in space.layers})
    compressed = apply_plan(model, plan, x)
    result = export_onnx(compressed, plan, x, tmp_path / "half.onnx", half=True)
    graph = onnx.load(str(result.path)).graph
    assert not any(n.op_type == "Identity" for n in graph.node)
    names = [n.name for n in graph.node]
    assert len(names) == len(set(names))
    weighted = [n for n in graph.node if n.op_type in ("Conv", "Gemm")]
    casts = [n for n in graph.node if n.op_type == "Cast"]
    assert len(weighted) == len(result.fp16_layers) == len(space.layers)
    assert len(casts) == 2 * len(weighted)  # one in, one out: none for a bias
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input": x.numpy()})[0]
    with torch.no_grad():
        want = compressed(x).numpy()
    scale = float(np.abs(want).max())
    assert scale > 0
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * scale)


class _Attention(torch.nn.Module):
    """A ViT's encoder layer in small: what every torchvision ViT and Swin block holds."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(x).mean(dim=1))


def test_attention_exports_and_runs_as_in_pytorch(tmp_path) -> None:
    """In eval mode PyTorch runs attention as one fused kernel ONNX cannot express (every
    torchvision ViT failed to export): the export traces it as its matmuls, and ONNX
    Runtime gives PyTorch's outputs."""
    torch.manual_seed(0)
    model = _Attention().eval()
    x = torch.randn(1, 6, 16)
    plan = CompressionPlan()
    result = export_onnx(model, plan, (x,), tmp_path / "attention.onnx")
    sess = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    (out,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(out, expected, atol=1e-5)
    assert torch.backends.mha.get_fastpath_enabled()  # PyTorch's own setting restored


class _PooledHead(torch.nn.Module):
    """VGG's head in small: conv features pooled to a size their 3x3 map does not divide."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d((7, 5))
        self.fc = torch.nn.Linear(4 * 7 * 5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))


def test_a_pool_its_input_does_not_divide_exports_and_runs_as_in_pytorch(tmp_path) -> None:
    """VGG and AlexNet at 96x96 pool a 3x3 or 2x2 map to 7x7 or 6x6, which PyTorch's
    exporter refused: the export writes the same averages as matmuls, and ONNX Runtime
    gives PyTorch's outputs; PyTorch's own pooling is back afterwards."""
    torch.manual_seed(0)
    pytorch_pool = torch.nn.functional.adaptive_avg_pool2d
    model = _PooledHead().eval()
    x = torch.randn(2, 3, 3, 3)
    result = export_onnx(model, CompressionPlan(), (x,), tmp_path / "pooled.onnx")
    sess = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    (out,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(out, expected, atol=1e-5)
    assert torch.nn.functional.adaptive_avg_pool2d is pytorch_pool


def test_a_model_too_large_for_one_message_keeps_its_weights_beside_it(
    monkeypatch, tmp_path
) -> None:
    """Protobuf cannot serialise 2 GiB: a model whose weights come near that (a 2.6 GB
    regnet_y_128gf failed with "EncodeError: Failed to serialize proto") is written as
    its graph and one data file beside it, FP32 and INT8 alike, and runs as the one-file
    export does. The limit is lowered here so that a small model crosses it."""
    from frontier.spaces import load_onnx, model_bytes
    from frontier.spaces.onnx import _onnx_files

    task = DigitsTask(model="cnn")
    model, example = task.baseline(), task.example_inputs()
    names = [q.name for q in discover(model, example).layers]
    int8 = CompressionPlan(weight_bits=dict.fromkeys(names, 8), act_bits=dict.fromkeys(names, 8))
    x = task.splits()["test"][0][:64].numpy()
    for plan in (CompressionPlan(), int8):
        calib = task.calibration_batches()
        one = export_onnx(model, plan, example, tmp_path / "one" / "m.onnx", calib)
        with monkeypatch.context() as m:
            m.setattr(_onnx_files, "INLINE_LIMIT_BYTES", 1024)
            split = export_onnx(model, plan, example, tmp_path / "split" / "m.onnx", calib)
            # written twice to one place: nothing of the first is left beside it
            split = export_onnx(model, plan, example, tmp_path / "split" / "m.onnx", calib)
        assert split.precision == one.precision == _precision_of(plan)
        assert sorted(p.name for p in (tmp_path / "split").iterdir()) == ["m.onnx", "m.onnx.data"]
        assert split.path.stat().st_size < one.path.stat().st_size / 4
        run = {}
        for name, path in (("one", one.path), ("split", split.path)):
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            run[name] = sess.run(None, {"input": x})[0]
        np.testing.assert_allclose(run["split"], run["one"], rtol=1e-5, atol=1e-5)
        # its graph read without its weights: every initializer a reference, none lost
        refs = onnx.load_from_string(model_bytes(split.path))
        assert len(refs.graph.initializer) == len(load_onnx(one.path).graph.initializer)
        assert any(i.data_location == onnx.TensorProto.EXTERNAL for i in refs.graph.initializer)


def _precision_of(plan: CompressionPlan) -> str:
    return "int8" if plan.weight_bits else "fp32"


def test_a_model_written_tensor_by_tensor_is_written_again_as_one(tmp_path) -> None:
    """PyTorch's exporter writes a model over 2 GB as one file per tensor beside it:
    Frontier's export reads them in and leaves one file (or one data file) behind."""
    from frontier.spaces.onnx._onnx_files import open_onnx, save_onnx

    task = DigitsTask(model="cnn")
    export_onnx(task.baseline(), CompressionPlan(), task.example_inputs(), tmp_path / "a.onnx")
    proto = onnx.load(str(tmp_path / "a.onnx"))
    folder = tmp_path / "torch"
    folder.mkdir()
    onnx.save_model(proto, str(folder / "m.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=False, size_threshold=0)  # fmt: skip
    assert len(list(folder.iterdir())) > 3
    loaded, stale = open_onnx(folder / "m.onnx")
    assert len(stale) == len(list(folder.iterdir())) - 1
    save_onnx(loaded, folder / "m.onnx", replaces=stale)
    assert [p.name for p in folder.iterdir()] == ["m.onnx"]
    x = task.splits()["test"][0][:8].numpy()
    outs = [
        ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
        for p in (tmp_path / "a.onnx", folder / "m.onnx")
    ]
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6)


def test_a_model_whose_weights_sit_beside_its_graph_gets_its_table(monkeypatch, tmp_path) -> None:
    """A model too large for one protobuf message (regnet_y_128gf, 2.6 GB) is exported
    with its weights in a file beside it: its ops are enumerated from the graph alone
    (a channel shuffle's shapes found by running it on seeded weights), and its bundle's
    whole models, baseline included, seed those weights as they do any model's. The
    limit is lowered here so that a small model crosses it. (Here, not with the latency
    tables' tests: it lowers the export's own limit.)"""
    import csv

    from torchvision.models.shufflenetv2 import InvertedResidual

    from frontier.latency_models import measure_bundle, space_ops, write_bundle
    from frontier.spaces import SpaceOptions
    from frontier.spaces.onnx import _onnx_files

    torch.manual_seed(0)
    model = torch.nn.Sequential(  # a channel shuffle: its shapes are found by running it
        torch.nn.Conv2d(3, 16, 3, padding=1),
        InvertedResidual(16, 32, 2),
        InvertedResidual(32, 32, 1),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    ).eval()
    x = torch.randn(1, 3, 16, 16)
    options = SpaceOptions(prune_ratios=(0.0, 0.5), weight_bits=(8, 32), act_bits=(8, 32))
    space = discover(model, x, options)
    one_file = {s.key for s in space_ops(model, x, space).ops}
    monkeypatch.setattr(_onnx_files, "INLINE_LIMIT_BYTES", 1024)
    found = space_ops(model, x, space)
    assert {s.key for s in found.ops} == one_file
    path = tmp_path / "ops.zip"
    write_bundle(path, model=model, example_inputs=x, space=space, ops=found, calibration=0,
                 validation=3, calibration_data=[x])  # fmt: skip
    out = tmp_path / "t.csv"
    measure_bundle(path, out, device="t", rounds=1, round_s=0.001, redo_budget_s=0)
    rows = list(csv.DictReader(out.open()))
    bad = [(r["kind"], r["op_type"], r["error"][:120]) for r in rows if r["status"] != "ok"]
    assert not bad, bad
    assert {r["kind"] for r in rows} >= {"baseline", "validation", "op"}


def test_a_search_s_front_member_too_large_for_one_file_says_so(tmp_path, monkeypatch) -> None:
    # a model whose weights go beside its graph (over 2 GiB; here the limit is lowered)
    # would reach MLflow as a graph without its weights: its export fails, saying why,
    # and leaves nothing behind (the search tags the run with that reason and goes on)
    import math

    from frontier.search import TrialRunner, parse_config
    from frontier.spaces.onnx import _onnx_files

    monkeypatch.chdir(tmp_path)
    config = {
        "name": "toy-large",
        "task": {"name": "digits", "options": {"model": "mlp"}},
        "space": {"prune_ratios": [0.0, 0.5], "weight_bits": [8, 32], "act_bits": [32]},
        "objectives": [{"name": "accuracy", "options": {"steps": 5}}, "size_bytes"],
    }
    evaluation = TrialRunner(parse_config(config))
    plan = evaluation.space.plan_of(evaluation.space.uncompressed_params()).to_dict()
    path = tmp_path / "member" / "model.onnx"
    path.parent.mkdir()
    evaluation.export(plan, 0, path)  # one file: as it was
    assert [p.name for p in path.parent.iterdir()] == ["model.onnx"]
    path.unlink()
    monkeypatch.setattr(_onnx_files, "INLINE_LIMIT_BYTES", 1024)
    with pytest.raises(RuntimeError, match=r"more than one ONNX file holds \(2 GiB\)"):
        evaluation.export(plan, 0, path)
    assert list(path.parent.iterdir()) == []
    # a job's own export: the scores stand, the result says why it carries no model
    result = evaluation.evaluate(evaluation.plan(plan), 0, export=True)
    assert result.onnx is None and "more than one ONNX file holds" in result.export_error
    assert all(math.isfinite(v) for v in result.values.values())
