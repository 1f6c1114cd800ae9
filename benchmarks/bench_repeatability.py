"""How well this machine's latency measurements repeat: the ceiling of any predictor.

Seeded whole compressed digits-CNN models are measured twice (in two shuffled passes)
by each of four methods, and the second pass is compared with the first: share within
+/-10%, Kendall tau and MAPE. Methods, each spending about 1.5 s per model:
- one ONNX Runtime session timed alone for up to 1.5 s;
- the minimum over 5 sessions of 0.1 s each;
- one session of 1.5 s beside a reference: each run followed by a run of the
  uncompressed model (the bundle's whole-model reference), the median of their ratios
  times the reference's level (drift that slows both cancels);
- what the device runner does: three fresh sessions of 0.5 s beside the reference,
  spread over the pass in a seeded random order, and the median over them (one
  session's memory placement moves a model's time, which runs inside it cannot
  average out).

No prediction can agree with a measurement better than the measurement agrees with
itself; run this beside bench_latency.py to read its figures.
Run: python benchmarks/bench_repeatability.py [--models 24]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from bench_layout import bundle_models
from scipy.stats import kendalltau

from frontier.latency_models._validate import (
    local_run,
    measure_local,
    measure_models,
    quiet_root_logger,
)
from frontier.latency_models.runner import WHOLE_MODEL_SESSIONS, reference_level

#: seconds of timing per model that every method spends (the runner's sessions x cap)
BUDGET_S = 0.5 * WHOLE_MODEL_SESSIONS


def one_session(blobs: Sequence[bytes]) -> list[float]:
    return [measure_local(b, time_cap_s=BUDGET_S) for b in blobs]


def min_of_sessions(blobs: Sequence[bytes]) -> list[float]:
    return [min(measure_local(b, time_cap_s=BUDGET_S / 5) for _ in range(5)) for b in blobs]


def beside_reference(blobs: Sequence[bytes], reference: tuple[bytes, float]) -> list[float]:
    return [measure_local(b, time_cap_s=BUDGET_S, reference=reference) for b in blobs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=24)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp, quiet_root_logger():
        models, teacher = bundle_models("digits", args.models, Path(tmp))
    blobs = dict(enumerate(models))
    reference = (teacher, reference_level(local_run(teacher), local_run(teacher)))
    methods: dict[str, Callable[[Sequence[bytes]], list[float]]] = {
        "one session, alone": one_session,
        "minimum over 5 sessions": min_of_sessions,
        "one session beside the reference": lambda b: beside_reference(b, reference),
        f"{WHOLE_MODEL_SESSIONS} sessions beside it (runner)": lambda b: measure_models(
            b, time_cap_s=0.5, reference=reference
        ),
    }
    passes: dict[str, list[dict[str, float]]] = {name: [{}, {}] for name in methods}
    for rep in range(2):
        keys = list(blobs)
        random.Random(rep).shuffle(keys)
        for name, measure in methods.items():
            passes[name][rep] = dict(zip(keys, measure([blobs[k] for k in keys]), strict=True))
    print(f"{len(blobs)} digits-CNN models, each measured in two shuffled passes:")
    for name in methods:
        first = np.array([passes[name][0][k] for k in blobs])
        second = np.array([passes[name][1][k] for k in blobs])
        err = second / first - 1
        print(
            f"  {name:<34} within +/-10%: {np.mean(np.abs(err) <= 0.1):5.0%}  "
            f"Kendall tau {kendalltau(first, second)[0]:.3f}  MAPE {np.mean(np.abs(err)):.1%}"
        )


if __name__ == "__main__":
    main()
