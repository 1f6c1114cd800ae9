import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from frontier.experiments import DigitsTask
from frontier.latency_models import build_onnx, plan_ops, space_ops
from frontier.latency_models.bundle._bundle import (
    BUDGET_MIN_MODELS,
    CALIBRATION_MODELS,
    SMALL_MODEL_CALIBRATION_S,
    TEACHER,
    default_calibration,
    small_model_budget,
)
from frontier.latency_models.bundle._whole import whole_model_bytes
from frontier.latency_models.ops._op_models import op_model_bytes
from frontier.latency_models.ops._ops import INT8_FP32_ADD
from frontier.spaces import CompressionPlan, SpaceOptions, apply_plan, discover


def test_op_set_is_deduplicated_and_counted(ops) -> None:
    keys = [o.key for o in ops.ops]
    assert len(keys) == len(set(keys)) == ops.count
    kinds = {o.kind for o in ops.ops}
    assert "linear" in kinds
    # three Gemm layers, 2 kept widths per pruned group, FP32 and INT8
    assert {o.precision for o in ops.ops} == {"fp32", "int8"}


@pytest.mark.parametrize("family", ["mlp", "cnn"], ids=str)
def test_every_plan_only_uses_enumerated_ops(family: str) -> None:
    task = DigitsTask(model=family)
    model, x = task.baseline(), task.example_inputs()
    space = discover(
        model,
        x,
        SpaceOptions(
            prune_ratios=(0.0, 0.3, 0.6), weight_bits=(4, 8, 32), act_bits=(8, 32), round_to=4
        ),
    )
    found = space_ops(model, x, space)
    keys = {o.key for o in found.ops}
    for seed in range(15):
        plan = space.sample(seed)
        used = plan_ops(found.templates[TEACHER], plan)
        assert {o.key for o in used} <= keys
        # the shapes the templates predict are the shapes of the pruned model
        small = apply_plan(model, plan, x)
        weighted = [o for o in used if o.op_type in ("Conv", "Gemm")]
        layers = [m for m in small.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)]
        for op, layer in zip(weighted, layers, strict=True):
            out = layer.out_channels if isinstance(layer, torch.nn.Conv2d) else layer.out_features
            assert op.output_shape[1] == out


def test_one_op_models_run_with_their_shapes(ops) -> None:
    boundary = [o for o in ops.ops if o.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert {o.op_type for o in boundary} == {"QuantizeLinear", "DequantizeLinear"}
    for spec in [*ops.ops[:10], *boundary[:4]]:
        sess = ort.InferenceSession(
            build_onnx(spec).SerializeToString(), providers=["CPUExecutionProvider"]
        )
        dtype = {"tensor(uint8)": np.uint8}.get(sess.get_inputs()[0].type, np.float32)
        feeds = {f"x{i}": np.ones(s, dtype) for i, s in enumerate(spec.input_shapes)}
        assert tuple(sess.run(None, feeds)[0].shape) == spec.output_shape


def test_mobilenet_ops_follow_runtime_fusion() -> None:
    import torchvision

    model = torchvision.models.mobilenet_v2(num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    space = discover(model, x, SpaceOptions(prune_ratios=(0.0,), weight_bits=(32,), act_bits=(32,)))
    found = space_ops(model, x, space)
    names = {o.name for o in found.ops}
    assert {"Conv+Clip", "Conv+Add", "Conv"} <= names  # Clip and residual Add fused
    assert not any(o.op_type in ("Clip", "Add") for o in found.ops)
    plan_keys = plan_ops(found.templates[TEACHER], CompressionPlan())
    assert sum(o.op_type == "Conv" for o in plan_keys) == 52


def test_op_precision_follows_what_export_runs(tmp_path) -> None:
    """An op is INT8 exactly when export_onnx runs its layer in INT8 (a plan with any
    layer below 8 bits exports all-FP32)."""
    import warnings

    from frontier.spaces import export_onnx

    task = DigitsTask(model="mlp")
    model, x = task.baseline(), task.example_inputs()
    space = discover(
        model,
        x,
        SpaceOptions(prune_ratios=(0.0, 0.5), weight_bits=(4, 8, 32), act_bits=(8, 32), round_to=8),
    )
    found = space_ops(model, x, space)
    modules = {t.module: t for t in found.templates[TEACHER].ops if t.module}
    seen_low = False
    for seed in range(12):
        plan = space.sample(seed)
        seen_low |= any(b < 8 for b in plan.weight_bits.values())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = export_onnx(apply_plan(model, plan, x), plan, x, tmp_path / f"{seed}.onnx")
        every = plan_ops(found.templates[TEACHER], plan)
        boundary = ("QuantizeLinear", "DequantizeLinear")
        ops = [o for o in every if o.op_type not in boundary]
        int8 = {
            t.module
            for t, o in zip(found.templates[TEACHER].ops, ops, strict=True)
            if o.precision == "int8"
        }
        assert int8 == set(result.int8_layers), seed
        # the precision boundaries priced are the ones the exported graph runs
        graph = onnx.load(str(tmp_path / f"{seed}.onnx")).graph
        for op_type in boundary:
            runs = sum(n.op_type == op_type for n in graph.node)
            assert sum(o.op_type == op_type for o in every) == runs, (seed, op_type)
    assert seen_low and modules


def test_residual_add_with_downsample_fuses_into_one_conv() -> None:
    # A ResNet block's conv and its downsample both feed one Add: the Add is fused into
    # the later of the two, with the other's (pruned) channels, never into both.
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=4).eval()
    x = torch.zeros(1, 3, 32, 32)
    space = discover(model, x, SpaceOptions(prune_ratios=(0.0, 0.5), weight_bits=(32,)))
    found = space_ops(model, x, space)
    adds = [t for t in found.templates[TEACHER].ops if "Add" in t.fused]
    assert len(adds) == 8  # one per BasicBlock
    for spec in found.ops:
        session = ort.InferenceSession(build_onnx(spec).SerializeToString())
        feeds = {f"x{i}": np.zeros(s, np.float32) for i, s in enumerate(spec.input_shapes)}
        assert session.run(None, feeds)[0].shape == spec.output_shape


def _ran_as(nodes: dict[str, onnx.NodeProto], template) -> str:
    """The precision an op of ``template`` ran at in a quantized graph: its kernel's (a
    QLinear node named after it, or its own node fed an 8-bit tensor), and, for a fused
    residual Add, the Add's."""

    def int8(name: str) -> bool:
        node = nodes.get(name)
        return f"{name}_quant" in nodes or (node is not None and "_quantized" in node.input[0])

    kernel = int8(template.nodes[0])
    adds = [n for n in template.nodes if nodes.get(n, onnx.NodeProto()).op_type == "Add"]
    adds += [
        n
        for n in template.nodes
        if nodes.get(f"{n}_quant", onnx.NodeProto()).op_type == "QLinearAdd"
    ]
    if not kernel:
        return "fp32"
    if adds and not int8(adds[0]):
        return INT8_FP32_ADD
    return "int8"


@pytest.mark.parametrize("family", ["cnn", "mobilenet"], ids=str)
def test_pooling_and_residual_adds_run_at_their_neighbours_precision(family: str) -> None:
    """A MaxPool, a global pooling or a Flatten after an INT8 layer runs on 8-bit tensors
    and a residual Add runs INT8 only where both its inputs come in INT8: each op of a plan
    is priced at the precision the exported model runs it at."""
    import torchvision

    if family == "cnn":
        task = DigitsTask(model="cnn")
        model, x, data = task.baseline(), task.example_inputs(), task.calibration_batches()
    else:
        torch.manual_seed(0)
        model = torchvision.models.mobilenet_v2(num_classes=10).eval()
        x, data = torch.randn(1, 3, 32, 32), None
    space = discover(
        model, x, SpaceOptions(prune_ratios=(0.0,), weight_bits=(8, 32), act_bits=(8, 32))
    )
    found = space_ops(model, x, space)
    templates = found.templates[TEACHER]
    keys = {o.key for o in found.ops}
    seen = set()
    for seed in range(4):
        plan = space.sample(seed)
        every = plan_ops(templates, plan)
        assert {o.key for o in every} <= keys
        graph = onnx.load_from_string(whole_model_bytes(model, plan, x, data)).graph
        nodes = {n.name: n for n in graph.node}
        boundary = ("QuantizeLinear", "DequantizeLinear")
        # one Quantize / Dequantize per tensor crossing; an INT8 conv whose residual Add
        # runs FP32 dequantizes before the Add, inside its own op (and its op model)
        inner = {
            "QuantizeLinear": 0,
            "DequantizeLinear": sum(o.precision == INT8_FP32_ADD for o in every),
        }
        for op_type in boundary:
            runs = sum(n.op_type == op_type for n in graph.node)
            assert sum(o.op_type == op_type for o in every) + inner[op_type] == runs, (
                seed,
                op_type,
            )
        ops = [o for o in every if o.op_type not in boundary]
        for t, op in zip(templates.ops, ops, strict=True):
            assert op.precision == _ran_as(nodes, t), (seed, op.key)
            seen.add((op.op_type, op.precision))
    if family == "cnn":
        assert {("MaxPool", "int8"), ("MaxPool", "fp32"), ("GlobalAveragePool", "int8")} <= seen
    else:
        assert {("Conv", "int8"), ("Conv", INT8_FP32_ADD)} <= seen


def test_int8_op_models_run_their_op_on_8bit_tensors() -> None:
    task = DigitsTask(model="cnn")
    model, x = task.baseline(), task.example_inputs()
    space = discover(
        model, x, SpaceOptions(prune_ratios=(0.0,), weight_bits=(8, 32), act_bits=(8, 32))
    )
    found = space_ops(model, x, space)
    kinds = {}
    for spec in found.ops:
        if spec.precision == "int8" and spec.op_type not in ("Conv", "Gemm"):
            proto = onnx.load_from_string(op_model_bytes(spec))
            kinds[spec.op_type] = [n.op_type for n in proto.graph.node]
            session = ort.InferenceSession(proto.SerializeToString())
            feeds = {
                i.name: np.ones(s, np.uint8 if i.type == "tensor(uint8)" else np.float32)
                for i, s in zip(session.get_inputs(), spec.input_shapes, strict=True)
            }
            assert session.run(None, feeds)[0].shape == spec.output_shape
    # inside an INT8 chain: on 8-bit tensors in and out, no Quantize or Dequantize of
    # their own (the plan prices those where its precision changes)
    assert kinds == {
        "MaxPool": ["MaxPool"],
        "GlobalAveragePool": ["QLinearGlobalAveragePool"],
        "Flatten": ["Flatten"],
        "QuantizeLinear": ["QuantizeLinear"],
        "DequantizeLinear": ["DequantizeLinear"],
    }


def test_small_models_get_more_calibration_models(ops) -> None:
    # the digits MLP measures in microseconds: 200; a 300 M MAC mobilenet_v2: 60
    import torchvision

    assert default_calibration(ops) == 200
    model = torchvision.models.mobilenet_v2(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    space = discover(model, x, SpaceOptions(prune_ratios=(0.0,), weight_bits=(32,)))
    assert default_calibration(space_ops(model, x, space)) == 60
    # a search's first table keeps as many of the 200 as fit its time, never below 60;
    # the 60 of a larger model are all kept
    assert small_model_budget(ops) == (SMALL_MODEL_CALIBRATION_S, CALIBRATION_MODELS)
    assert small_model_budget(space_ops(model, x, space)) == (None, BUDGET_MIN_MODELS)


def test_an_op_with_index_inputs_builds_them_as_integers() -> None:
    """Swin V2 zeroes a slice of its qkv bias, which exports as a ScatterND on a
    constant: its op model takes int64 indices, as ONNX Runtime requires (float
    indices made every swin_v2 table stop)."""
    from frontier.latency_models import OpSpec

    spec = OpSpec.from_dict(
        {"op_type": "ScatterND", "fused": [], "input_shapes": [[4]], "output_shape": [12],
         "attrs": [], "kernel": [], "groups": 1, "precision": "fp32", "act_attrs": [],
         "consts": [[0, [12], []], [1, [4, 1], [4.0, 5.0, 6.0, 7.0]]]}
    )  # fmt: skip
    sess = ort.InferenceSession(build_onnx(spec).SerializeToString())
    (out,) = sess.run(None, {"x0": np.zeros(4, np.float32)})
    assert out.shape == (12,) and not out[4:8].any() and out[:4].all()
