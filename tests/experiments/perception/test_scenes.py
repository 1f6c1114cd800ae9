"""A scene's labels agree with its pixels: each box encloses exactly its item's visible
pixels, depth orders the occlusion, the ground's depth follows the camera's geometry, and
the set is seeded and cached."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from frontier.experiments import write_idx
from frontier.experiments.perception import (
    FASHION_TO_GROUP,
    Scenes,
    SceneSpec,
    make_scenes,
    scene_splits,
)
from frontier.experiments.perception._scenes import GROUND, SKY, ground_depth_m


def _items(n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Made-up 28x28 items: a bright filled shape on black, as Fashion-MNIST's are."""
    rng = np.random.default_rng(seed)
    items = np.zeros((n, 28, 28), np.uint8)
    for i in range(n):
        y0, x0 = rng.integers(0, 8, 2)
        items[i, y0 : 28 - rng.integers(0, 8), x0 : 28 - rng.integers(0, 8)] = rng.integers(80, 255)
    return items, rng.integers(0, 10, n)


@pytest.fixture(scope="module")
def scenes() -> Scenes:
    items, labels = _items()
    return make_scenes(SceneSpec(), items, labels, 60, seed=1)


def test_each_box_encloses_exactly_its_items_visible_pixels(scenes: Scenes) -> None:
    boxes = 0
    for i in range(len(scenes)):
        rows = scenes.objects[i][scenes.objects[i][:, 0] >= 0]
        assert len(rows) >= 1
        for n, (group, label, x0, y0, x1, y1, z) in enumerate(rows, start=1):
            ys, xs = np.nonzero(scenes.instances[i] == n)
            assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == (x0, y0, x1, y1)
            assert group == FASHION_TO_GROUP[int(label)]
            # the item's pixels carry its class and its depth, nothing else does
            assert (scenes.segments[i][ys, xs] == 2 + group).all()
            assert np.allclose(scenes.depth_m[i][ys, xs], z)
            boxes += 1
        items = scenes.instances[i] > 0
        assert ((scenes.segments[i] >= 2) == items).all()
    assert boxes > 60


def test_a_nearer_item_occludes_a_farther_one() -> None:
    # opaque square items: one unoccluded fills its box; one behind another does not
    items, labels = np.full((5, 28, 28), 200, np.uint8), np.arange(5)
    spec = SceneSpec(items=(3, 4), min_visible=0.0)
    scenes = make_scenes(spec, items, labels, 80, seed=0)
    cut = 0
    for i in range(len(scenes)):
        rows = scenes.objects[i][scenes.objects[i][:, 0] >= 0]
        areas = []
        for n, row in enumerate(rows, start=1):
            x0, y0, x1, y1 = row[2:6].astype(int)
            areas.append(((scenes.instances[i] == n).sum(), (x1 - x0) * (y1 - y0)))
        nearest = int(np.argmin(rows[:, 6]))
        seen, box = areas[nearest]
        assert seen == box  # nothing is drawn over the nearest item
        cut += sum(seen < box for seen, box in areas)
        # every pixel of an item shows its own depth, nearer than what it hides
        for n, row in enumerate(rows, start=1):
            assert (scenes.depth_m[i][scenes.instances[i] == n] == row[6]).all()
    assert cut > 10  # farther items were cut by nearer ones


def test_the_ground_recedes_to_the_horizon_and_the_sky_is_far(scenes: Scenes) -> None:
    spec = SceneSpec()
    rows = ground_depth_m(spec)
    horizon = int(spec.horizon_row)
    ground = int(np.argmax(rows < spec.far_depth_m))  # the first row nearer than the sky
    assert horizon < ground < spec.size_px // 2
    assert (rows[:ground] == spec.far_depth_m).all()
    assert (np.diff(rows[ground:]) < 0).all()  # nearer toward the bottom
    bottom = spec.focal_px * spec.camera_height_m / (spec.size_px - 0.5 - spec.horizon_row)
    assert rows[-1] == pytest.approx(bottom)
    background = scenes.instances == 0
    assert (scenes.segments[background] <= GROUND).all()
    assert (scenes.depth_m[:, :horizon][background[:, :horizon]] == spec.far_depth_m).all()
    assert (scenes.segments[:, 0] == SKY).all()


def test_scenes_are_seeded(scenes: Scenes) -> None:
    items, labels = _items()
    again = make_scenes(SceneSpec(), items, labels, 60, seed=1)
    other = make_scenes(SceneSpec(), items, labels, 60, seed=2)
    assert (again.images == scenes.images).all() and (again.objects == scenes.objects).all()
    assert not (other.images == scenes.images).all()


def test_the_splits_are_made_once_from_fashion_mnist_files_and_cached(tmp_path: Path) -> None:
    root = tmp_path / "fashion"
    root.mkdir()
    train, train_labels = _items(60, seed=3)
    test, test_labels = _items(20, seed=4)
    write_idx(root / "train-images-idx3-ubyte", train)
    write_idx(root / "train-labels-idx1-ubyte", train_labels.astype(np.uint8))
    write_idx(root / "t10k-images-idx3-ubyte", test)
    write_idx(root / "t10k-labels-idx1-ubyte", test_labels.astype(np.uint8))
    counts = {"train": 12, "val": 4, "test": 4}
    splits = scene_splits(counts=counts, root=root, cache=tmp_path / "cache")
    assert {k: len(v) for k, v in splits.items()} == counts
    (cached,) = (tmp_path / "cache").iterdir()
    assert sorted(p.name for p in cached.iterdir()) == ["test.npz", "train.npz", "val.npz"]
    # a second call reads the cache: the data set files are no longer needed
    for p in root.iterdir():
        p.unlink()
    again = scene_splits(counts=counts, root=root, cache=tmp_path / "cache")
    assert (again["test"].images == splits["test"].images).all()
    assert again["train"].meta["spec"]["size_px"] == 64
