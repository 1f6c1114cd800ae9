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

import queue
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


def measurable(config: Any, placement: Mapping[str, str]) -> str:
    """Why a placement cannot be run here ("" when it can); ``config``'s devices."""
    for stage, device in placement.items():
        here = config.typed.device(device).local
        if here is None:
            return f"stage {stage} is placed on {device}, which is not a device of this machine"
        why = here.unavailable()
        if why:
            return f"stage {stage} is placed on {device}: {why}"
    return ""


class FrameRunner:
    """Runs one frame through the stages and returns its time in ms, as a deployment runs
    them: one worker thread per device, started once and kept, each running its stages
    in ``order`` once every stage they read is done (runtimes release the GIL while they
    run, so devices overlap). ``stage_ms`` collects each stage's own time while
    ``record`` is set. ``close()`` stops the workers."""

    def __init__(
        self,
        runs: Mapping[str, Callable[[], Any]],
        placement: Mapping[str, str],
        reads: Mapping[str, Sequence[str]],
        order: Sequence[str],
    ) -> None:
        self.runs, self.reads = runs, reads
        self.devices = list(dict.fromkeys(placement[s] for s in order))
        self.queues = {d: [s for s in order if placement[s] == d] for d in self.devices}
        self.record = False
        self.stage_ms: dict[str, list[float]] = {s: [] for s in order}
        self._inbox: dict[str, queue.SimpleQueue[Any]] = {}
        self._threads = []
        for d in self.devices[1:]:
            self._inbox[d] = queue.SimpleQueue()
            t = threading.Thread(target=self._worker, args=(d,), daemon=True)
            t.start()
            self._threads.append(t)

    def _work(self, device: str, done: dict[str, threading.Event], errors: list[Any]) -> None:
        try:
            for s in self.queues[device]:
                for r in self.reads[s]:
                    if r in done:
                        done[r].wait()
                start = time.perf_counter()
                self.runs[s]()
                if self.record:
                    self.stage_ms[s].append((time.perf_counter() - start) * 1e3)
                done[s].set()
        except BaseException as err:  # surfaced in the caller
            errors.append(err)
            for e in done.values():
                e.set()

    def _worker(self, device: str) -> None:
        while (job := self._inbox[device].get()) is not None:
            done, errors, finished = job
            self._work(device, done, errors)
            finished.release()

    def __call__(self) -> float:
        done = {s: threading.Event() for s in self.stage_ms}
        errors: list[BaseException] = []
        finished = threading.Semaphore(0)
        start = time.perf_counter()
        for inbox in self._inbox.values():
            inbox.put((done, errors, finished))
        self._work(self.devices[0], done, errors)
        for _ in self._inbox:
            finished.acquire()
        elapsed = (time.perf_counter() - start) * 1e3
        if errors:
            raise errors[0]
        return elapsed

    def close(self) -> None:
        for inbox in self._inbox.values():
            inbox.put(None)
        for t in self._threads:
            t.join()


def frame_runner(
    runs: Mapping[str, Callable[[], Any]],
    placement: Mapping[str, str],
    reads: Mapping[str, Sequence[str]],
    order: Sequence[str],
) -> FrameRunner:
    """A ``FrameRunner`` of ``runs`` in ``placement``; close it when done."""
    return FrameRunner(runs, placement, reads, order)


def time_frames(frames: Sequence[Callable[[], float]]) -> list[float]:
    """Each pipeline's frame time (ms) by the timing protocol every latency Frontier
    reports goes through (``runner.time_models``: warm-up, rounds visiting each pipeline
    in turn, the median of its round medians); a frame times itself."""
    from frontier.latency_models import time_models

    return [st["median_ms"] for st in time_models(frames, timer=lambda frame: frame())]


def open_stage(search: Any, stage: str, plan: Mapping[str, Any], device: str, rng: Any) -> Any:
    """A call that runs ``stage`` compressed by ``plan`` once, exported as ``device``
    runs it (its precision and INT8 form) and opened in that device's runtime here."""
    from frontier.latency_models import quiet_root_logger, whole_model_bytes
    from frontier.spaces import CompressionPlan

    runner = search.runners[stage]
    here = search.config.typed.device(device).local
    assert here is not None, device  # measurable() said so
    with quiet_root_logger():  # ONNX Runtime's quantizer advises on every model
        data = whole_model_bytes(
            runner.teacher,
            CompressionPlan.from_dict(dict(plan), space=runner.space),
            runner.example,
            runner.task.calibration_batches(),
            half=here.half,
            qdq=here.int8_qdq,
        )
    run, _ = here.backend().open(data, {}, batch_size=here.batch_size, rng=rng)
    return run


#: the in-frame rounds: each stage alone, then whole frames, ``CONTEXT_ROUNDS`` times,
#: each block at least ``CONTEXT_MIN_RUNS`` runs and ``CONTEXT_BLOCK_S`` long
CONTEXT_ROUNDS, CONTEXT_MIN_RUNS, CONTEXT_BLOCK_S = 5, 10, 0.2


def _block(run: Callable[[], Any]) -> list[float]:
    """``run``'s time (ms) per call, called at least ``CONTEXT_MIN_RUNS`` times and for
    ``CONTEXT_BLOCK_S``."""
    out: list[float] = []
    end = time.perf_counter() + CONTEXT_BLOCK_S
    while len(out) < CONTEXT_MIN_RUNS or time.perf_counter() < end:
        start = time.perf_counter()
        run()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def stage_context_ms(
    search: Any, plans: Mapping[str, Mapping[str, Any]], choices: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, float]]:
    """What running inside a frame costs each stage over running alone, in ms, on each
    device of this machine it may be placed on: the stages that may share that device run
    ``plans`` one after another, frame after frame, and each stage's median time there is
    set against its median run alone, in the same rounds (never below 0). A stage placed
    after others finds its weights and the runtime's state evicted by them; its table,
    timed in a loop of itself, cannot see that. Devices not of this machine get 0."""
    import statistics

    import numpy as np

    order = list(plans)
    out: dict[str, dict[str, float]] = {s: {} for s in order}
    rng = np.random.default_rng(0)
    for device in dict.fromkeys(d for s in order for d in choices[s]):
        on = [s for s in order if device in choices[s]]
        if len(on) < 2 or measurable(search.config, {s: device for s in on}):
            for s in on:
                out[s][device] = 0.0
            continue
        logger.info("pipeline: timing %s inside a frame on %s and alone ...", ", ".join(on), device)
        runs = {s: open_stage(search, s, plans[s], device, rng) for s in on}
        frame = FrameRunner(runs, {s: device for s in on}, {s: [] for s in on}, on)
        alone: dict[str, list[float]] = {s: [] for s in on}
        try:
            for _ in range(CONTEXT_MIN_RUNS):
                frame()
            for _ in range(CONTEXT_ROUNDS):
                for s in on:
                    alone[s] += _block(runs[s])
                frame.record = True  # the frame records each stage's own time
                _block(frame)
                frame.record = False
        finally:
            frame.close()
        for s in on:
            inside, by_itself = statistics.median(frame.stage_ms[s]), statistics.median(alone[s])
            out[s][device] = max(0.0, inside - by_itself)
            logger.info(
                "pipeline: %s on %s: %.4g ms inside a frame, %.4g ms alone",
                s, device, inside, by_itself,
            )  # fmt: skip
    return out


def measure_trials(search: Any, trials: Sequence[Any]) -> list[FrameMeasurement]:
    """The uncompressed pipeline (first) and each of ``trials`` (``PipelineTrial``) run
    here, frame by frame; those that cannot run here are left out, with a line."""
    import numpy as np

    from ..config._pipeline import FRAME

    pipeline = search.pipeline
    order = [s.name for s in pipeline.stages]
    reads = {s.name: [r for r in s.reads if r != FRAME] for s in pipeline.stages}
    baseline = search.prepare()
    members = [baseline, *trials]
    runnable = []
    for t in members:
        why = measurable(search.config, t.placement)
        if why:
            logger.info("pipeline: trial %d not measured here: %s", t.number, why)
        else:
            runnable.append(t)
    if not runnable or runnable[0] is not baseline:
        return []
    rng = np.random.default_rng(0)
    frames: list[FrameRunner] = []
    try:
        for t in runnable:
            runs = {s: open_stage(search, s, t.plans[s], t.placement[s], rng) for s in order}
            frames.append(frame_runner(runs, t.placement, reads, order))
        measured = time_frames(frames)
    finally:
        for f in frames:
            f.close()
    base_ms = measured[0]
    base_pred = baseline.values["latency_ms@frame"]
    out = []
    for t, ms in zip(runnable, measured, strict=True):
        pred = t.values["latency_ms@frame"]
        out.append(FrameMeasurement(t.number, ms, pred, base_ms / ms, base_pred / pred))
    return out
