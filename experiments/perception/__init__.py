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
from ._models import CenterDetector, FastDepth, decode_boxes, segmenter
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
from ._tasks import SceneDepth, SceneDetection, SceneSegmentation, SceneTask

__all__ = [
    "FASHION_TO_GROUP",
    "GROUPS",
    "IGNORE",
    "SEGMENT_CLASSES",
    "CenterDetector",
    "CocoDetection",
    "DepthAccuracy",
    "DetectionMAP",
    "FastDepth",
    "FormatError",
    "MeanIoU",
    "SceneDepth",
    "SceneDetection",
    "SceneSegmentation",
    "SceneSpec",
    "SceneTask",
    "Scenes",
    "decode_boxes",
    "draw_scene",
    "make_scenes",
    "read_coco_detection",
    "read_depth",
    "read_mask_png",
    "read_perception_folder",
    "scene_splits",
    "segmenter",
]
