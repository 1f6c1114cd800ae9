"""Each perception metric against a case worked out by hand."""

from __future__ import annotations

import pytest
import torch

from frontier.experiments.perception import DepthAccuracy, DetectionMAP, MeanIoU


def test_map50_of_a_hand_worked_case() -> None:
    metric = DetectionMAP()
    # image 1: class 0 found (IoU 0.81 with its box); class 1's box missed, a false one
    # elsewhere. image 2: two boxes of class 0, the better-scored detection is wrong.
    metric.update(
        [
            {
                "boxes": torch.tensor([[1.0, 1, 10, 10], [50, 50, 60, 60]]),
                "scores": torch.tensor([0.9, 0.8]),
                "labels": torch.tensor([0, 1]),
            },
            {
                "boxes": torch.tensor([[70.0, 70, 80, 80], [20, 20, 30, 30]]),
                "scores": torch.tensor([0.95, 0.5]),
                "labels": torch.tensor([0, 0]),
            },
        ],
        [
            {
                "boxes": torch.tensor([[0.0, 0, 10, 10], [30, 0, 40, 10]]),
                "labels": torch.tensor([0, 1]),
            },
            {
                "boxes": torch.tensor([[20.0, 20, 30, 30], [0, 40, 10, 50]]),
                "labels": torch.tensor([0, 0]),
            },
        ],
    )
    # class 0, by score: 0.95 wrong (P 0/1), 0.9 right (R 1/3, P 1/2), 0.5 right (R 2/3,
    # P 2/3); COCO's interpolated precision is 2/3 up to recall 2/3 and 0 after: AP is
    # 2/3 of its 101 recall points (0..0.66: 67 of them) -> 67/101 * 2/3. Class 1: 0.
    expected = (67 / 101 * 2 / 3 + 0.0) / 2
    assert metric.compute() == pytest.approx(expected, abs=1e-4)


def test_mean_iou_over_present_classes_ignoring_unlabelled_pixels() -> None:
    metric = MeanIoU(classes=4)
    predicted = torch.tensor([[[0, 0], [1, 1]]])
    labels = torch.tensor([[[0, 1], [1, 255]]])
    metric.update(predicted, labels)
    # class 0: I 1, U 2; class 1: I 1, U 2 (the 255 pixel does not count); 2, 3 absent
    assert metric.compute() == pytest.approx(0.5)
    scores = torch.zeros(1, 4, 2, 2)
    scores[0, 1] = 1.0  # scores given: argmax over classes, class 1 everywhere
    metric = MeanIoU(classes=4)
    metric.update(scores, labels)
    assert metric.compute() == pytest.approx((0 / 1 + 2 / 3) / 2)


def test_depth_accuracy_of_a_hand_worked_case() -> None:
    metric = DepthAccuracy()
    true = torch.tensor([[[1.0, 2.0], [4.0, 0.0]]])
    predicted = torch.tensor([[[1.2, 1.5], [4.0, 9.0]]])  # the last pixel has no measurement
    metric.update(predicted, true)
    metric.update(torch.tensor([[[-1.0]]]), torch.tensor([[[2.0]]]))  # a prediction <= 0 misses
    got = metric.compute()
    # ratios 1.2 (in), 1.333 (out), 1 (in), miss: 2 of 4; |err|/true 0.2, 0.25, 0, 1.5
    assert got["delta1"] == pytest.approx(2 / 4)
    assert got["abs_rel"] == pytest.approx((0.2 + 0.25 + 0 + 1.5) / 4)
