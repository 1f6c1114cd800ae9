"""What a model costs on a device: op bundles, the device runner, device tables, the
latency model that predicts from them, and validation against whole models.

Flow: ``write_bundle`` (``frontier lut ops``) -> ``runner`` on the device
(``frontier lut measure``) -> ``DeviceStore.import_table`` (``frontier lut import``) ->
``LatencyModel(table).predict(model, plan)`` -> ``validate`` (``frontier lut validate``).
"""

from ._arch import space_templates
from ._bundle import (
    VALIDATION_SEED0,
    SpaceOps,
    space_ops,
    strip_weights,
    whole_model_bytes,
    write_bundle,
)
from ._corners import calibration_plans, corner_plans, int8_heavy_plan
from ._devices import (
    LOCAL_CPU,
    DeviceUnavailable,
    LocalDevice,
    local_device,
    register_local,
)
from ._estimate import LatencyEstimate, OpCost
from ._front_bundle import read_front_result, write_front_bundle
from ._join import Learned, learn, learned_entry, plan_entry, priced_layers
from ._local import (
    cpu_power_w,
    ensure_local_table,
    measure_local,
    measure_models,
    measure_plans,
    quiet_root_logger,
    table_device,
)
from ._model import LatencyModel, error_summary
from ._ops import OpSpec, build_onnx, enumerate_ops, plan_ops
from ._pricer import FallbackFit
from ._profile import (
    LayerTime,
    ModelProfile,
    compare_layers,
    layer_prices,
    plot_layers,
    profile_layers,
)
from ._sparse import sparse_kernel
from ._table import DeviceMeta, DeviceStore, DeviceTable, Row, TableError, data_dir, read_table
from ._validate import ValidationReport, validate
from .runner import (
    BUNDLE_VERSION,
    PROTOCOL_VERSION,
    measure_bundle,
    measure_onnx,
    protocol,
    read_manifest,
    time_models,
)

__all__ = [
    "BUNDLE_VERSION",
    "LOCAL_CPU",
    "PROTOCOL_VERSION",
    "VALIDATION_SEED0",
    "DeviceMeta",
    "DeviceStore",
    "DeviceTable",
    "DeviceUnavailable",
    "FallbackFit",
    "LatencyEstimate",
    "LatencyModel",
    "LayerTime",
    "Learned",
    "LocalDevice",
    "ModelProfile",
    "OpCost",
    "OpSpec",
    "Row",
    "SpaceOps",
    "TableError",
    "ValidationReport",
    "build_onnx",
    "calibration_plans",
    "compare_layers",
    "corner_plans",
    "cpu_power_w",
    "data_dir",
    "ensure_local_table",
    "enumerate_ops",
    "error_summary",
    "int8_heavy_plan",
    "layer_prices",
    "learn",
    "learned_entry",
    "local_device",
    "measure_bundle",
    "measure_local",
    "measure_models",
    "measure_onnx",
    "measure_plans",
    "plan_entry",
    "plan_ops",
    "plot_layers",
    "priced_layers",
    "profile_layers",
    "protocol",
    "quiet_root_logger",
    "read_front_result",
    "read_manifest",
    "read_table",
    "register_local",
    "space_ops",
    "space_templates",
    "sparse_kernel",
    "strip_weights",
    "table_device",
    "time_models",
    "validate",
    "whole_model_bytes",
    "write_bundle",
    "write_front_bundle",
]
