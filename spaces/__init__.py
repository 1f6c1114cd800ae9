"""What can be searched, and how a choice becomes a model.

``discover(model, example_inputs)`` finds a model's search space; a ``CompressionPlan``
(pure data, JSON round-trip) is one choice from it; ``apply_plan`` turns a plan into a
compressed model; ``model_cost`` prices it; ``export_onnx`` writes it for deployment.
"""

from ._apply import apply_plan
from ._cost import Cost, LayerCost, count_macs, model_cost
from ._embedding_quant import EmbeddingQuant, QuantEmbedding
from ._forward import (
    CPU,
    Accelerator,
    SpaceError,
    check_forward,
    input_shapes,
    model_device,
    recalibrate_bn,
    to_device,
)
from ._param_shapes import ParamShapes
from ._plan import (
    IMPORTANCE_CRITERIA,
    PLAN_FORMAT_VERSION,
    SUPPORTED_BITS,
    SWAP_ACTIVATIONS,
    ActivationSwap,
    CompressionPlan,
    DistillSpec,
    PlanError,
    StudentSpec,
)
from ._quant import calibrate, quant_bits
from ._registry import Registry
from ._shapes import ShapeCounter
from ._space import (
    Dimension,
    LayerGroup,
    QuantLayer,
    SearchSpace,
    SkippedGroup,
    SpaceOptions,
    discover,
)
from ._students import (
    CNN,
    CNN_CHANNELS,
    MLP,
    MLP_HIDDEN,
    build_student,
    register_student,
    student_families,
)
from ._surgery import ApplyError, kept_channels, swap_activations
from ._techniques import (
    DROPPED,
    PLAN_KINDS,
    ApplyInputs,
    Chooser,
    Distill,
    Prune,
    Quantize,
    Sparsity,
    SwapActivations,
    Technique,
    build_technique,
    plan_kind,
    plan_techniques,
    register_technique,
    technique_kind,
    technique_names,
)
from ._transformer import (
    MINILM,
    TextTransformer,
    TransformerShape,
    keep_ffn,
    keep_heads,
    shape_of,
    student_shape,
)
from ._transformer_prune import LayerDrop, TransformerPrune, encoder_layers
from ._uniform import uniform_params
from .onnx._export import ExportResult, export_onnx, half_layers, int8_layers, to_half
from .onnx._onnx_files import data_file, load_onnx, model_bytes, save_onnx
from .onnx._onnx_int8 import int8_op_types, onnx_module_name, quantize_onnx_int8

__all__ = [
    "CNN",
    "CNN_CHANNELS",
    "CPU",
    "DROPPED",
    "IMPORTANCE_CRITERIA",
    "MINILM",
    "MLP",
    "MLP_HIDDEN",
    "PLAN_FORMAT_VERSION",
    "PLAN_KINDS",
    "SUPPORTED_BITS",
    "SWAP_ACTIVATIONS",
    "Accelerator",
    "ActivationSwap",
    "ApplyError",
    "ApplyInputs",
    "Chooser",
    "CompressionPlan",
    "Cost",
    "Dimension",
    "Distill",
    "DistillOptions",
    "DistillSpec",
    "EmbeddingQuant",
    "ExportResult",
    "LayerCost",
    "LayerDrop",
    "LayerGroup",
    "ParamShapes",
    "PlanError",
    "Prune",
    "QuantEmbedding",
    "QuantLayer",
    "Quantize",
    "Registry",
    "SearchSpace",
    "ShapeCounter",
    "SkippedGroup",
    "SpaceError",
    "SpaceOptions",
    "Sparsity",
    "StudentSpec",
    "SwapActivations",
    "SwapOptions",
    "Technique",
    "TextTransformer",
    "TransformerPrune",
    "TransformerShape",
    "apply_plan",
    "build_student",
    "build_technique",
    "calibrate",
    "check_forward",
    "count_macs",
    "data_file",
    "discover",
    "encoder_layers",
    "export_onnx",
    "half_layers",
    "input_shapes",
    "int8_layers",
    "int8_op_types",
    "keep_ffn",
    "keep_heads",
    "kept_channels",
    "load_onnx",
    "model_bytes",
    "model_cost",
    "model_device",
    "onnx_module_name",
    "plan_kind",
    "plan_techniques",
    "quant_bits",
    "quantize_onnx_int8",
    "recalibrate_bn",
    "register_student",
    "register_technique",
    "save_onnx",
    "shape_of",
    "student_families",
    "student_shape",
    "swap_activations",
    "technique_kind",
    "technique_names",
    "to_device",
    "to_half",
    "uniform_params",
]

#: the names the distillation and activation-swap options had before they were the
#: techniques themselves (``space.distill``, ``space.activation_swap`` still load)
DistillOptions = Distill
SwapOptions = SwapActivations
