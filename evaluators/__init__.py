"""How good a compressed model is, one Evaluator per objective.

Objective names carry units and devices: ``accuracy``, ``size_bytes``, ``macs``,
``bops``, ``latency_ms@pi4``, ``energy_mj@pi4``, ``co2e_g``. ``build_evaluator(name)``
returns the evaluator; calling it on a ``Candidate`` and an ``EvalSetup`` returns a
``Measurement`` (value, unit, fidelity, wall time).
"""

from ._accuracy import (
    FIDELITIES,
    AccuracyEvaluator,
    BatchMean,
    distill,
    kd_loss,
    measure_accuracy,
    measure_onnx_accuracy,
    proxy_signals,
    task_agreement,
    task_loss,
    task_score,
)
from ._base import (
    MAXIMIZE,
    MINIMIZE,
    Candidate,
    EvalSetup,
    EvaluationError,
    Evaluator,
    Measurement,
    MetricKey,
    build_evaluator,
    evaluator_names,
    register_evaluator,
)
from ._cost import BopsEvaluator, MacsEvaluator, SizeEvaluator
from ._hardware import (
    SAVINGS_PREFIX,
    CarbonEvaluator,
    CarbonScenario,
    EnergyEvaluator,
    LatencyEvaluator,
    ServingSavings,
    serving_savings,
)

__all__ = [
    "FIDELITIES",
    "MAXIMIZE",
    "MINIMIZE",
    "SAVINGS_PREFIX",
    "AccuracyEvaluator",
    "BatchMean",
    "BopsEvaluator",
    "Candidate",
    "CarbonEvaluator",
    "CarbonScenario",
    "EnergyEvaluator",
    "EvalSetup",
    "EvaluationError",
    "Evaluator",
    "LatencyEvaluator",
    "MacsEvaluator",
    "Measurement",
    "MetricKey",
    "ServingSavings",
    "SizeEvaluator",
    "build_evaluator",
    "distill",
    "evaluator_names",
    "kd_loss",
    "measure_accuracy",
    "measure_onnx_accuracy",
    "proxy_signals",
    "register_evaluator",
    "serving_savings",
    "task_agreement",
    "task_loss",
    "task_score",
]
