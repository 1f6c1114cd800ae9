"""A user's own perception data read from the formats it comes in: COCO detection JSON,
class masks as PNG, depth as 16-bit PNG or NPY; a folder of them becomes scenes; each
bad file is refused with its name and what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from frontier.experiments.perception import (
    FormatError,
    read_coco_detection,
    read_depth,
    read_mask_png,
    read_perception_folder,
)


def _coco(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "images": [
            {"id": 1, "file_name": "a.png", "width": 40, "height": 20},
            {"id": 2, "file_name": "b.png", "width": 40, "height": 20},
        ],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 7, "bbox": [4, 2, 10, 6]},
            {"id": 2, "image_id": 1, "category_id": 3, "bbox": [20.5, 0, 8, 20]},
            {"id": 3, "image_id": 1, "category_id": 3, "bbox": [0, 0, 40, 20], "iscrowd": 1},
        ],
        "categories": [{"id": 3, "name": "cup"}, {"id": 7, "name": "robot"}],
    }
    data.update(over)
    return data


def test_a_coco_file_gives_each_images_boxes_as_corners(tmp_path: Path) -> None:
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(_coco()))
    coco = read_coco_detection(path)
    assert coco.categories == {3: "cup", 7: "robot"}
    by_file = coco.by_file()
    boxes, labels = by_file["a.png"]
    np.testing.assert_allclose(boxes, [[4, 2, 14, 8], [20.5, 0, 28.5, 20]])
    assert labels.tolist() == [7, 3]  # the crowd region is no object to find
    assert by_file["b.png"][0].shape == (0, 4)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"annotations": None}, "no list 'annotations'"),
        (
            {"annotations": [{"image_id": 9, "category_id": 3, "bbox": [0, 0, 1, 1]}]},
            "annotations[0].image_id: 9 is no image's id",
        ),
        (
            {"annotations": [{"image_id": 1, "category_id": 4, "bbox": [0, 0, 1, 1]}]},
            "annotations[0].category_id: 4 is no category's id",
        ),
        (
            {"annotations": [{"image_id": 1, "category_id": 3, "bbox": [0, 0, 1]}]},
            "annotations[0].bbox: expected [x, y, width, height]",
        ),
        (
            {"annotations": [{"image_id": 1, "category_id": 3, "bbox": [0, 0, 0, 5]}]},
            "annotations[0].bbox: width and height must be > 0",
        ),
        ({"images": [{"id": 1, "file_name": "a.png", "width": 40}]}, "images[0]: no 'height'"),
    ],
)
def test_a_bad_coco_file_names_the_entry(
    tmp_path: Path, over: dict[str, Any], message: str
) -> None:
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(_coco(**over)))
    with pytest.raises(FormatError, match=str(path)) as err:
        read_coco_detection(path)
    assert message in str(err.value)


def test_a_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ann.json"
    path.write_text("{images: [")
    with pytest.raises(FormatError, match=r"ann.json: not JSON"):
        read_coco_detection(path)


def test_masks_and_depth_read_from_png_and_npy(tmp_path: Path) -> None:
    mask = np.array([[0, 1], [2, 255]], np.uint8)
    Image.fromarray(mask, mode="L").save(tmp_path / "m.png")
    assert read_mask_png(tmp_path / "m.png").tolist() == mask.tolist()
    palette = Image.fromarray(mask, mode="L").convert("P")
    palette.save(tmp_path / "p.png")
    assert read_mask_png(tmp_path / "p.png").shape == (2, 2)

    millimetres = np.array([[0, 1500], [2500, 65535]], np.uint16)
    Image.fromarray(millimetres).save(tmp_path / "d.png")
    np.testing.assert_allclose(read_depth(tmp_path / "d.png"), [[0, 1.5], [2.5, 65.535]], rtol=1e-6)
    np.testing.assert_allclose(
        read_depth(tmp_path / "d.png", png_scale_m=1 / 256), millimetres / 256, rtol=1e-6
    )
    np.save(tmp_path / "d.npy", np.array([[1.0, np.nan], [2.0, 3.0]]))
    assert read_depth(tmp_path / "d.npy").tolist() == [[1.0, 0.0], [2.0, 3.0]]


def test_a_colour_mask_and_an_8_bit_depth_are_refused(tmp_path: Path) -> None:
    Image.new("RGB", (2, 2)).save(tmp_path / "rgb.png")
    with pytest.raises(FormatError, match=r"rgb.png: a class mask has one channel.*got mode RGB"):
        read_mask_png(tmp_path / "rgb.png")
    Image.new("L", (2, 2)).save(tmp_path / "grey.png")
    with pytest.raises(FormatError, match=r"grey.png: a depth PNG has 16 bits.*8 bits cannot"):
        read_depth(tmp_path / "grey.png")
    np.save(tmp_path / "neg.npy", np.array([[-1.0]]))
    with pytest.raises(FormatError, match=r"neg.npy: depth below 0"):
        read_depth(tmp_path / "neg.npy")
    (tmp_path / "junk.png").write_bytes(b"not a png")
    with pytest.raises(FormatError, match=r"junk.png: cannot read as an image"):
        read_mask_png(tmp_path / "junk.png")


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "mine"
    for sub in ("images", "masks", "depth"):
        (root / sub).mkdir(parents=True)
    for name in ("a", "b"):
        Image.new("RGB", (40, 20), (200, 10, 10)).save(root / "images" / f"{name}.png")
    mask = np.zeros((20, 40), np.uint8)
    mask[2:8, 4:14] = 2
    Image.fromarray(mask).save(root / "masks" / "a.png")
    depth = np.full((20, 40), 3000, np.uint16)
    Image.fromarray(depth).save(root / "depth" / "a.png")
    np.save(root / "depth" / "b.npy", np.full((20, 40), 1.25, np.float32))
    (root / "annotations.json").write_text(json.dumps(_coco()))
    return root


def test_a_folder_of_own_data_becomes_scenes(tmp_path: Path) -> None:
    scenes = read_perception_folder(_folder(tmp_path), size_px=20)
    assert scenes.images.shape == (2, 3, 20, 20)
    assert scenes.meta["classes"] == ["cup", "robot"]
    assert scenes.meta["labels"] == ["boxes", "masks", "depth"]
    boxes, groups = scenes.boxes(0)
    # 40x20 frames resized to 20x20: x halves, y stays; categories 3, 7 -> 0, 1
    np.testing.assert_allclose(boxes, [[2, 2, 7, 8], [10.25, 0, 14.25, 20]])
    assert groups.tolist() == [1, 0]
    assert scenes.boxes(1)[0].shape == (0, 4)
    assert (scenes.segments[0][2:8, 2:7] == 2).all() and scenes.segments[0][0, 0] == 0
    assert (scenes.segments[1] == 255).all()  # no mask: not labelled
    assert np.allclose(scenes.depth_m[0], 3.0) and np.allclose(scenes.depth_m[1], 1.25)


def test_a_mask_of_another_size_than_its_image_is_refused(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    Image.fromarray(np.zeros((10, 10), np.uint8)).save(root / "masks" / "b.png")
    with pytest.raises(FormatError, match=r"masks/b.png: \(10, 10\) pixels, its image .*b.png"):
        read_perception_folder(root)
    with pytest.raises(FormatError, match=r"no images/ folder"):
        read_perception_folder(tmp_path / "nowhere")
