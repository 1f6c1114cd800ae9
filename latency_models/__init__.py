"""What a model costs on a device: op bundles, the device runner, device tables, the
latency model that predicts from them, and validation against whole models.

Flow: ``write_bundle`` (``frontier lut ops``) -> ``runner`` on the device
(``frontier lut measure``) -> ``DeviceStore.import_table`` (``frontier lut import``) ->
``LatencyModel(table).predict(model, plan)`` -> ``validate`` (``frontier lut validate``).
"""

from ._bundle import SpaceOps, space_ops, write_bundle
from ._model import FallbackFit, LatencyEstimate, LatencyModel, OpCost
from ._ops import OpSpec, build_onnx, enumerate_ops, plan_ops
from ._table import DeviceMeta, DeviceStore, DeviceTable, Row, TableError, data_dir, read_table
from ._validate import (
    LOCAL_CPU,
    ValidationReport,
    cpu_power_w,
    ensure_local_table,
    local_threads,
    measure_local,
    measure_models,
    measure_plans,
    quiet_root_logger,
    validate,
)
from .runner import BUNDLE_VERSION, measure_bundle, read_manifest

__all__ = [
    "BUNDLE_VERSION",
    "LOCAL_CPU",
    "DeviceMeta",
    "DeviceStore",
    "DeviceTable",
    "FallbackFit",
    "LatencyEstimate",
    "LatencyModel",
    "OpCost",
    "OpSpec",
    "Row",
    "SpaceOps",
    "TableError",
    "ValidationReport",
    "build_onnx",
    "cpu_power_w",
    "data_dir",
    "ensure_local_table",
    "enumerate_ops",
    "local_threads",
    "measure_bundle",
    "measure_local",
    "measure_models",
    "measure_plans",
    "plan_ops",
    "quiet_root_logger",
    "read_manifest",
    "read_table",
    "space_ops",
    "validate",
    "write_bundle",
]
