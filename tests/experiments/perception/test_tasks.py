"""The perception tasks' own pieces: CenterNet's targets from a scene's boxes, decoding a
detector's output back to boxes, each task's loss and its agreement with a teacher."""

from __future__ import annotations

import math

import pytest
import torch

from frontier.experiments.perception import (
    DetectionMAP,
    SceneDepth,
    SceneDetection,
    SceneSegmentation,
    decode_boxes,
)
from frontier.experiments.perception._tasks import STRIDE, center_targets

#: two scenes' padded object rows: kind, class, x0, y0, x1, y1, depth
OBJECTS = torch.tensor(
    [
        [[2, 5, 10.0, 20, 30, 44, 2.0], [0, 0, 40, 8, 52, 24, 3.0], [-1] * 7],
        [[4, 8, 33.0, 33, 45, 61, 1.6], [-1] * 7, [-1] * 7],
    ]
)


def test_center_targets_put_each_box_on_its_centre_cell() -> None:
    heat, cell, box, valid = center_targets(OBJECTS, 5, (16, 16))
    assert valid.tolist() == [[True, True, False], [True, False, False]]
    # box 1: centre (20, 32) px -> (5, 8) cells, kind 2
    assert heat[0, 2, 8, 5] == 1.0 and cell[0, 0] == 8 * 16 + 5
    assert heat[0, 2].max() == 1.0 and heat[0, 2, 8, 9] < 1.0
    assert heat[0, 1].max() == 0.0 and heat[1, 4, 11, 9] == 1.0
    # its size in cells (log) and its centre's offset inside the cell
    assert box[0, 0, :2].tolist() == pytest.approx([math.log(20 / STRIDE), math.log(24 / STRIDE)])
    assert box[0, 0, 2:].tolist() == pytest.approx([0.0, 0.0])
    assert box[1, 0, 2:].tolist() == pytest.approx([0.75, 0.75])  # (39, 47) px


def _perfect(objects: torch.Tensor, classes: int = 5) -> torch.Tensor:
    """The output a perfect detector would give: its centre logits high exactly at each
    centre cell, its size and offset there the targets' (offset as a logit)."""
    heat, cell, box, valid = center_targets(objects, classes, (16, 16))
    out = torch.full((len(objects), classes + 4, 16, 16), -9.0)
    out[:, :classes] = torch.where(heat == 1, 9.0, -9.0)
    for i in range(len(objects)):
        for k in range(objects.shape[1]):
            if valid[i, k]:
                y, x = divmod(int(cell[i, k]), 16)
                out[i, classes : classes + 2, y, x] = box[i, k, :2]
                out[i, classes + 2 :, y, x] = torch.logit(box[i, k, 2:].clamp(1e-4, 1 - 1e-4))
    return out


def test_a_perfect_detectors_output_decodes_to_the_boxes_and_scores_one() -> None:
    output = _perfect(OBJECTS)
    found = decode_boxes(output, top=5)
    best = found[0]["boxes"][found[0]["scores"] > 0.5]
    torch.testing.assert_close(
        sorted(best.tolist()), sorted(OBJECTS[0, :2, 2:6].tolist()), atol=1e-3, rtol=0
    )
    task = SceneDetection()
    score = task.score()
    score.update(output, OBJECTS)
    assert score.compute() == pytest.approx(1.0)
    assert task.agreement(output, output) == pytest.approx(1.0)
    # the perfect output's loss is lower than a blank one's, and distillation toward
    # itself adds nothing to the task's loss
    blank = torch.zeros_like(output)
    perfect = task.loss(output, OBJECTS, None, temperature=1.0, alpha=0.0)
    assert perfect < task.loss(blank, OBJECTS, None, temperature=1.0, alpha=0.0)
    assert torch.isfinite(task.loss(blank, OBJECTS, output, temperature=2.0, alpha=0.5))


def test_a_detector_that_misses_every_box_scores_zero() -> None:
    metric = DetectionMAP()
    shifted = OBJECTS.clone()
    shifted[..., 2:6] = (shifted[..., 2:6] + 100).where(shifted[..., :1] >= 0, shifted[..., 2:6])
    found = decode_boxes(_perfect(OBJECTS))
    truth = [
        {"boxes": rows[rows[:, 0] >= 0][:, 2:6], "labels": rows[rows[:, 0] >= 0][:, 0].long()}
        for rows in shifted
    ]
    metric.update(found, truth)
    assert metric.compute() == 0.0


def test_segmentation_and_depth_losses_and_agreement() -> None:
    seg = SceneSegmentation()
    labels = torch.randint(0, 7, (2, 8, 8))
    labels[0, 0, 0] = 255  # not labelled: no loss there
    right = torch.nn.functional.one_hot(labels.clamp(max=6), 7).permute(0, 3, 1, 2).float() * 20
    wrong = right.roll(1, dims=1)
    assert seg.loss(right, labels, None, temperature=1.0, alpha=0.0) < 1e-3
    assert seg.loss(wrong, labels, None, temperature=1.0, alpha=0.0) > 1.0
    assert seg.agreement(right, right) == pytest.approx(1.0)
    assert seg.loss(right, labels, wrong, temperature=2.0, alpha=0.5) > seg.loss(
        right, labels, right, temperature=2.0, alpha=0.5
    )

    depth = SceneDepth()
    true = torch.tensor([[[2.0, 4.0], [0.0, 8.0]]])  # one pixel without a measurement
    assert depth.loss(true, true, None, temperature=1.0, alpha=0.0) == pytest.approx(0.0)
    far = true * 2
    assert depth.loss(far, true, None, temperature=1.0, alpha=0.0) == pytest.approx(math.log(2))
    assert depth.agreement(true * 1.2, true) == pytest.approx(3 / 3)
    score = depth.score()
    score.update(far, true)
    assert score.compute() == 0.0
