"""What a model costs on a device, as a pipeline: measure -> bundle -> price -> calibrate
-> predict, then the uses of a table.

- Bundle and measure: ``write_bundle`` (``frontier lut ops``) -> ``runner`` on the
  device (``frontier lut measure``) -> ``DeviceStore.import_table`` (``frontier lut
  import``); on this machine, ``ensure_local_table`` and ``LocalDevice`` do all three.
- Price and predict: ``LatencyModel(table).predict(model, plan)``: each op priced alone,
  then the table's calibration (or a few-shot table's transfer) makes it a whole model.
- Check and learn: ``validate`` (``frontier lut validate``), ``profile_layers``, and
  ``learn`` from the measured front.
"""

from .bundle._bundle import (
    VALIDATION_SEED0,
    SpaceOps,
    space_ops,
    write_bundle,
)
from .bundle._corners import corner_plans
from .bundle._front_bundle import read_front_result, write_front_bundle
from .bundle._sparse import sparse_kernel
from .bundle._whole import whole_model_bytes
from .calibrate._calibration import CALIBRATIONS
from .device._devices import (
    CPU_1T,
    Device,
    DeviceUnavailable,
    LocalDevice,
    Runtime,
    local_device,
    register_local,
    register_runtime,
    resolve_device,
    runtime_of,
)
from .device._table import (
    DeviceMeta,
    DeviceStore,
    DeviceTable,
    Row,
    TableError,
    data_dir,
    read_table,
)
from .measure._join import Learned, learn, learned_entry, plan_entry, priced_layers
from .measure._local import (
    ensure_local_table,
    measure_local,
    measure_models,
    measure_plans,
    quiet_root_logger,
)
from .measure._profile import (
    compare_layers,
    plot_layers,
    profile_layers,
    read_onnx,
)
from .measure._validate import ValidationReport, validate
from .ops._arch import space_templates
from .ops._ops import OpSpec, build_onnx, plan_ops
from .ops._templates import shape_mismatches
from .price._estimate import LatencyEstimate, OpCost
from .price._frame import (
    FRAME,
    Copy,
    FrameError,
    FrameEstimate,
    Link,
    Links,
    StageCost,
    placements,
    price_frame,
    stage_cycle,
)
from .price._model import LatencyModel, error_summary
from .runner import (
    measure_bundle,
    measure_onnx,
    protocol,
    read_manifest,
    time_models,
)

__all__ = [
    "CALIBRATIONS",
    "CPU_1T",
    "FRAME",
    "VALIDATION_SEED0",
    "Copy",
    "Device",
    "DeviceMeta",
    "DeviceStore",
    "DeviceTable",
    "DeviceUnavailable",
    "FrameError",
    "FrameEstimate",
    "LatencyEstimate",
    "LatencyModel",
    "Learned",
    "Link",
    "Links",
    "LocalDevice",
    "OpCost",
    "OpSpec",
    "Row",
    "Runtime",
    "SpaceOps",
    "StageCost",
    "TableError",
    "ValidationReport",
    "build_onnx",
    "compare_layers",
    "corner_plans",
    "data_dir",
    "ensure_local_table",
    "error_summary",
    "learn",
    "learned_entry",
    "local_device",
    "measure_bundle",
    "measure_local",
    "measure_models",
    "measure_onnx",
    "measure_plans",
    "placements",
    "plan_entry",
    "plan_ops",
    "plot_layers",
    "price_frame",
    "priced_layers",
    "profile_layers",
    "protocol",
    "quiet_root_logger",
    "read_front_result",
    "read_manifest",
    "read_onnx",
    "read_table",
    "register_local",
    "register_runtime",
    "resolve_device",
    "runtime_of",
    "shape_mismatches",
    "space_ops",
    "space_templates",
    "sparse_kernel",
    "stage_cycle",
    "time_models",
    "validate",
    "whole_model_bytes",
    "write_bundle",
    "write_front_bundle",
]
