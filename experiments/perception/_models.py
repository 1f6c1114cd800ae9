"""The perception scenario's networks, of the kinds deployed on robots, each one plain
tensor in and one plain tensor out (what pruning, export and every runtime take):

- ``CenterDetector``: MobileNetV3-Small's first stages and an anchor-free head
  (CenterNet's): per class a heat map of object centres, and per cell the box's size and
  the centre's offset, at a quarter of the frame's resolution. Decoding the boxes
  (``decode_boxes``: a 3x3 max-pool keeps the peaks, the top ones become boxes) is the
  post-processing, outside the network, left uncompressed.
- ``segmenter``: torchvision's LR-ASPP on MobileNetV3-Large's first blocks, its output
  the per-pixel class scores at the frame's resolution.
- ``FastDepth``: FastDepth's shape (Wofk et al., 2019): a MobileNetV2 encoder and a
  decoder of depthwise-separable 5x5 convolutions and nearest upsampling with additive
  skips, its output the per-pixel depth in metres (softplus: above 0).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CenterDetector(nn.Module):
    """Anchor-free detection at stride 4: outputs (N, classes + 4, H/4, W/4): class
    centre logits, then box width and height (in output cells, log) and the centre's
    offset inside its cell (0..1, logits)."""

    def __init__(self, classes: int, width: int = 64) -> None:
        from torchvision.models import mobilenet_v3_small

        super().__init__()
        features = mobilenet_v3_small(weights=None).features
        self.stem = features[:2]  # stride 4, 16 channels
        self.mid = features[2:4]  # stride 8, 24 channels
        self.deep = features[4:9]  # stride 16, 48 channels
        self.lateral_mid = nn.Conv2d(24, width, 1)
        self.lateral_deep = nn.Conv2d(48, width, 1)
        self.lateral_stem = nn.Conv2d(16, width, 1)
        self.head = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, classes + 4, 1),
        )
        self.classes = classes
        last = self.head[-1]
        assert isinstance(last, nn.Conv2d) and last.bias is not None
        nn.init.constant_(last.bias[:classes], -2.19)  # CenterNet: prior 0.1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s4 = self.stem(x)
        s8 = self.mid(s4)
        s16 = self.deep(s8)
        up = self.lateral_mid(s8) + F.interpolate(self.lateral_deep(s16), scale_factor=2.0)
        up = self.lateral_stem(s4) + F.interpolate(up, scale_factor=2.0)
        return self.head(up)


class _Segmenter(nn.Module):
    """torchvision's segmentation models answer a dict; this answers its ``out``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)["out"]


def segmenter(classes: int) -> nn.Module:
    """torchvision's LR-ASPP head on MobileNetV3-Large's first 13 blocks, untrained,
    ``classes`` per pixel. For 64x64 frames its low branch reads stride 4 (24 channels,
    where torchvision's own reads stride 8) and its high branch stride 16 (112 channels,
    before the last stage): small items keep their pixels, and the 960-channel stages a
    224-pixel image needs are not run."""
    from torchvision.models import mobilenet_v3_large
    from torchvision.models._utils import IntermediateLayerGetter
    from torchvision.models.segmentation.lraspp import LRASPP

    features = mobilenet_v3_large(weights=None).features[:13]
    backbone = IntermediateLayerGetter(features, {"3": "low", "12": "high"})
    return _Segmenter(LRASPP(backbone, 24, 112, classes, inter_channels=128))


def _separable(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cin, 5, padding=2, groups=cin, bias=False),
        nn.BatchNorm2d(cin),
        nn.ReLU(inplace=True),
        nn.Conv2d(cin, cout, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class FastDepth(nn.Module):
    """A MobileNetV2 encoder (to stride 16) and a FastDepth decoder: four stages of a
    5x5 depthwise-separable convolution and 2x nearest upsampling, each adding the
    encoder's features of its resolution, then a 1x1 convolution to depth."""

    def __init__(self, width_mult: float = 0.5) -> None:
        from torchvision.models import mobilenet_v2

        super().__init__()
        features = mobilenet_v2(weights=None, width_mult=width_mult).features
        self.enc2 = features[:2]  # stride 2
        self.enc4 = features[2:4]  # stride 4
        self.enc8 = features[4:7]  # stride 8
        self.enc16 = features[7:14]  # stride 16
        c2, c4, c8, c16 = (self._out(m) for m in (self.enc2, self.enc4, self.enc8, self.enc16))
        self.dec16 = _separable(c16, c8)
        self.dec8 = _separable(c8, c4)
        self.dec4 = _separable(c4, c2)
        self.dec2 = _separable(c2, c2)
        self.out = nn.Conv2d(c2, 1, 1)
        assert self.out.bias is not None
        nn.init.constant_(self.out.bias, 4.0)  # softplus(4) = 4 m: about a scene's middle

    @staticmethod
    def _out(block: nn.Module) -> int:
        convs = [m for m in block.modules() if isinstance(m, nn.Conv2d)]
        return int(convs[-1].out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e2 = self.enc2(x)
        e4 = self.enc4(e2)
        e8 = self.enc8(e4)
        e16 = self.enc16(e8)
        d = F.interpolate(self.dec16(e16), scale_factor=2.0) + e8
        d = F.interpolate(self.dec8(d), scale_factor=2.0) + e4
        d = F.interpolate(self.dec4(d), scale_factor=2.0) + e2
        d = F.interpolate(self.dec2(d), scale_factor=2.0)
        return F.softplus(self.out(d)).squeeze(1)


def decode_boxes(
    output: torch.Tensor, *, top: int = 20, stride: int = 4
) -> list[dict[str, torch.Tensor]]:
    """``CenterDetector``'s output as boxes: each class's heat-map peaks (a cell at the
    maximum of its 3x3 neighbourhood), the ``top`` best per image, each with its box
    (xyxy, frame pixels), score and class."""
    classes = output.shape[1] - 4
    heat = torch.sigmoid(output[:, :classes].float())
    peaks = heat * (F.max_pool2d(heat, 3, stride=1, padding=1) == heat)
    n, _, h, w = heat.shape
    scores, index = peaks.reshape(n, -1).topk(min(top, classes * h * w))
    label = index // (h * w)
    cell = index % (h * w)
    cy, cx = (cell // w).float(), (cell % w).float()
    size = output[:, classes : classes + 2].float().exp().reshape(n, 2, -1)
    offset = torch.sigmoid(output[:, classes + 2 :].float()).reshape(n, 2, -1)
    out = []
    for i in range(n):
        bw, bh = size[i, 0, cell[i]], size[i, 1, cell[i]]
        x = cx[i] + offset[i, 0, cell[i]]
        y = cy[i] + offset[i, 1, cell[i]]
        boxes = torch.stack([x - bw / 2, y - bh / 2, x + bw / 2, y + bh / 2], dim=1) * stride
        out.append({"boxes": boxes, "scores": scores[i], "labels": label[i]})
    return out
