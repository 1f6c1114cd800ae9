"""The perception scenario's three tasks on the scene set: ``scene-detection`` (mAP@0.5),
``scene-segmentation`` (mean IoU) and ``scene-depth`` (delta < 1.25). Each brings its
model, its loss (with distillation from its own teacher), its whole-split score and its
agreement with the teacher (the proxy rung's signal: its metric with the teacher's
answers as the truth). ``data`` reads a user's own folder instead of the scenes
(``read_perception_folder``).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .._tasks import TaskError, TensorTask, cache_dir, register_task
from .._training import fit
from ._formats import IGNORE, read_perception_folder
from ._metrics import DepthAccuracy, DetectionMAP, MeanIoU
from ._models import CenterDetector, FastDepth, decode_boxes, segmenter
from ._scenes import GROUPS, SEGMENT_CLASSES, SPLIT_SCENES, Scenes, SceneSpec, scene_splits

#: the frames' normalisation: scenes are mostly mid-grey
MEAN, STD = 0.45, 0.25
#: the detector's output stride and the score a teacher's detection needs to count as
#: the truth of the proxy's agreement
STRIDE, TEACHER_SCORE = 4, 0.3


def frames(scenes: Scenes) -> torch.Tensor:
    """Scenes' images as the networks take them: float, normalised."""
    return (torch.from_numpy(scenes.images).float() / 255.0 - MEAN) / STD


class SceneTask(TensorTask):
    """One task of the perception scenario on the scene set (or a user's folder).

    Args:
        epochs: the baseline's training epochs.
        lr: its AdamW learning rate (one-cycle).
        scenes: train, val and test scene counts (default 4000, 500, 500).
        size_px: the frame's side.
        seed: the scenes' and the training's seed.
        root: Fashion-MNIST's folder (default: where apt installs it).
        data: a folder of your own frames and labels (docs/perception.md) split
            80/10/10 in file order, instead of the scenes.
    """

    kind = "scene"
    metric_name = "accuracy"
    batch_size = 64

    def __init__(
        self,
        *,
        epochs: int = 12,
        lr: float = 3e-3,
        scenes: dict[str, int] | None = None,
        size_px: int = 64,
        seed: int = 0,
        root: str | None = None,
        data: str | None = None,
    ) -> None:
        counts = dict(scenes or SPLIT_SCENES)
        if sorted(counts) != ["test", "train", "val"] or min(counts.values()) < 1:
            raise TaskError(f"task.options.scenes: train, val and test counts >= 1, got {scenes}")
        self.epochs, self.lr, self.counts, self.seed = epochs, lr, counts, seed
        self.spec = SceneSpec(size_px=size_px, seed=seed)
        self.root = Path(root) if root else None
        self.data = Path(data) if data else None

    # -- data ---------------------------------------------------------------------------
    def scenes(self) -> dict[str, Scenes]:
        """The three splits of scenes (or of the user's folder)."""
        found: dict[str, Scenes] | None = getattr(self, "_scenes", None)
        if found is None:
            if self.data is not None:
                found = _split(read_perception_folder(self.data, size_px=self.spec.size_px))
            else:
                found = scene_splits(self.spec, counts=self.counts, root=self.root)
            self._scenes = found
        return found

    def targets(self, scenes: Scenes) -> torch.Tensor:
        raise NotImplementedError

    def load_splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        return {name: (frames(s), self.targets(s)) for name, s in self.scenes().items()}

    def cache_path(self) -> Path:
        recipe = {
            "kind": self.kind,
            "epochs": self.epochs,
            "lr": self.lr,
            "counts": self.counts,
            "spec": self.spec.__dict__,
            "data": str(self.data) if self.data else None,
            "version": 2,
        }
        key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
        return cache_dir() / f"scene-{self.kind}-{key}.pt"

    # -- training -----------------------------------------------------------------------
    def validation_score(self, model: nn.Module, loader: Any) -> float:
        from frontier.evaluators import measure_accuracy

        return measure_accuracy(model, loader, score=self.score)

    def train_baseline(self, model: nn.Module) -> dict[str, Any]:
        torch.manual_seed(self.seed)
        loaders = self.loaders(batch_size=self.batch_size)
        steps = self.epochs * len(loaders.train)
        opt = torch.optim.AdamW(model.parameters(), lr=self.lr, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.lr, total_steps=steps)
        start = time.perf_counter()
        best = fit(
            model,
            lambda epoch: loaders.train,
            loaders.val,
            epochs=self.epochs,
            opt=opt,
            loss_fn=lambda out, y: self.loss(out, y, None, temperature=1.0, alpha=0.0),
            sched=sched,
            score=self.validation_score,
            label=f"{self.name} baseline",
        )
        figures = {
            "train_s": time.perf_counter() - start,
            "val_accuracy": best,
            "test_accuracy": self.validation_score(model, loaders.test),
            "metric": self.metric_label,
        }
        print(
            f"{self.name}: trained in {figures['train_s']:.0f} s, validation "
            f"{self.metric_label} {best:.4f}, test {figures['test_accuracy']:.4f}",
            file=sys.stderr,
        )
        return figures

    # -- what the search calls ----------------------------------------------------------
    metric_label = "accuracy"

    def score(self) -> Any:
        raise NotImplementedError

    def loss(
        self,
        outputs: torch.Tensor,
        targets: torch.Tensor,
        teacher: torch.Tensor | None,
        *,
        temperature: float,
        alpha: float,
    ) -> torch.Tensor:
        raise NotImplementedError

    def agreement(self, outputs: torch.Tensor, teacher: torch.Tensor) -> float:
        raise NotImplementedError

    def limitations(self) -> list[str]:
        return [
            f"accuracy is the {self.name} task's {self.metric_label}: "
            "'accuracy >= baseline - 0.01' bounds it by one point"
        ]


def _split(scenes: Scenes) -> dict[str, Scenes]:
    """A user's scenes split 80/10/10 in file order."""
    n = len(scenes)
    if n < 3:
        raise TaskError(f"{scenes.meta.get('source')}: at least 3 frames to split, got {n}")
    cut = [0, max(1, n * 8 // 10), max(2, n * 9 // 10), n]
    out = {}
    for name, a, b in zip(("train", "val", "test"), cut, cut[1:], strict=False):
        out[name] = Scenes(
            scenes.images[a:b],
            scenes.depth_m[a:b],
            scenes.segments[a:b],
            scenes.instances[a:b],
            scenes.objects[a:b],
            scenes.meta,
        )
    return out


class _DetectionScore:
    """mAP@0.5 of a detector's raw outputs against padded object rows."""

    def __init__(self) -> None:
        self.metric = DetectionMAP()

    def update(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        truth = []
        for rows in targets:
            rows = rows[rows[:, 0] >= 0]
            truth.append({"boxes": rows[:, 2:6].float(), "labels": rows[:, 0].long()})
        found = [{k: v.detach().cpu() for k, v in d.items()} for d in decode_boxes(outputs)]
        self.metric.update(found, [{k: v.cpu() for k, v in t.items()} for t in truth])

    def compute(self) -> float:
        return self.metric.compute()


def center_targets(
    objects: torch.Tensor, classes: int, size: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """CenterNet's training targets from padded object rows (N, K, 7): per class a heat
    map with a Gaussian at each object's centre cell (1 there), and per object its cell
    index, its box size in cells (log) and its centre's offset inside the cell, with a
    mask of the real rows."""
    h, w = size
    valid = objects[..., 0] >= 0
    boxes = objects[..., 2:6] / STRIDE
    cx = (boxes[..., 0] + boxes[..., 2]) / 2
    cy = (boxes[..., 1] + boxes[..., 3]) / 2
    bw = (boxes[..., 2] - boxes[..., 0]).clamp_min(1 / STRIDE)
    bh = (boxes[..., 3] - boxes[..., 1]).clamp_min(1 / STRIDE)
    ix = cx.floor().clamp(0, w - 1)
    iy = cy.floor().clamp(0, h - 1)
    sigma = (torch.minimum(bw, bh) / 6).clamp_min(0.5)
    ys = torch.arange(h, dtype=torch.float32).view(1, 1, h, 1)
    xs = torch.arange(w, dtype=torch.float32).view(1, 1, 1, w)
    d2 = (xs - ix[..., None, None]) ** 2 + (ys - iy[..., None, None]) ** 2
    gauss = torch.exp(-d2 / (2 * sigma[..., None, None] ** 2)) * valid[..., None, None]
    label = objects[..., 0].clamp_min(0).long()
    onehot = F.one_hot(label, classes).float() * valid[..., None]  # (N, K, C)
    heat = (onehot[..., None, None] * gauss[:, :, None]).amax(dim=1)  # (N, C, h, w)
    cell = (iy * w + ix).long()
    size_log = torch.stack([bw.log(), bh.log()], dim=-1)
    offset = torch.stack([cx - ix, cy - iy], dim=-1)
    return heat, cell, torch.cat([size_log, offset], dim=-1), valid


def focal_loss(logits: torch.Tensor, heat: torch.Tensor) -> torch.Tensor:
    """CenterNet's penalty-reduced focal loss of centre logits against a heat map."""
    p = torch.sigmoid(logits).clamp(1e-4, 1 - 1e-4)
    pos = heat.eq(1).float()
    pos_loss = -((1 - p) ** 2) * torch.log(p) * pos
    neg_loss = -((1 - heat) ** 4) * p**2 * torch.log(1 - p) * (1 - pos)
    return (pos_loss.sum() + neg_loss.sum()) / pos.sum().clamp_min(1)


@register_task("scene-detection")
class SceneDetection(SceneTask):
    """Detect the scenes' items (five kinds): MobileNetV3-Small's first stages and an
    anchor-free head, scored by mAP@0.5 of its decoded boxes."""

    name, kind, metric_label = "scene-detection", "detection", "mAP@0.5"

    def untrained(self) -> nn.Module:
        torch.manual_seed(self.seed)
        return CenterDetector(len(GROUPS))

    def targets(self, scenes: Scenes) -> torch.Tensor:
        return torch.from_numpy(scenes.objects).float()

    def score(self) -> Any:
        return _DetectionScore()

    def loss(
        self,
        outputs: torch.Tensor,
        targets: torch.Tensor,
        teacher: torch.Tensor | None,
        *,
        temperature: float,
        alpha: float,
    ) -> torch.Tensor:
        classes = outputs.shape[1] - 4
        heat, cell, box, valid = center_targets(
            targets.float().cpu(), classes, (outputs.shape[2], outputs.shape[3])
        )
        heat, cell, box, valid = (t.to(outputs.device) for t in (heat, cell, box, valid))
        task = focal_loss(outputs[:, :classes], heat)
        flat = outputs[:, classes:].flatten(2)  # (N, 4, h*w)
        at = flat.gather(2, cell[:, None, :].expand(-1, 4, -1)).transpose(1, 2)  # (N, K, 4)
        pred = torch.cat([at[..., :2], torch.sigmoid(at[..., 2:])], dim=-1)
        reg = (
            F.l1_loss(pred, box, reduction="none").sum(-1) * valid
        ).sum() / valid.sum().clamp_min(1)
        value = task + 0.5 * reg
        if alpha > 0 and teacher is not None:
            soft = torch.sigmoid(teacher[:, :classes] / temperature)
            kd = F.binary_cross_entropy_with_logits(outputs[:, :classes] / temperature, soft)
            kd = kd + F.l1_loss(outputs[:, classes:], teacher[:, classes:])
            value = (1 - alpha) * value + alpha * kd * 10
        return value

    def agreement(self, outputs: torch.Tensor, teacher: torch.Tensor) -> float:
        metric = DetectionMAP()
        truth = []
        for t in decode_boxes(teacher):
            keep = t["scores"] >= TEACHER_SCORE
            truth.append({"boxes": t["boxes"][keep].cpu(), "labels": t["labels"][keep].cpu()})
        found = [{k: v.cpu() for k, v in d.items()} for d in decode_boxes(outputs)]
        metric.update(found, truth)
        return metric.compute()


@register_task("scene-segmentation")
class SceneSegmentation(SceneTask):
    """Classify every pixel (sky, ground, five kinds of item): torchvision's LR-ASPP on
    MobileNetV3-Large, scored by mean IoU."""

    name, kind, metric_label = "scene-segmentation", "segmentation", "mIoU"

    def untrained(self) -> nn.Module:
        torch.manual_seed(self.seed)
        return segmenter(len(SEGMENT_CLASSES))

    def targets(self, scenes: Scenes) -> torch.Tensor:
        return torch.from_numpy(scenes.segments).long()

    def score(self) -> Any:
        return MeanIoU(len(SEGMENT_CLASSES))

    def loss(
        self,
        outputs: torch.Tensor,
        targets: torch.Tensor,
        teacher: torch.Tensor | None,
        *,
        temperature: float,
        alpha: float,
    ) -> torch.Tensor:
        value = F.cross_entropy(outputs, targets.long(), ignore_index=IGNORE)
        if alpha > 0 and teacher is not None:
            t = temperature
            kd = (
                F.kl_div(
                    F.log_softmax(outputs / t, dim=1),
                    F.softmax(teacher / t, dim=1),
                    reduction="none",
                )
                .sum(1)
                .mean()
            )
            value = (1 - alpha) * value + alpha * t * t * kd
        return value

    def agreement(self, outputs: torch.Tensor, teacher: torch.Tensor) -> float:
        metric = MeanIoU(len(SEGMENT_CLASSES))
        metric.update(outputs.argmax(1).cpu(), teacher.argmax(1).cpu())
        return metric.compute()


@register_task("scene-depth")
class SceneDepth(SceneTask):
    """Estimate every pixel's depth: a FastDepth-style network, scored by the share of
    pixels within 1.25x of the true depth (delta < 1.25)."""

    name, kind, metric_label = "scene-depth", "depth", "delta<1.25"

    def untrained(self) -> nn.Module:
        torch.manual_seed(self.seed)
        return FastDepth()

    def targets(self, scenes: Scenes) -> torch.Tensor:
        return torch.from_numpy(scenes.depth_m).float()

    def score(self) -> Any:
        return _DeltaScore()

    def loss(
        self,
        outputs: torch.Tensor,
        targets: torch.Tensor,
        teacher: torch.Tensor | None,
        *,
        temperature: float,
        alpha: float,
    ) -> torch.Tensor:
        valid = targets > 0
        log_pred = torch.log(outputs.clamp_min(1e-3))
        value = (log_pred - torch.log(targets.clamp_min(1e-3))).abs()[valid].mean()
        if alpha > 0 and teacher is not None:
            kd = (log_pred - torch.log(teacher.clamp_min(1e-3))).abs().mean()
            value = (1 - alpha) * value + alpha * kd
        return value

    def agreement(self, outputs: torch.Tensor, teacher: torch.Tensor) -> float:
        metric = DepthAccuracy()
        metric.update(outputs.cpu(), teacher.cpu())
        return metric.compute()["delta1"]


class _DeltaScore:
    def __init__(self) -> None:
        self.metric = DepthAccuracy()

    def update(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        self.metric.update(outputs.detach().cpu(), targets.cpu())

    def compute(self) -> float:
        value = self.metric.compute()["delta1"]
        return 0.0 if math.isnan(value) else value
