"""How well this machine's latency measurements repeat: the ceiling of any predictor.

Seeded whole compressed digits-CNN models are measured twice (in two shuffled passes)
by each of three methods, and the second pass is compared with the first: share within
+/-10%, Kendall tau and MAPE. Methods: one ONNX Runtime session timed alone for up to
1.5 s (the device runner with --no-reference), the minimum over 5 sessions of 0.1 s
each, and what the device runner does by default: each run followed by a run of the
uncompressed model (the bundle's whole-model reference), the median of their ratios
times the reference's level (drift that slows both cancels).

No prediction can agree with a measurement better than the measurement agrees with
itself; run this beside bench_latency.py to read its figures.
Run: python benchmarks/bench_repeatability.py [--models 24]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau

from frontier.experiments import DigitsTask
from frontier.latency_models import write_bundle
from frontier.latency_models._validate import local_run, measure_local, quiet_root_logger
from frontier.latency_models.runner import WHOLE_MODEL_CAP_FACTOR, reference_level
from frontier.spaces import SpaceOptions, discover


def one_session(blob: bytes, cap_s: float = 0.5 * WHOLE_MODEL_CAP_FACTOR) -> float:
    return measure_local(blob, time_cap_s=cap_s)


def min_of_sessions(blob: bytes) -> float:
    return min(one_session(blob, 0.1) for _ in range(5))


def beside_reference(blob: bytes, reference: tuple[bytes, float]) -> float:
    return measure_local(blob, time_cap_s=0.5 * WHOLE_MODEL_CAP_FACTOR, reference=reference)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=24)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    task = DigitsTask(model="cnn")
    model, x = task.baseline(), task.example_inputs()
    options = SpaceOptions(
        prune_ratios=(0.0, 0.25, 0.5, 0.75), weight_bits=(8, 32), act_bits=(8, 32), round_to=4
    )
    space = discover(model, x, options)
    with tempfile.TemporaryDirectory() as tmp, quiet_root_logger():
        bundle = Path(tmp) / "models.zip"
        manifest = write_bundle(
            bundle,
            model=model,
            example_inputs=x,
            space=space,
            calibration=0,
            validation=args.models,
            calibration_data=task.calibration_batches(),
            progress=lambda *_: None,
        )
        with zipfile.ZipFile(bundle) as zf:
            blobs = {
                e["id"]: zf.read(e["file"]) for e in manifest["models"] if e["kind"] == "validation"
            }
            # the uncompressed model, the bundle's reference for whole models
            teacher = zf.read(
                next(e["file"] for e in manifest["models"] if e["id"] == "reference-model")
            )
    reference = (teacher, reference_level(local_run(teacher), local_run(teacher)))
    methods: dict[str, Callable[[bytes], float]] = {
        "one session, alone": one_session,
        "minimum over 5 sessions": min_of_sessions,
        "beside the reference (runner)": lambda b: beside_reference(b, reference),
    }
    passes: dict[str, list[dict[str, float]]] = {name: [{}, {}] for name in methods}
    for rep in range(2):
        keys = list(blobs)
        random.Random(rep).shuffle(keys)
        for key in keys:
            for name, measure in methods.items():
                passes[name][rep][key] = measure(blobs[key])
    print(f"{len(blobs)} digits-CNN models, each measured in two shuffled passes:")
    for name in methods:
        first = np.array([passes[name][0][k] for k in blobs])
        second = np.array([passes[name][1][k] for k in blobs])
        err = second / first - 1
        print(
            f"  {name:<30} within +/-10%: {np.mean(np.abs(err) <= 0.1):5.0%}  "
            f"Kendall tau {kendalltau(first, second)[0]:.3f}  MAPE {np.mean(np.abs(err)):.1%}"
        )


if __name__ == "__main__":
    main()
