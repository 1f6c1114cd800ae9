"""A table for every model: ops whose shapes a plan changes in ways a plain conv chain
does not (a channel shuffle's reshapes and split, a dense block's growing concat,
ConvNeXt's channels-last permutes and per-channel constants, a ViT's attention reshapes
to heads and its class token concatenated along the tokens) are built from the shapes
the plan gives them, and every op and whole model of such a space runs, INT8 and FP32."""

from __future__ import annotations

import csv
import time

import pytest
import torch
from torch import nn
from torchvision.models.convnext import CNBlock
from torchvision.models.densenet import _DenseBlock
from torchvision.models.shufflenetv2 import InvertedResidual
from torchvision.models.swin_transformer import SwinTransformer
from torchvision.models.vision_transformer import VisionTransformer

from frontier.latency_models import (
    measure_bundle,
    shape_mismatches,
    space_ops,
    space_templates,
    write_bundle,
)
from frontier.spaces import SpaceOptions, discover


def _shuffle() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        InvertedResidual(16, 32, 2),
        InvertedResidual(32, 32, 1),
        InvertedResidual(32, 32, 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def _dense(layers: int = 6) -> nn.Module:
    growth = 8
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        _DenseBlock(layers, 16, bn_size=2, growth_rate=growth, drop_rate=0.0),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16 + layers * growth, 10),
    )


def _convnext() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        CNBlock(32, layer_scale=1e-6, stochastic_depth_prob=0.0),
        CNBlock(32, layer_scale=1e-6, stochastic_depth_prob=0.0),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def _swin() -> nn.Module:
    return SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[2], num_heads=[2], window_size=[2, 2],
        num_classes=10,
    )  # fmt: skip


def _vit() -> nn.Module:
    return VisionTransformer(
        image_size=16, patch_size=4, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
        num_classes=10,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("build", "shaped"),
    [
        (_shuffle, "Reshape"),
        (_dense, "Concat"),
        (_convnext, "LayerNormalization"),
        (_vit, "Erf"),  # the GELU between a pruned MLP's two layers
        (_swin, "Erf"),
    ],
    ids=["shuffle", "dense", "convnext", "vit", "swin"],
)
def test_every_op_and_whole_model_of_the_space_runs(build, shaped: str, tmp_path) -> None:
    torch.manual_seed(0)
    model = build().eval()
    x = torch.randn(1, 3, 16, 16)
    options = SpaceOptions(prune_ratios=(0.0, 0.5), weight_bits=(8, 32), act_bits=(8, 32))
    space = discover(model, x, options)
    # at the uncompressed plan every op has the exported graph's shapes (a chunk's
    # slice, a window's shifted slices: else every plan's ops are built at wrong sizes)
    assert not [m for t in space_templates(model, x, space).values() for m in shape_mismatches(t)]
    path = tmp_path / "ops.zip"
    manifest = write_bundle(
        path, model=model, example_inputs=x, space=space, calibration=8, calibration_data=[x]
    )
    assert not [m for m in manifest["models"] if m.get("build_error")]
    # the op that carries the block's shapes comes in the widths pruning gives it
    widths = {
        str(m["spec"]["input_shapes"])
        for m in manifest["models"]
        if m.get("spec", {}).get("op_type") == shaped
    }
    assert len(widths) >= 2, widths
    out = tmp_path / "t.csv"
    measure_bundle(path, out, device="t", rounds=1, round_s=0.001, redo_budget_s=0)
    rows = list(csv.DictReader(out.open()))
    bad = [(r["op_type"], r["precision"], r["error"][:120]) for r in rows if r["status"] != "ok"]
    assert not bad, bad
    assert {"int8", "fp32"} <= {r["precision"] for r in rows if r["kind"] == "op"}
    assert sum(r["kind"] == "calibration" for r in rows) == 8


def test_a_dense_blocks_ops_grow_with_its_layers_not_its_plans() -> None:
    """Each layer of a dense block reads the concat of every layer before it: its plans
    number 2**layers, its distinct ops a few per layer."""
    x = torch.randn(1, 3, 8, 8)
    options = SpaceOptions(prune_ratios=(0.0, 0.5), weight_bits=(32,), act_bits=(32,))
    counts = {}
    for layers in (6, 12):
        model = _dense(layers).eval()
        space = discover(model, x, options)
        start = time.perf_counter()
        counts[layers] = len(space_ops(model, x, space).ops)
        assert time.perf_counter() - start < 30
    assert counts[12] < 4 * counts[6], counts
