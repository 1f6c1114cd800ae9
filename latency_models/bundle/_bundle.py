"""Op bundles: every operator a space can produce, as small ONNX models in one zip."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from frontier.spaces import (
    CompressionPlan,
    SearchSpace,
)

from ..device._table import MIN_CALIBRATION_MODELS, baseline_key
from ..ops._arch import TEACHER, SpaceOps, arch_key, space_ops
from ..ops._op_models import op_model_bytes, strip_weights
from ..ops._ops import (
    OpSpec,
    identity_model,
    plan_op_nodes,
    plan_ops,
    unbuildable_model,
)
from ..price._transfer import few_shot_ops
from ..runner import BUNDLE_FORMAT, BUNDLE_VERSION
from ._corners import calibration_plans
from ._whole import BUILD_WORKERS, build_whole, timing_calibration, whole_model_bytes

OVERHEAD_REPEATS = 7

#: Calibration models of a bundle: more for small models (at most SMALL_MODEL_MACS
#: multiply-accumulates uncompressed), which export and measure in milliseconds each and
#: whose latency turns on how their few ops interact, learnt from whole models.
CALIBRATION_MODELS = 60
SMALL_MODEL_CALIBRATION_MODELS = 200
SMALL_MODEL_MACS = 10_000_000
#: a calibration budget never cuts a table below this many models (the per-op
#: correction needs many more: on a MobileNetV3 space, 90 models gave random plans 6.6%
#: MAPE and 200 gave 2.8%; benchmarks/REPORT.md, "A first table in minutes")
BUDGET_MIN_MODELS = 30
#: a small model's ``SMALL_MODEL_CALIBRATION_MODELS`` are as many as fit this many
#: seconds of building and timing, and at least ``CALIBRATION_MODELS``, unless a count
#: or a budget is given (``small_model_budget``): the count assumes models that build
#: and time in milliseconds, and ShuffleNetV2 x0.5's 200 took about 6 min here (its
#: first trial 600 s after launch; with 90 s, 86 models and 315 s; benchmarks/REPORT.md)
SMALL_MODEL_CALIBRATION_S = 60.0


#: Calibration models of a few-shot bundle: they choose and scale the transfer.
FEW_SHOT_WHOLE_MODELS = 10

#: Seeds of the plans whose whole models calibrate a table, and of those that validate it.
CALIBRATION_SEED0 = 10_000
VALIDATION_SEED0 = 20_000


def default_calibration(found: SpaceOps) -> int:
    """How many calibration models a bundle of ``found`` holds unless told:
    ``SMALL_MODEL_CALIBRATION_MODELS`` for a model of at most ``SMALL_MODEL_MACS``,
    else ``CALIBRATION_MODELS``."""
    macs = sum(o.macs for o in plan_ops(found.templates[TEACHER], CompressionPlan()))
    return SMALL_MODEL_CALIBRATION_MODELS if macs <= SMALL_MODEL_MACS else CALIBRATION_MODELS


_last_line: dict[str, float] = {}  # label -> when its last progress line was printed


def _progress(label: str, done: int, total: int, start: float) -> None:
    """A line every 10 s and at the end, with the time left."""
    now = time.perf_counter()
    if done < total and now - max(_last_line.get(label, start), start) < 10.0:
        return
    _last_line[label] = now
    rate = done / max(now - start, 1e-9)
    left = f", about {_duration((total - done) / rate)} left" if done < total else ""
    kind = label.removesuffix("s") if label.endswith("ops") else label
    print(f"building {kind} models: {done}/{total} ({rate:.1f}/s{left})", file=sys.stderr)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def write_bundle(
    out: str | Path,
    *,
    model: nn.Module,
    example_inputs: Any,
    space: SearchSpace,
    validation: int = 0,
    calibration: int | None = None,
    calibration_data: Any = None,
    calibration_budget_s: float | None = None,
    calibration_at_least: int = BUDGET_MIN_MODELS,
    name: str = "",
    progress: Callable[[str, int, int, float], None] = _progress,
    ops: SpaceOps | None = None,
    few_shot: int | None = None,
    batch_size: int = 1,
    half: bool = False,
    qdq: bool = False,
) -> dict[str, Any]:
    """Write the op bundle of ``space`` to ``out`` and return its manifest: op models
    at ``batch_size`` (a GPU device priced at batch 32 measures ops of batch 32), and
    with ``half`` every model as ``export_onnx(half=True)`` writes it (16-bit layers in
    FP16, their weighted ops measured at ``fp16``: a GPU's bundle), and with ``qdq`` its
    INT8 models in QDQ format (``export_onnx(qdq=True)``: an OpenVINO device's bundle).

    The bundle holds one model per op instance (FP32, and INT8 where a layer may take 8
    bits), an identity model for the per-run overhead, ``calibration`` whole compressed
    models (seeded plans; ``default_calibration`` when None) that calibrate the table's
    sum against whole-model latency, and ``validation`` more (other seeds) for
    ``frontier lut validate``.

    ``ops`` is ``space_ops(model, example_inputs, space)`` when the caller already has
    it (computing it exports the model).

    With ``few_shot`` the bundle holds that many of the space's ops (``few_shot_ops``:
    every kind, small to large) and ``FEW_SHOT_WHOLE_MODELS`` calibration models unless
    told: a new device measures it in a fraction of the time, and its table is predicted
    through a stored device's full table (``frontier lut import --few-shot-from``).

    With ``calibration_budget_s`` (and ``calibration`` left to its default), the
    calibration models are as many as fit that many seconds of building and timing,
    estimated on three of them (``_within_budget``), and at least
    ``calibration_at_least``: a first table of a slow-to-build space in minutes.

    Every model's large weights are left out (``strip_weights``) and drawn by the runner
    from the seed its manifest entry names.
    """
    out = Path(out)
    if ops is None:
        ops = space_ops(model, example_inputs, space, batch_size=batch_size, half=half)
    found = ops
    half = found.templates[TEACHER].half
    budget_s = calibration_budget_s if calibration is None else None  # a count given is kept
    calibration = _calibration_count(found, calibration, few_shot)
    tag = [f"few-shot-{few_shot}"] if few_shot else []
    tag += ["qdq"] if qdq else []
    digest = hashlib.sha256(
        json.dumps([name, *tag, *(spec.key for spec in found.ops)]).encode()
    ).hexdigest()[:16]
    measured_ops = few_shot_ops(found.ops, few_shot) if few_shot else found.ops
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        writer = _Writer(zf, found, digest, progress, qdq)
        writer.overheads()
        # the uncompressed model: every chunk of the bundle is timed beside it, and each
        # row stated against it (``runner.relative_to``)
        writer.baseline(whole_model_bytes(model, CompressionPlan(), example_inputs, None))
        writer.ops(measured_ops)
        whole = _Whole(model, example_inputs, timing_calibration(calibration_data), half, qdq)
        whole.write(writer, space, calibration, validation, budget_s, calibration_at_least)
        manifest = {
            "format": BUNDLE_FORMAT,
            "version": BUNDLE_VERSION,
            "bundle_id": digest,
            "name": name,
            "batch_size": batch_size,
            **({"half": True} if half else {}),
            **({"int8_qdq": True} if qdq else {}),
            "op_count": len(measured_ops),
            "space_op_count": len(found.ops),
            **({"few_shot": few_shot} if few_shot else {}),
            "models": writer.entries,
        }
        zf.writestr("manifest.json", json.dumps(manifest, indent=1))
    return manifest


def _calibration_count(found: SpaceOps, calibration: int | None, few_shot: int | None) -> int:
    """How many calibration models a bundle holds: ``calibration`` where given, else
    ``FEW_SHOT_WHOLE_MODELS`` for a few-shot bundle or ``default_calibration``."""
    if calibration is None:
        calibration = FEW_SHOT_WHOLE_MODELS if few_shot else default_calibration(found)
    if 0 < calibration < MIN_CALIBRATION_MODELS:
        raise ValueError(
            f"calibration must be 0 or at least {MIN_CALIBRATION_MODELS} whole models, got "
            f"{calibration}: with fewer the table is predicted by the plain sum of its ops"
        )
    return calibration


@dataclass
class _Whole:
    """How a bundle's whole models are built: from ``model``, INT8 ranges calibrated on
    ``ranges_from`` (``timing_calibration``), 16-bit layers in FP16 where ``half``, INT8
    in QDQ format where ``qdq``."""

    model: nn.Module
    example_inputs: Any
    ranges_from: Any
    half: bool
    qdq: bool = False

    def one(self, plan: CompressionPlan) -> bytes:
        return whole_model_bytes(
            self.model, plan, self.example_inputs, self.ranges_from, half=self.half, qdq=self.qdq
        )

    def write(
        self,
        writer: _Writer,
        space: SearchSpace,
        calibration: int,
        validation: int,
        budget_s: float | None,
        at_least: int,
    ) -> None:
        """The calibration models (as many as fit ``budget_s`` where given, at least
        ``at_least``) and the validation models, built in forked processes
        (``build_whole``)."""
        built: dict[int, bytes] = {}  # by seed: models timed for the budget, kept
        if budget_s is not None and calibration > at_least:
            calibration = _within_budget(space, calibration, budget_s, built, self.one, at_least)
        validation_plans = [
            (VALIDATION_SEED0 + i, space.sample(VALIDATION_SEED0 + i)) for i in range(validation)
        ]
        for kind, plans in (
            ("calibration", calibration_plans(space, calibration, CALIBRATION_SEED0)),
            ("validation", validation_plans),
        ):
            todo = [p for s, p in plans if not (kind == "calibration" and s in built)]
            fresh = build_whole(
                self.model,
                todo,
                self.example_inputs,
                self.ranges_from,
                half=self.half,
                qdq=self.qdq,
            )
            kept = built if kind == "calibration" else {}

            def model_of(seed: int, kept: dict[int, bytes] = kept, fresh: Any = fresh) -> bytes:
                data = kept.pop(seed, None)  # built while timing the budget
                return data if data is not None else next(fresh)

            writer.whole(kind, plans, model_of)
            fresh.close()  # its workers end here


class _Writer:
    """Writes a bundle's models into ``zf`` and keeps their manifest entries, in order:
    the overhead model, the baseline, the ops, then whole models by kind. Each model's
    large weights are left to a seed the runner draws them from (``strip_weights``)."""

    def __init__(
        self,
        zf: zipfile.ZipFile,
        found: SpaceOps,
        digest: str,
        progress: Callable[[str, int, int, float], None],
        qdq: bool = False,
    ) -> None:
        self.zf, self.found, self.digest, self.progress = zf, found, digest, progress
        self.qdq = qdq  # INT8 op models in QDQ format (``op_model_bytes``)
        self.entries: list[dict[str, Any]] = []
        self._seeds = iter(range(1, 1 << 30))

    def put(self, file: str, data: bytes) -> dict[str, Any]:
        """Store a model, its weights left to the runner's seed; its manifest fields."""
        stripped, layout = strip_weights(data)
        self.zf.writestr(file, stripped)
        return {"weights": layout, "weights_seed": next(self._seeds)} if layout else {}

    def overheads(self) -> None:
        """The per-run overhead model: subtracted from every op, so it is measured several
        times, spread over the run by the runner's shuffled order (its median is used)."""
        self.zf.writestr("models/overhead.onnx", identity_model().SerializeToString())
        for i in range(OVERHEAD_REPEATS):
            key = "overhead" if i == 0 else f"overhead-{i}"
            self.entries.append(
                {
                    "id": key,
                    "kind": "overhead",
                    "file": "models/overhead.onnx",
                    "key": key,
                    "op_type": "Identity",
                    "precision": "fp32",
                }
            )

    def baseline(self, data: bytes) -> None:
        plan = CompressionPlan()
        self.entries.append(
            {
                "id": "baseline",
                "kind": "baseline",
                "file": "models/baseline.onnx",
                "key": baseline_key(self.digest),
                "plan": plan.to_dict(),
                "op_keys": [o.key for o in plan_ops(self.found.templates[TEACHER], plan)],
                **self.put("models/baseline.onnx", data),
            }
        )

    def ops(self, specs: list[OpSpec]) -> None:
        start = time.perf_counter()
        for i, spec in enumerate(specs):
            file = f"models/op-{i:05d}.onnx"
            try:
                data, error = op_model_bytes(spec, self.qdq), ""
            except Exception as err:  # one op the builder cannot write costs the table it
                data = unbuildable_model().SerializeToString()
                first = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
                error = f"op model not built ({type(err).__name__}: {first})"
            weights = self.put(file, data)
            self.entries.append(
                {
                    "id": f"op-{i:05d}",
                    "kind": "op",
                    "file": file,
                    "key": spec.key,
                    "op_type": spec.kind,
                    "precision": spec.precision,
                    "spec": spec.to_dict(),
                    **weights,
                    **({"build_error": error} if error else {}),
                }
            )
            self.progress("ops", i + 1, len(specs), start)

    def whole(
        self,
        kind: str,
        plans: list[tuple[int, CompressionPlan]],
        model_of: Callable[[int], bytes],
    ) -> None:
        """Whole models of ``kind``, one per (seed, plan); ``model_of(seed)`` builds one."""
        start = time.perf_counter()
        for i, (seed, plan) in enumerate(plans):
            file = f"models/{kind}-{i:04d}.onnx"
            weights = self.put(file, model_of(seed))
            templates = self.found.templates[arch_key(plan)]
            self.entries.append(
                {
                    "id": f"{kind}-{i:04d}",
                    "kind": kind,
                    "file": file,
                    "key": f"{kind}-{self.digest}-{seed}",
                    "seed": seed,
                    "plan": plan.to_dict(),
                    "op_keys": [o.key for o in plan_ops(templates, plan)],
                    "op_nodes": plan_op_nodes(templates, plan),
                    **weights,
                }
            )
            self.progress(kind, i + 1, len(plans), start)


def small_model_budget(found: SpaceOps) -> tuple[float | None, int]:
    """The calibration budget (s) and the fewest models it may keep, for a table whose
    count and budget were left to their defaults: ``SMALL_MODEL_CALIBRATION_S`` and
    ``CALIBRATION_MODELS`` for a small model (``default_calibration``), else none."""
    if default_calibration(found) == SMALL_MODEL_CALIBRATION_MODELS:
        return SMALL_MODEL_CALIBRATION_S, CALIBRATION_MODELS
    return None, BUDGET_MIN_MODELS


def _within_budget(
    space: SearchSpace,
    count: int,
    budget_s: float,
    built: dict[int, bytes],
    build: Callable[[CompressionPlan], bytes],
    at_least: int,
) -> int:
    """How many of ``count`` calibration models fit ``budget_s`` seconds, building and
    timing (at least ``at_least``), estimated on three of them: the first of the list (a
    corner, first in every list), one from its middle and its last (drawn plans; the
    corners of an unpruned FP32 model build faster than the rest). They are built and
    kept in ``built`` by seed, and their measuring estimated
    (``runner.calibration_measure_s``; each chunk of ``CHUNK_MODELS`` also times the
    uncompressed model)."""
    from ..runner import CHUNK_MODELS, calibration_measure_s

    plans = calibration_plans(space, count, CALIBRATION_SEED0)
    sampled = [plans[0], plans[len(plans) // 2], plans[-1]]
    start = time.perf_counter()
    for seed, plan in sampled:
        built[seed] = build(plan)
    workers = min(os.cpu_count() or 1, BUILD_WORKERS)  # as ``build_whole`` builds the rest
    build_s = (time.perf_counter() - start) / len(sampled) / workers
    timing_s = sum(calibration_measure_s(built[seed]) for seed, _ in sampled) / len(sampled)
    per_model_s = build_s + timing_s * (1 + 1 / CHUNK_MODELS)
    fits = max(at_least, int(budget_s / per_model_s))
    if fits < count:
        print(
            f"calibration: {fits} of {count} whole models (each {build_s:.1f} s to build "
            f"and {timing_s:.1f} s to time: a {budget_s:.0f} s budget, "
            "local_table.calibration_budget_s); each search's measured front joins them "
            "(tracking.learn_front)",
            file=sys.stderr,
        )
    return min(fits, count)
