"""The perception tasks' metrics over a whole split, fed batch by batch: mAP@0.5 (COCO's
101-point interpolation, by torchmetrics on pycocotools), mean IoU over the classes
present (torchmetrics), and depth's delta < 1.25 and AbsRel (the standard depth
benchmarks' definitions, over the pixels with a measurement).

mAP is not a mean of per-batch figures: each metric keeps what it needs and
``compute()`` answers for everything it was given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ._formats import IGNORE


class DetectionMAP:
    """mAP at IoU 0.5 of detections against ground-truth boxes (xyxy, pixels)."""

    def __init__(self) -> None:
        from torchmetrics.detection import MeanAveragePrecision

        self._metric = MeanAveragePrecision(
            box_format="xyxy", iou_thresholds=[0.5], backend="pycocotools"
        )

    def update(
        self, predictions: Sequence[dict[str, torch.Tensor]], targets: Sequence[dict[str, Any]]
    ) -> None:
        """``predictions``: per image ``boxes`` (k, 4), ``scores`` (k,), ``labels`` (k,);
        ``targets``: per image ``boxes`` and ``labels``."""
        self._metric.update(
            [{k: torch.as_tensor(v) for k, v in p.items()} for p in predictions],
            [{k: torch.as_tensor(v) for k, v in t.items()} for t in targets],
        )

    def compute(self) -> float:
        """mAP@0.5 over the classes with a ground-truth box (0 with none)."""
        value = float(self._metric.compute()["map_50"])
        return max(value, 0.0)  # COCO's -1: no ground truth at all


class MeanIoU:
    """Mean intersection over union of per-pixel classes, over the classes present in
    the predictions or the labels; pixels labelled ``IGNORE`` do not count."""

    def __init__(self, classes: int) -> None:
        from torchmetrics.classification import MulticlassJaccardIndex

        self._metric = MulticlassJaccardIndex(classes, average="macro", ignore_index=IGNORE)

    def update(self, predicted: torch.Tensor, labels: torch.Tensor) -> None:
        """``predicted``: classes (N, H, W) or scores (N, C, H, W); ``labels`` (N, H, W)."""
        if predicted.dim() == 4:
            predicted = predicted.argmax(dim=1)
        self._metric.update(predicted.long(), labels.long())

    def compute(self) -> float:
        return float(self._metric.compute())


class DepthAccuracy:
    """delta < 1.25 (the share of pixels whose predicted and true depth are within 25%
    of each other, either way) and AbsRel (mean |predicted - true| / true), over the
    pixels whose true depth is above 0. A prediction at or below 0 counts as a miss."""

    THRESHOLD = 1.25

    def __init__(self) -> None:
        self.pixels = 0
        self.within = 0
        self.abs_rel_sum = 0.0

    def update(self, predicted: torch.Tensor, true: torch.Tensor) -> None:
        """``predicted`` and ``true`` depth (N, H, W) or (N, 1, H, W), metres."""
        predicted, true = predicted.reshape(true.shape[0], -1), true.reshape(true.shape[0], -1)
        valid = true > 0
        p, t = predicted[valid].double(), true[valid].double()
        ratio = torch.where(p > 0, torch.maximum(p / t, t / p.clamp_min(1e-12)), torch.inf)
        self.pixels += int(valid.sum())
        self.within += int((ratio < self.THRESHOLD).sum())
        self.abs_rel_sum += float(((p - t).abs() / t).sum())

    def compute(self) -> dict[str, float]:
        if not self.pixels:
            return {"delta1": 0.0, "abs_rel": float("nan")}
        return {"delta1": self.within / self.pixels, "abs_rel": self.abs_rel_sum / self.pixels}
