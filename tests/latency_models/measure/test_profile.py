"""`frontier profile`: each layer's time inside the model, its MACs, kernels and
precision, beside a baseline's same layers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from frontier.latency_models import compare_layers, profile_layers
from frontier.latency_models.measure._profile import LayerTime
from frontier.search.cli import main


class Net(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.body = nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.ReLU())
        self.hidden = nn.Sequential(nn.Linear(width, width), nn.ReLU())  # a FusedGemm
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.body(torch.relu(self.stem(x)))
        return self.head(self.hidden(x.mean(dim=(2, 3))))


def _export(width: int, path: Path) -> Path:
    torch.manual_seed(0)
    torch.onnx.export(Net(width).eval(), torch.randn(1, 3, 16, 16), path, dynamo=False)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = tmp_path_factory.mktemp("profile")
    wide, narrow = _export(32, folder / "wide.onnx"), _export(16, folder / "narrow.onnx")
    int8 = folder / "int8.onnx"
    quantize_dynamic(str(wide), str(int8), weight_type=QuantType.QUInt8)
    return {"wide": wide, "narrow": narrow, "int8": int8}


def test_a_layer_is_the_full_module_path() -> None:
    from frontier.latency_models.measure._profile import layer_of

    assert layer_of("/layer1/layer1.0/conv1/Conv") == "layer1.0.conv1"  # not just conv1
    assert layer_of("/features/features.0/Conv") == "features.0"
    assert layer_of("/layer4/layer4.0/downsample/downsample.0/Conv") == "layer4.0.downsample.0"
    assert layer_of("/head/Gemm") == "head"
    assert layer_of("ReorderOutput") == "(glue)"


def test_layers_carry_their_time_macs_and_precision(models: dict[str, Path]) -> None:
    wide = profile_layers(models["wide"], runs=40, measure=False)
    layers = wide.by_name()
    assert {"stem", "body.0", "head"} <= set(layers)
    # MACs as a user counts them: output elements x (Cin x k x k) for a conv
    assert layers["stem"].macs == 16 * 16 * 32 * 3 * 9
    assert layers["body.0"].macs == 16 * 16 * 32 * 32 * 9
    assert layers["head"].macs == 32 * 10
    assert all(layers[n].ms > 0 for n in ("stem", "body.0"))
    assert {layers[n].precision for n in ("stem", "body.0", "head")} == {"fp32"}
    assert "FusedGemm" in layers["hidden.0"].kernels  # "fused /hidden/hidden.0/Gemm"
    assert "FusedGemm" not in layers.get("(glue)", LayerTime("(glue)")).kernels
    # kernel times run inside the run: their sum cannot exceed it
    assert 0 < wide.layers_ms <= wide.run_ms * 1.01
    int8 = profile_layers(models["int8"], runs=40, measure=False).by_name()
    assert int8["body.0"].precision == "int8"  # ConvInteger


def test_a_pruned_model_against_its_baseline(
    models: dict[str, Path], tmp_path: Path, capsys
) -> None:
    narrow = profile_layers(models["narrow"], runs=40, measure=False)
    wide = profile_layers(models["wide"], runs=40, measure=False)
    rows = {r["layer"]: r for r in compare_layers(narrow, wide)}
    assert rows["body.0"]["macs"] * 4 == rows["body.0"]["base_macs"]  # half the channels
    assert rows["body.0"]["kernels"] == "Conv"
    out = tmp_path / "out"
    assert main(["profile", str(models["narrow"]), "--baseline", str(models["wide"]),
                 "--runs", "40", "--out", str(out), "--format", "json"]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["model"]["measured_ms"] > 0
    assert report["summary"]["speedup_measured"] > 0
    assert (out / "profile.csv").exists() and (out / "profile.png").stat().st_size > 0
    assert main(["profile", str(tmp_path / "missing.onnx")]) == 2


def test_a_profile_that_overcounts_its_run_says_so() -> None:
    """Layers summing to well over the measured run (the profiler's cost on short INT8
    kernels) get a caution; a profile that adds up does not."""
    from frontier.latency_models.measure._profile import LayerTime, ModelProfile

    layers = [LayerTime("conv1", 0.9), LayerTime("fc", 0.9)]
    over = ModelProfile(layers, run_ms=2.2, measured_ms=0.77)
    assert over.caution() is not None and "2.34x" in over.caution()
    assert ModelProfile(layers, run_ms=2.0, measured_ms=1.75).caution() is None
    assert ModelProfile(layers, run_ms=2.0).caution() is None  # nothing measured


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.block = nn.Conv2d(16, 16, 3, padding=1)
        self.after = nn.Conv2d(16, 16, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        x = torch.relu(self.after(x + self.block(x)))
        return self.fc(torch.flatten(self.pool(x), 1))  # as torchvision's ResNet head


def test_static_int8_layers_past_a_residual_add_keep_their_macs(tmp_path: Path) -> None:
    # ONNX's shape inference stops at ONNX Runtime's QLinearAdd and
    # QLinearGlobalAveragePool; the conv after the one and the QGemm after the other
    # still have their MACs (a static INT8 ResNet lost them from layer1.1 on, and fc)
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [{"x": torch.randn(1, 3, 16, 16).numpy()} for _ in range(4)]

        def get_next(self) -> dict | None:
            return self.left.pop() if self.left else None

    torch.manual_seed(0)
    fp32, int8 = tmp_path / "fp32.onnx", tmp_path / "int8.onnx"
    torch.onnx.export(
        Residual().eval(), torch.randn(1, 3, 16, 16), fp32, input_names=["x"], dynamo=False
    )
    quantize_static(str(fp32), str(int8), Reader(), quant_format=QuantFormat.QOperator)
    layers = profile_layers(int8, runs=20, measure=False).by_name()
    assert "QLinearAdd" in {k for layer in layers.values() for k in layer.kernels}
    assert layers["after"].precision == "int8"
    assert layers["after"].macs == 16 * 16 * 16 * 16 * 9
    assert "QGemm" in layers["fc"].kernels and layers["fc"].macs == 16 * 10
