"""model_cost against torchvision's published parameter counts and GFLOPS (= GMACs)."""

import pytest
import torch
import torch.nn as nn
import torchvision
from torchvision.models import get_model, get_model_weights

from frontier.spaces import CompressionPlan, apply_plan, model_cost

# One representative per family the issue names; benchmarks/check_torchvision_costs.py
# checks every model of those families.
REPRESENTATIVES = [
    "resnet18",
    "resnext50_32x4d",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "regnet_y_400mf",
    "densenet121",
    "vgg11",
    "mnasnet0_5",
    "squeezenet1_1",
]


@pytest.mark.parametrize("name", REPRESENTATIVES, ids=str)
def test_matches_torchvision_published_numbers(name: str) -> None:
    weights = get_model_weights(name).DEFAULT
    size = weights.transforms().crop_size[0]
    model = get_model(name, weights=None).eval()
    cost = model_cost(model, CompressionPlan(), torch.randn(1, 3, size, size))
    assert cost.params == weights.meta["num_params"]
    assert cost.macs / 1e9 == pytest.approx(weights.meta["_ops"], rel=0.01)


def test_hand_computed_sizes() -> None:
    model = nn.Sequential(nn.Linear(10, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    x = torch.randn(1, 10)
    plan = CompressionPlan(weight_bits={"0": 4, "2": 16}, act_bits={"0": 8})
    cost = model_cost(apply_plan(model, plan, x), plan, x)
    first, second = cost.layers
    # 40 weights at 4 bits = 20 B, 4 channels x (4 B scale + 1 B zero point), 4 biases x 4 B,
    # one activation scale/zero point
    assert first.size_bytes == 20 + 4 * 5 + 16 + 5
    # 8 weights at 16 bits, 2 biases at 16 bits
    assert second.size_bytes == 16 + 4
    assert cost.macs == 10 * 4 + 4 * 2
    assert cost.bops == 40 * 4 * 8 + 8 * 16 * 32
    assert cost.params == 44 + 10


def test_other_parameters_count_as_fp32() -> None:
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    cost = model_cost(model, CompressionPlan(), x)
    bn = sum(
        p.numel() for m in model.modules() if isinstance(m, nn.BatchNorm2d) for p in m.parameters()
    )
    assert cost.other_params == bn
    assert cost.size_bytes == 4 * cost.params
