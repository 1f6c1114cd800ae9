"""A pipeline's front measured as it runs: each member's stages exported, opened in the
runtime of the device each is placed on, and whole frames run here as a deployment runs
them (one worker thread per device, a stage starting once what it reads is done), beside
the uncompressed pipeline in its own placement; each frame's time is stated beside the
prediction, and so is its speed-up over the uncompressed pipeline, which a change of the
machine's speed does not move.

Only devices of this machine are measured (``local-cpu*``, ``local-openvino*``); a
pipeline with a stage on a derived or stored device is priced, not measured. Inputs are
seeded random tensors of each stage's own input shape: latency depends on shapes and
types, not values.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._log import logger


@dataclass(frozen=True)
class FrameMeasurement:
    """A pipeline's frames measured here.

    Attributes:
        number: the trial (-1: the uncompressed pipeline).
        measured_ms: the median of the rounds' median frame times.
        predicted_ms: the tables' ``latency_ms@frame``.
        speedup_measured, speedup_predicted: the uncompressed pipeline's frame time over
            this one's, measured beside it and by the tables.
    """

    number: int
    measured_ms: float
    predicted_ms: float
    speedup_measured: float = 1.0
    speedup_predicted: float = 1.0

    @property
    def speedup_error(self) -> float:
        """|predicted speed-up / measured speed-up - 1|."""
        return abs(self.speedup_predicted / self.speedup_measured - 1)


def measurable(placement: Mapping[str, str]) -> str:
    """Why a placement cannot be run here ("" when it can)."""
    from frontier.latency_models import local_device

    for stage, device in placement.items():
        here = local_device(device)
        if here is None:
            return f"stage {stage} is placed on {device}, which is not a device of this machine"
        why = here.unavailable()
        if why:
            return f"stage {stage} is placed on {device}: {why}"
    return ""


def frame_runner(
    runs: Mapping[str, Callable[[], Any]],
    placement: Mapping[str, str],
    reads: Mapping[str, Sequence[str]],
    order: Sequence[str],
) -> Callable[[], float]:
    """A call that runs one frame through the stages and returns its time in ms: one
    thread per device runs its stages in ``order``, each once every stage it reads is
    done (runtimes release the GIL while they run, so devices overlap)."""
    devices = list(dict.fromkeys(placement[s] for s in order))
    queues = {d: [s for s in order if placement[s] == d] for d in devices}

    def frame() -> float:
        done = {s: threading.Event() for s in order}
        errors: list[BaseException] = []

        def work(device: str) -> None:
            try:
                for s in queues[device]:
                    for r in reads[s]:
                        if r in done:
                            done[r].wait()
                    runs[s]()
                    done[s].set()
            except BaseException as err:  # surfaced in the caller
                errors.append(err)
                for e in done.values():
                    e.set()

        threads = [threading.Thread(target=work, args=(d,)) for d in devices[1:]]
        start = time.perf_counter()
        for t in threads:
            t.start()
        work(devices[0])
        for t in threads:
            t.join()
        elapsed = (time.perf_counter() - start) * 1e3
        if errors:
            raise errors[0]
        return elapsed

    return frame


def time_frames(frames: Sequence[Callable[[], float]]) -> list[float]:
    """Each pipeline's frame time (ms) by the timing protocol every latency Frontier
    reports goes through (``runner.time_models``: warm-up, rounds visiting each pipeline
    in turn, the median of its round medians); a frame times itself."""
    from frontier.latency_models import time_models

    return [st["median_ms"] for st in time_models(frames, timer=lambda frame: frame())]


def measure_trials(search: Any, trials: Sequence[Any]) -> list[FrameMeasurement]:
    """The uncompressed pipeline (first) and each of ``trials`` (``PipelineTrial``) run
    here, frame by frame; those that cannot run here are left out, with a line."""
    import numpy as np

    from frontier.latency_models import local_device, quiet_root_logger, whole_model_bytes
    from frontier.spaces import CompressionPlan

    from ..config._pipeline import FRAME

    pipeline = search.pipeline
    order = [s.name for s in pipeline.stages]
    reads = {s.name: [r for r in s.reads if r != FRAME] for s in pipeline.stages}
    baseline = search.prepare()
    members = [baseline, *trials]
    runnable = []
    for t in members:
        why = measurable(t.placement)
        if why:
            logger.info("pipeline: trial %d not measured here: %s", t.number, why)
        else:
            runnable.append(t)
    if not runnable or runnable[0] is not baseline:
        return []
    rng = np.random.default_rng(0)
    frames = []
    for t in runnable:
        runs = {}
        for s in order:
            runner = search.runners[s]
            device = local_device(t.placement[s])
            assert device is not None  # measurable() said so
            plan = CompressionPlan.from_dict(t.plans[s], space=runner.space)
            with quiet_root_logger():  # ONNX Runtime's quantizer advises on every model
                data = whole_model_bytes(
                    runner.teacher,
                    plan,
                    runner.example,
                    runner.task.calibration_batches(),
                    half=device.half,
                    qdq=device.int8_qdq,
                )
            run, _ = device.backend().open(data, {}, batch_size=device.batch_size, rng=rng)
            runs[s] = run
        frames.append(frame_runner(runs, t.placement, reads, order))
    measured = time_frames(frames)
    base_ms = measured[0]
    base_pred = baseline.values["latency_ms@frame"]
    out = []
    for t, ms in zip(runnable, measured, strict=True):
        pred = t.values["latency_ms@frame"]
        out.append(FrameMeasurement(t.number, ms, pred, base_ms / ms, base_pred / pred))
    return out
