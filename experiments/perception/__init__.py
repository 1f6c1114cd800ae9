"""The perception scenario's data, formats and metrics: scenes of real images whose boxes,
per-pixel classes and depth are exact by construction; readers for a user's own data in
the common formats; mAP@0.5, mIoU and depth accuracy."""

from ._formats import (
    IGNORE,
    CocoDetection,
    FormatError,
    read_coco_detection,
    read_depth,
    read_mask_png,
    read_perception_folder,
)
from ._metrics import DepthAccuracy, DetectionMAP, MeanIoU
from ._scenes import (
    FASHION_TO_GROUP,
    GROUPS,
    SEGMENT_CLASSES,
    Scenes,
    SceneSpec,
    draw_scene,
    make_scenes,
    scene_splits,
)

__all__ = [
    "FASHION_TO_GROUP",
    "GROUPS",
    "IGNORE",
    "SEGMENT_CLASSES",
    "CocoDetection",
    "DepthAccuracy",
    "DetectionMAP",
    "FormatError",
    "MeanIoU",
    "SceneSpec",
    "Scenes",
    "draw_scene",
    "make_scenes",
    "read_coco_detection",
    "read_depth",
    "read_mask_png",
    "read_perception_folder",
    "scene_splits",
]
