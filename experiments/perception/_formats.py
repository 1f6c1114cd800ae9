"""A user's own perception data in the formats it usually comes in: detection boxes as a
COCO JSON file, per-pixel classes as single-channel PNG masks, depth as 16-bit PNG (in
millimetres by default) or as NumPy ``.npy`` arrays in metres. Each reader checks what it
reads and names the file, and the entry or field, that is wrong.

``read_perception_folder`` turns a folder of them into ``Scenes``, the form the
perception tasks train and score on:

    root/images/NAME.png|.jpg      the frames (any size: resized to size_px)
    root/annotations.json          COCO detection boxes (optional)
    root/masks/NAME.png            per-pixel classes (optional; 255 = not labelled)
    root/depth/NAME.png|.npy       per-pixel depth (optional; 0 = not measured)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._tasks import TaskError
from ._scenes import Scenes

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
#: a mask pixel that carries no class
IGNORE = 255


class FormatError(TaskError):
    """A file of a user's data that cannot be read as its format says."""


@dataclass
class CocoDetection:
    """A COCO detection file: its images, each image's boxes (xyxy, pixels) and
    category ids, and the categories by id."""

    images: dict[int, dict[str, Any]]
    boxes: dict[int, np.ndarray] = field(default_factory=dict)
    labels: dict[int, np.ndarray] = field(default_factory=dict)
    categories: dict[int, str] = field(default_factory=dict)

    def by_file(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Each image's boxes and category ids by its file name."""
        empty = (np.zeros((0, 4), np.float32), np.zeros(0, np.int64))
        return {
            im["file_name"]: (self.boxes.get(i, empty[0]), self.labels.get(i, empty[1]))
            for i, im in self.images.items()
        }


def _field(entry: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(entry, dict) or key not in entry:
        raise FormatError(f"{where}: no {key!r}")
    value = entry[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise FormatError(
            f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {value!r}"
        )
    return value


def read_coco_detection(path: Path) -> CocoDetection:
    """A COCO detection JSON file (``images``, ``annotations`` with ``bbox`` as
    [x, y, width, height], ``categories``), checked entry by entry."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise FormatError(f"{path}: cannot read ({err})") from None
    except json.JSONDecodeError as err:
        raise FormatError(f"{path}: not JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(data, dict):
        raise FormatError(f"{path}: a COCO file is a JSON object, got {type(data).__name__}")
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise FormatError(f"{path}: no list {key!r} (a COCO detection file has all three)")
    out = CocoDetection({})
    for i, c in enumerate(data["categories"]):
        where = f"{path}: categories[{i}]"
        out.categories[_field(c, "id", int, where)] = str(_field(c, "name", str, where))
    for i, im in enumerate(data["images"]):
        where = f"{path}: images[{i}]"
        out.images[_field(im, "id", int, where)] = {
            "file_name": _field(im, "file_name", str, where),
            "width": _field(im, "width", int, where),
            "height": _field(im, "height", int, where),
        }
    boxes: dict[int, list[list[float]]] = {}
    labels: dict[int, list[int]] = {}
    for i, a in enumerate(data["annotations"]):
        where = f"{path}: annotations[{i}]"
        image = _field(a, "image_id", int, where)
        if image not in out.images:
            raise FormatError(f"{where}.image_id: {image} is no image's id")
        category = _field(a, "category_id", int, where)
        if category not in out.categories:
            raise FormatError(f"{where}.category_id: {category} is no category's id")
        box = _field(a, "bbox", list, where)
        if len(box) != 4 or not all(isinstance(v, int | float) for v in box):
            raise FormatError(f"{where}.bbox: expected [x, y, width, height], got {box!r}")
        x, y, w, h = (float(v) for v in box)
        if w <= 0 or h <= 0:
            raise FormatError(f"{where}.bbox: width and height must be > 0, got {box!r}")
        if a.get("iscrowd", 0):
            continue  # crowd regions are not objects to find
        boxes.setdefault(image, []).append([x, y, x + w, y + h])
        labels.setdefault(image, []).append(category)
    out.boxes = {k: np.asarray(v, np.float32).reshape(-1, 4) for k, v in boxes.items()}
    out.labels = {k: np.asarray(v, np.int64) for k, v in labels.items()}
    return out


def _open_image(path: Path) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(path)
        image.load()
    except (OSError, UnidentifiedImageError) as err:
        raise FormatError(f"{path}: cannot read as an image ({err})") from None
    return image


def read_mask_png(path: Path) -> np.ndarray:
    """A per-pixel class mask (H, W) int64 from a single-channel PNG (8-bit grey, palette
    or 16-bit): each pixel's value is its class."""
    image = _open_image(Path(path))
    if image.mode not in ("L", "P", "I;16", "I"):
        raise FormatError(
            f"{path}: a class mask has one channel (PNG mode L, P or I;16), got mode "
            f"{image.mode}: save each pixel's class index, not a colour"
        )
    return np.asarray(image, dtype=np.int64)


def read_depth(path: Path, *, png_scale_m: float = 0.001) -> np.ndarray:
    """Per-pixel depth (H, W) float32 in metres: a 16-bit PNG times ``png_scale_m`` (0.001:
    millimetres; KITTI's is 1/256), or a ``.npy`` array in metres. 0 (or not finite)
    marks a pixel with no measurement."""
    path = Path(path)
    if path.suffix == ".npy":
        try:
            depth = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise FormatError(f"{path}: cannot read as a NumPy array ({err})") from None
        if depth.ndim != 2 or not np.issubdtype(depth.dtype, np.number):
            raise FormatError(
                f"{path}: depth is a 2-D array of numbers, got {depth.dtype} {depth.shape}"
            )
        depth = depth.astype(np.float32)
    else:
        image = _open_image(path)
        if image.mode not in ("I;16", "I;16B", "I"):
            raise FormatError(
                f"{path}: a depth PNG has 16 bits per pixel (mode I;16), got mode "
                f"{image.mode}: 8 bits cannot hold depth"
            )
        depth = np.asarray(image, dtype=np.float32) * png_scale_m
    if (depth < 0).any():
        raise FormatError(f"{path}: depth below 0 ({float(depth.min()):g})")
    return np.where(np.isfinite(depth), depth, 0.0).astype(np.float32)


def _resized(array: np.ndarray, size: int, *, nearest: bool) -> np.ndarray:
    from PIL import Image

    method = Image.Resampling.NEAREST if nearest else Image.Resampling.BILINEAR
    if array.dtype == np.int64:  # PIL resizes 32-bit integer images
        array = array.astype(np.int32)
    return np.asarray(Image.fromarray(array).resize((size, size), method))


def read_perception_folder(root: Path, *, size_px: int = 64, png_scale_m: float = 0.001) -> Scenes:
    """A folder of a user's frames and labels (this module's layout) as ``Scenes``,
    each frame resized to ``size_px`` square; boxes scale with it, masks and depth take
    the nearest pixel. Labels a folder lacks are left empty: no boxes, masks all 255,
    depth all 0 (``meta["labels"]`` says which it has)."""
    root = Path(root)
    folder = root / "images"
    if not folder.is_dir():
        raise FormatError(f"{root}: no images/ folder (see the layout in docs/perception.md)")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise FormatError(f"{folder}: no .png or .jpg images")
    coco_path = root / "annotations.json"
    coco = read_coco_detection(coco_path) if coco_path.is_file() else None
    boxes = coco.by_file() if coco is not None else None
    categories = sorted(coco.categories) if coco is not None else []
    index = {c: i for i, c in enumerate(categories)}
    n, s = len(files), size_px
    images = np.zeros((n, 3, s, s), np.uint8)
    depth = np.zeros((n, s, s), np.float32)
    segments = np.full((n, s, s), IGNORE, np.uint8)
    rows: list[np.ndarray] = []
    has = {"boxes": boxes is not None, "masks": False, "depth": False}
    for i, path in enumerate(files):
        image = _open_image(path).convert("RGB")
        width, height = image.size
        images[i] = _resized(np.asarray(image), s, nearest=False).transpose(2, 0, 1)
        mask_path = root / "masks" / f"{path.stem}.png"
        if mask_path.is_file():
            mask = read_mask_png(mask_path)
            if mask.shape != (height, width):
                raise FormatError(
                    f"{mask_path}: {mask.shape} pixels, its image {path} has {(height, width)}"
                )
            if mask.max() > IGNORE:
                raise FormatError(f"{mask_path}: class {int(mask.max())} past {IGNORE - 1}")
            segments[i] = _resized(mask.astype(np.uint8), s, nearest=True)
            has["masks"] = True
        for suffix in (".png", ".npy"):
            depth_path = root / "depth" / f"{path.stem}{suffix}"
            if depth_path.is_file():
                d = read_depth(depth_path, png_scale_m=png_scale_m)
                if d.shape != (height, width):
                    raise FormatError(
                        f"{depth_path}: {d.shape} pixels, its image {path} has {(height, width)}"
                    )
                depth[i] = _resized(d, s, nearest=True)
                has["depth"] = True
                break
        found = boxes.get(path.name) if boxes is not None else None
        if found is None:
            rows.append(np.zeros((0, 7), np.float32))
            continue
        xyxy, cats = found
        scaled = xyxy * np.array([s / width, s / height] * 2, np.float32)
        group = np.array([index[c] for c in cats], np.float32)
        rows.append(np.column_stack([group, group, scaled, np.zeros(len(cats), np.float32)]))
    most = max((len(r) for r in rows), default=0)
    objects = np.full((n, max(most, 1), 7), -1, np.float32)
    for i, r in enumerate(rows):
        objects[i, : len(r)] = r
    meta = {
        "source": str(root),
        "files": [p.name for p in files],
        "classes": [coco.categories[c] for c in categories] if coco is not None else [],
        "labels": [k for k, v in has.items() if v],
    }
    return Scenes(images, depth, segments, np.zeros((n, s, s), np.uint8), objects, meta)
