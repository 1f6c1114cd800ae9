"""apply_plan on models built here and on torchvision architectures with random weights."""

import copy
import gc
import itertools
import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torchvision

from frontier.spaces import (
    CompressionPlan,
    SpaceError,
    SpaceOptions,
    apply_plan,
    discover,
    export_onnx,
    kept_channels,
    model_cost,
)

TORCHVISION = [
    "resnet18",
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "regnet_y_400mf",
    "shufflenet_v2_x1_0",
]


@pytest.mark.parametrize(
    ("channels", "ratio", "round_to", "kept"),
    [
        (64, 0.0, 8, 64),
        (64, 0.5, 8, 32),
        (64, 0.95, 8, 8),
        (10, 0.1, 8, 8),
        (6, 0.5, 8, 6),
        (100, 0.3, 1, 70),
    ],
    ids=["zero", "half", "floor-one-round_to", "round-down", "fewer-than-round_to", "plain"],
)
def test_kept_channels(channels: int, ratio: float, round_to: int, kept: int) -> None:
    assert kept_channels(channels, ratio, round_to) == kept


def test_apply_prunes_physically_and_leaves_input(small_cnn) -> None:
    x = torch.randn(2, 3, 8, 8)
    before = copy.deepcopy(small_cnn.state_dict())
    plan = CompressionPlan(prune={"stem.0": 0.5, "b": 0.5}, round_to=4)
    small = apply_plan(small_cnn, plan, x)
    assert small.stem[0].out_channels == 8 and small.a[0].in_channels == 8
    assert small.b.out_channels == 12 and small.head.in_features == 12 + 8
    assert small(x).shape == (2, 10)
    for k, v in small_cnn.state_dict().items():
        assert torch.equal(v, before[k])
    assert (
        model_cost(small, plan, x[:1]).params
        < model_cost(small_cnn, CompressionPlan(), x[:1]).params
    )


def test_a_model_is_checked_once_per_input_shape(mlp, monkeypatch) -> None:
    """apply_plan runs the model it compresses once to check it, not once per plan (a
    search applies thousands of plans to one teacher); new input shapes check again."""
    import frontier.spaces._apply as apply_module

    checked: list[tuple[int, ...]] = []
    check = apply_module.check_forward

    def counted(model, x):
        checked.append(tuple(x.shape))
        return check(model, x)

    monkeypatch.setattr(apply_module, "check_forward", counted)
    plan = CompressionPlan(prune={"1": 0.5})
    for _ in range(3):
        assert apply_plan(mlp, plan, torch.randn(1, 64))[1].out_features == 24
    assert checked == [(1, 64)]
    apply_plan(mlp, plan, torch.randn(2, 64))
    assert checked == [(1, 64), (2, 64)]
    with pytest.raises(SpaceError, match="forward failed"):
        apply_plan(mlp, plan, torch.randn(1, 65))


def test_pruning_leaves_no_copy_of_the_weights_alive(mlp) -> None:
    # Torch-Pruning's dependency graph is a web of cycles holding the traced forward's
    # saved tensors: left to the collector, each pruned copy keeps the weights as they
    # were alive (a large model's discovery held six copies at once).
    x = torch.randn(1, 64)
    unpruned = mlp[1].weight.shape

    def unpruned_tensors() -> list[torch.Tensor]:
        return [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.shape == unpruned]

    gc.collect()
    gc.disable()
    try:
        before = {id(t) for t in unpruned_tensors()}  # the model's own, and other tests'
        small = apply_plan(mlp, CompressionPlan(prune={"1": 0.5}), x)
        alive = [t for t in unpruned_tensors() if id(t) not in before]
    finally:
        gc.enable()
    assert small[1].out_features == 24
    assert alive == []


@pytest.mark.parametrize("importance", ["l1", "taylor", "bn_scale"], ids=str)
def test_importance_criteria_apply(small_cnn, importance: str) -> None:
    x = torch.randn(2, 3, 8, 8)
    plan = CompressionPlan(prune={"stem.0": 0.5}, importance=importance)
    assert apply_plan(small_cnn, plan, x).stem[0].out_channels == 8


def test_l1_removes_the_smallest_channels(mlp) -> None:
    with torch.no_grad():
        mlp[1].weight[:24] *= 0.01  # the first 24 rows are now the least important
    small = apply_plan(mlp, CompressionPlan(prune={"1": 0.5}), torch.randn(1, 64))
    kept = small[1].weight
    assert torch.allclose(kept, mlp[1].weight[24:])


def test_quantization_is_simulated_and_trainable(mlp) -> None:
    x = torch.randn(16, 64)
    plan = CompressionPlan(weight_bits={"1": 4, "3": 8}, act_bits={"3": 8})
    q = apply_plan(mlp, plan, x, calibration_data=[x])
    levels = torch.unique(q[1].weight[0]).numel()
    assert levels <= 15, "4-bit symmetric weights take at most 15 levels per channel"
    out = q(x)
    assert not torch.allclose(out, mlp(x))
    out.sum().backward()
    assert q[1].parametrizations.weight.original.grad is not None, "straight-through gradient"
    half = apply_plan(mlp, CompressionPlan(weight_bits={"1": 16}), x)
    assert torch.equal(half[1].weight, mlp[1].weight.half().float())


def test_a_calibrated_quantizer_never_reads_its_flag_from_the_device(mlp) -> None:
    """A forward pass of a fake-quantized layer does not read its ``calibrated`` buffer
    (on a GPU, a wait for the device per layer per step): a buffer that cannot be read
    (on the meta device) does not stop it. The flag still survives a state dict."""
    from frontier.spaces._quant import ActFakeQuant

    x = torch.randn(16, 64)
    plan = CompressionPlan(weight_bits={"3": 8}, act_bits={"3": 8})
    q = apply_plan(mlp, plan, x, calibration_data=[x])
    want = q(x)
    quants = [m for m in q.modules() if isinstance(m, ActFakeQuant)]
    assert quants
    for m in quants:
        m.calibrated = torch.tensor(True, device="meta")
    assert torch.equal(q(x), want)
    fresh = apply_plan(mlp, CompressionPlan(weight_bits={"3": 8}, act_bits={"3": 8}), x)
    with pytest.raises(RuntimeError, match="before calibration"):
        for m in fresh.modules():
            if isinstance(m, ActFakeQuant):
                m.is_calibrated = False
        fresh(x)
    fresh.load_state_dict(apply_plan(mlp, plan, x, calibration_data=[x]).state_dict())
    assert torch.equal(fresh(x), want)


def test_an_activation_range_follows_fine_tuning_and_holds_in_eval(mlp) -> None:
    """Calibrated on a freshly pruned model, a range is what fine-tuning outgrows: in
    training mode it follows the activations (a frozen one clipped a pruned MobileNetV3
    to 0.41 accuracy at the full rung); in eval mode, what the model is scored and
    exported with, it holds."""
    from frontier.spaces._quant import ActFakeQuant

    x = torch.randn(16, 64)
    plan = CompressionPlan(prune={"1": 0.5}, weight_bits={"3": 8}, act_bits={"3": 8})
    q = apply_plan(mlp, plan, x, calibration_data=[x])
    quant = next(m for m in q.modules() if isinstance(m, ActFakeQuant))
    calibrated = float(quant.max_val)
    q.eval()
    q(10 * x)
    assert float(quant.max_val) == calibrated
    q.train()
    for _ in range(300):
        q(10 * x)
    assert float(quant.max_val) > 5 * calibrated  # 95% of the way to the new range


@pytest.mark.parametrize("name", TORCHVISION, ids=str)
def test_torchvision_random_plans(name: str, tmp_path) -> None:
    model = torchvision.models.get_model(name, weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        space = discover(model, x, SpaceOptions(round_to=8))
    assert len(space.groups) > 10
    base = model_cost(model, CompressionPlan(), x)
    for seed in range(10):
        plan = space.sample(seed)
        small = apply_plan(model, plan, x)
        with torch.no_grad():
            assert small(x).shape == (1, 1000)
        cost = model_cost(small, plan, x)
        assert cost.size_bytes <= base.size_bytes
        if seed == 0:
            again = apply_plan(model, CompressionPlan.from_json(plan.to_json(), space=space), x)
            assert model_cost(again, plan, x) == cost


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "efficientnet_b0"], ids=str)
def test_cost_falls_with_ratio_and_bits(name: str) -> None:
    model = torchvision.models.get_model(name, weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    space = discover(model, x)
    costs = []
    for ratio in (0.0, 0.25, 0.5, 0.75):
        plan = CompressionPlan(prune={g.name: ratio for g in space.groups if ratio > 0})
        costs.append(model_cost(apply_plan(model, plan, x), plan, x))
    for a, b in itertools.pairwise(costs):
        assert b.params < a.params and b.macs < a.macs and b.size_bytes < a.size_bytes
    sizes = []
    for bits in (32, 16, 8, 4, 2):
        plan = CompressionPlan(
            weight_bits={q.name: bits for q in space.layers if bits < 32},
            act_bits={q.name: 8 for q in space.layers if bits < 32},
        )
        cost = model_cost(apply_plan(model, plan, x), plan, x)
        sizes.append((cost.size_bytes, cost.bops))
    for (s1, b1), (s2, b2) in itertools.pairwise(sizes):
        assert s2 < s1 and b2 <= b1


@pytest.mark.parametrize("name", TORCHVISION, ids=str)
def test_fp32_onnx_matches_torch(name: str, tmp_path) -> None:
    model = torchvision.models.get_model(name, weights=None).eval()
    x = torch.randn(2, 3, 64, 64)
    space = discover(model, x[:1], SpaceOptions(round_to=8, weight_bits=(32,), act_bits=(32,)))
    plan = space.sample(1)
    small = apply_plan(model, plan, x[:1])
    result = export_onnx(small, plan, x[:1], tmp_path / "m.onnx")
    assert result.precision == "fp32"
    sess = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"input": x.numpy()})[0]
    with torch.no_grad():
        want = small(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_student_plan_builds_the_student(mlp) -> None:
    from frontier.spaces import StudentSpec

    x = torch.randn(1, 64)
    plan = CompressionPlan(student=StudentSpec("mlp", width_mult=0.25), prune={"features.1": 0.5})
    student = apply_plan(mlp, plan, x)
    assert student(x).shape == (1, 10)
    assert student.features[1].out_features == 32  # 256 * 0.25 = 64, pruned by half


def test_unstructured_sparsity_zeroes_smallest_weights_and_stays(mlp) -> None:
    x = torch.randn(8, 64)
    plan = CompressionPlan(sparsity={"1": 0.75}, weight_bits={"1": 8}, act_bits={"1": 8})
    sparse = apply_plan(mlp, plan, x, calibration_data=[x])
    weight = sparse[1].weight
    assert weight.shape == mlp[1].weight.shape
    assert float((weight == 0).float().mean()) >= 0.75
    kept = mlp[1].weight.abs()[weight != 0]
    dropped = mlp[1].weight.abs()[weight == 0]
    assert kept.min() >= dropped.max()  # magnitude: the smallest went
    opt = torch.optim.SGD(sparse.parameters(), lr=0.1)
    sparse(x).pow(2).sum().backward()
    opt.step()
    assert float((sparse[1].weight == 0).float().mean()) >= 0.75  # zeros survive training
    base = model_cost(mlp, CompressionPlan(weight_bits={"1": 8}, act_bits={"1": 8}), x[:1])
    cost = model_cost(sparse, plan, x[:1])
    assert cost.macs == base.macs and cost.size_bytes == base.size_bytes  # dense kernels
    assert cost.nonzero_weights < base.nonzero_weights


def test_sparsity_survives_export(mlp, tmp_path) -> None:
    import onnx
    from onnx import numpy_helper

    x = torch.randn(1, 64)
    plan = CompressionPlan(sparsity={"1": 0.5})
    result = export_onnx(apply_plan(mlp, plan, x), plan, x, tmp_path / "s.onnx")
    weights = {
        i.name: numpy_helper.to_array(i) for i in onnx.load(str(result.path)).graph.initializer
    }
    assert (weights["1.weight"] == 0).mean() >= 0.5
