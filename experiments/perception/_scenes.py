"""A scene set whose labels are exact by construction: Fashion-MNIST items (real images)
standing on a ground plane at several depths, seen by a pinhole camera.

Each scene is drawn far to near, so a nearer item occludes a farther one exactly where
its pixels are; its boxes, per-pixel classes and per-pixel depth come from the same
drawing, not from a model. An item stands on the ground at depth ``z``: its foot is on
the image row where the ground is at ``z`` and its height in pixels is
``focal * height / z``. The sky is at ``far_depth_m``. Light, tints, a ground texture
and noise vary per scene, seeded.

Train and validation scenes draw items from Fashion-MNIST's training images (disjoint
halves), test scenes from its test images: no item is seen in two splits.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: Fashion-MNIST's ten classes grouped into the five kinds of object a scene's labels
#: name (tops, trousers, dresses, footwear, bags): items a camera would tell apart by
#: shape at a distance
GROUPS = ("top", "trouser", "dress", "footwear", "bag")
FASHION_TO_GROUP = (0, 1, 0, 2, 0, 3, 0, 3, 4, 3)
#: per-pixel classes: the sky, the ground, then each group
SKY, GROUND = 0, 1
SEGMENT_CLASSES = ("sky", "ground", *GROUPS)
#: an item pixel is a pixel of the item's image brighter than this (of 255)
ITEM_THRESHOLD = 24


@dataclass(frozen=True)
class SceneSpec:
    """How scenes are drawn. The defaults make 64x64 scenes of 1-4 items between 1.5 and
    4 m, whose nearest items are drawn 30 pixels tall and farthest 11."""

    size_px: int = 64
    #: the horizon's row, as a share of the image's height from the top
    horizon: float = 0.3
    camera_height_m: float = 1.0
    item_height_m: float = 0.7
    near_m: float = 1.5
    far_m: float = 4.0
    #: depth of the sky (and the cap of the ground's)
    far_depth_m: float = 10.0
    items: tuple[int, int] = (1, 4)
    #: an item less visible than this share of its pixels is left out of the scene
    min_visible: float = 0.5
    noise: float = 0.03
    seed: int = 0

    @property
    def focal_px(self) -> float:
        return float(self.size_px)

    @property
    def horizon_row(self) -> float:
        return self.horizon * self.size_px


@dataclass
class Scenes:
    """Scenes and their exact labels.

    Attributes:
        images: (N, 3, H, W) uint8, RGB.
        depth_m: (N, H, W) float32, metres.
        segments: (N, H, W) uint8, a class of ``SEGMENT_CLASSES`` per pixel.
        instances: (N, H, W) uint8, 0 or the 1-based index of the item seen there.
        objects: (N, K, 7) float32, per item (-1 rows are padding): group, Fashion-MNIST
            class, x0, y0, x1, y1 (its visible pixels' box, x1 and y1 exclusive) and depth.
    """

    images: np.ndarray
    depth_m: np.ndarray
    segments: np.ndarray
    instances: np.ndarray
    objects: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.images)

    def boxes(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Scene ``i``'s boxes (k, 4) xyxy in pixels and their groups (k,)."""
        rows = self.objects[i]
        rows = rows[rows[:, 0] >= 0]
        return rows[:, 2:6].astype(np.float32), rows[:, 0].astype(np.int64)

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez_compressed(
            tmp,
            images=self.images,
            depth_m=self.depth_m,
            segments=self.segments,
            instances=self.instances,
            objects=self.objects,
            meta=np.frombuffer(json.dumps(self.meta).encode(), dtype=np.uint8),
        )
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path) -> Scenes:
        with np.load(path) as data:
            return cls(
                data["images"],
                data["depth_m"],
                data["segments"],
                data["instances"],
                data["objects"],
                json.loads(bytes(data["meta"]).decode()),
            )


def _resize(item: np.ndarray, size: int) -> np.ndarray:
    """A (28, 28) uint8 item scaled to (size, size), bilinear."""
    from PIL import Image

    return np.asarray(Image.fromarray(item).resize((size, size), Image.Resampling.BILINEAR))


def ground_depth_m(spec: SceneSpec) -> np.ndarray:
    """Each row's depth (H,) at the middle of the row: the ground's below the horizon,
    capped at ``far_depth_m``, which the sky above it has."""
    rows = np.arange(spec.size_px) + 0.5
    below = rows - spec.horizon_row
    with np.errstate(divide="ignore"):
        z = np.where(below > 0, spec.focal_px * spec.camera_height_m / below, np.inf)
    return np.minimum(z, spec.far_depth_m).astype(np.float32)


def draw_scene(
    spec: SceneSpec, items: np.ndarray, labels: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One scene of items drawn from ``items`` (N, 28, 28) uint8 with ``labels`` (N,):
    image (3, H, W) uint8, depth (H, W), segments (H, W), instances (H, W) and objects
    (k, 7) as ``Scenes`` holds them."""
    s = spec.size_px
    depth_rows = ground_depth_m(spec)
    sky = depth_rows >= spec.far_depth_m
    depth = np.repeat(depth_rows[:, None], s, axis=1)
    segments = np.where(sky[:, None], SKY, GROUND).astype(np.uint8).repeat(s, axis=1)
    segments = segments.reshape(s, s)
    light = rng.uniform(0.6, 1.2)
    sky_rgb = rng.uniform(0.5, 1.0, 3)
    ground_rgb = rng.uniform(0.15, 0.55, 3)
    texture = rng.normal(0.0, 0.08, (s // 8 + 1, s // 8 + 1)).repeat(8, 0).repeat(8, 1)[:s, :s]
    fade = np.clip(depth / spec.far_depth_m, 0, 1)[None]  # far ground fades toward the sky
    image = np.where(
        sky[None, :, None],
        sky_rgb[:, None, None] * (1 - 0.3 * np.linspace(0, 1, s)[None, :, None]),
        ground_rgb[:, None, None] * (1 + texture)[None] * (1 - fade)
        + sky_rgb[:, None, None] * fade * 0.6,
    )
    image = np.broadcast_to(image, (3, s, s)).copy()

    count = int(rng.integers(spec.items[0], spec.items[1] + 1))
    placed = []
    for _ in range(count):
        z = float(rng.uniform(spec.near_m, spec.far_m))
        size = max(3, round(spec.focal_px * spec.item_height_m / z))
        foot = spec.horizon_row + spec.focal_px * spec.camera_height_m / z
        top = round(foot) - size
        left = int(rng.integers(-size // 4, s - size + size // 4 + 1))
        k = int(rng.integers(len(items)))
        tint = rng.uniform(0.35, 1.0, 3)
        placed.append((z, size, top, left, k, tint))
    placed.sort(key=lambda p: -p[0])  # far to near: nearer items occlude farther ones

    def render(keep: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        img, dep, seg = image.copy(), depth.copy(), segments.copy()
        inst = np.zeros((s, s), np.uint8)
        full = {}
        for n, j in enumerate(keep, start=1):
            z, size, top, left, k, tint = placed[j]
            sprite = _resize(items[k], size)
            y0, x0 = max(top, 0), max(left, 0)
            y1, x1 = min(top + size, s), min(left + size, s)
            if y1 <= y0 or x1 <= x0:
                full[n] = 0
                continue
            part = sprite[y0 - top : y1 - top, x0 - left : x1 - left]
            mask = part > ITEM_THRESHOLD
            full[n] = int((sprite > ITEM_THRESHOLD).sum())
            color = tint[:, None, None] * (part[None] / 255.0) * light
            img[:, y0:y1, x0:x1] = np.where(mask[None], color, img[:, y0:y1, x0:x1])
            dep[y0:y1, x0:x1] = np.where(mask, z, dep[y0:y1, x0:x1])
            seg[y0:y1, x0:x1] = np.where(mask, 2 + FASHION_TO_GROUP[labels[k]], seg[y0:y1, x0:x1])
            inst[y0:y1, x0:x1] = np.where(mask, n, inst[y0:y1, x0:x1])
        return img, dep, seg, inst, full

    keep = list(range(len(placed)))
    img, dep, seg, inst, full = render(keep)
    visible = [(inst == n).sum() / max(full[n], 1) for n in range(1, len(keep) + 1)]
    if any(v < spec.min_visible for v in visible):  # leave out the hidden, draw again
        keep = [j for j, v in zip(keep, visible, strict=True) if v >= spec.min_visible]
        img, dep, seg, inst, full = render(keep)
    rows: list[list[float]] = []
    renumber = np.zeros(len(keep) + 1, np.uint8)  # items hidden whole leave no number
    for n, j in enumerate(keep, start=1):
        ys, xs = np.nonzero(inst == n)
        if len(ys) == 0:
            continue
        renumber[n] = len(rows) + 1
        k = placed[j][4]
        label = int(labels[k])
        box = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        rows.append([FASHION_TO_GROUP[label], label, *box, placed[j][0]])
    inst = renumber[inst]
    img = img + rng.normal(0.0, spec.noise, img.shape)
    out = (np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8)
    return out, dep.astype(np.float32), seg, inst, np.asarray(rows, np.float32).reshape(-1, 7)


def make_scenes(
    spec: SceneSpec, items: np.ndarray, labels: np.ndarray, count: int, seed: int
) -> Scenes:
    """``count`` scenes drawn from ``items`` and ``labels``, seeded."""
    if len(items) == 0:
        raise ValueError("make_scenes: no items to draw")
    rng = np.random.default_rng(seed)
    s, most = spec.size_px, spec.items[1]
    images = np.zeros((count, 3, s, s), np.uint8)
    depth = np.zeros((count, s, s), np.float32)
    segments = np.zeros((count, s, s), np.uint8)
    instances = np.zeros((count, s, s), np.uint8)
    objects = np.full((count, most, 7), -1, np.float32)
    for i in range(count):
        images[i], depth[i], segments[i], instances[i], rows = draw_scene(spec, items, labels, rng)
        objects[i, : len(rows)] = rows
    return Scenes(images, depth, segments, instances, objects, {"spec": asdict(spec)})


#: how many scenes each split holds by default
SPLIT_SCENES = {"train": 4000, "val": 500, "test": 500}


def spec_key(spec: SceneSpec, counts: dict[str, int]) -> str:
    """A short hash naming a scene set in the cache (its spec, split sizes and version)."""
    text = json.dumps({"spec": asdict(spec), "counts": counts, "version": 1}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def scene_splits(
    spec: SceneSpec | None = None,
    *,
    counts: dict[str, int] | None = None,
    root: Path | None = None,
    cache: Path | None = None,
) -> dict[str, Scenes]:
    """The train, val and test scene sets: generated once from Fashion-MNIST under
    ``root`` (default: where ``apt-get install dataset-fashion-mnist`` puts it) and
    cached under ``cache`` (default: ``cache_dir()``)."""
    from .._idx import FASHION_MNIST_ROOT, load_idx_split
    from .._tasks import cache_dir

    spec = spec or SceneSpec()
    counts = counts or dict(SPLIT_SCENES)
    folder = (cache or cache_dir()) / f"scenes-{spec_key(spec, counts)}"
    paths = {name: folder / f"{name}.npz" for name in counts}
    if all(p.is_file() for p in paths.values()):
        return {name: Scenes.load(p) for name, p in paths.items()}
    train_items, train_labels = load_idx_split(root or FASHION_MNIST_ROOT, "train")
    test_items, test_labels = load_idx_split(root or FASHION_MNIST_ROOT, "test")
    half = len(train_items) * 5 // 6
    sources = {
        "train": (train_items[:half], train_labels[:half]),
        "val": (train_items[half:], train_labels[half:]),
        "test": (test_items, test_labels),
    }
    out = {}
    for k, (name, n) in enumerate(counts.items()):
        items, labels = sources[name]
        out[name] = make_scenes(spec, items, labels, n, seed=spec.seed * 1000 + k)
        out[name].save(paths[name])
    return out
