"""What a search does before its loop: checks that fail fast, the evaluation (task,
space, evaluators, device tables), the study with its first trials, and the baseline
that relative constraints resolve against."""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from frontier.evaluators import MetricKey

from .._log import logger
from ..config._anchors import anchor_params
from ..config._config import Config, ConfigError, load_config
from ..config._constraints import Constraint, number_text
from ..study._storage import (
    BASELINE_ATTR,
    SearchError,
    StudyStore,
    check_storage,
    default_storage,
    search_folders,
    writable,
)
from ..trials._backends import check_ray_address, ray_address
from ..trials._promotion import SpreadPromotion
from ..trials._samplers import build_sampler
from ..trials._trials import ACCURACY, TrialRunner, uncompressed
from ..trials._view import SearchAware
from ._callbacks import Callback, Emissions, progress_callbacks
from ._mlflow import MlflowCallback
from ._sensitivity import for_search


def task_and_space(config: Config) -> tuple[Any, Any, Any]:
    """The config's task, its baseline model and the space discovered in it; warnings
    about the space (a group left out of pruning) are logged."""
    import warnings

    from frontier.experiments import build_task, task_baseline
    from frontier.spaces import discover

    task = build_task(config.task.name, **config.task.options)
    model, example = task_baseline(task, config.task.name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        space = discover(model, example, config.space)
    for w in caught:
        logger.warning(str(w.message))
    return task, model, space


def plan_latency(
    config: Config, model: Any, example: Any, space: Any, plan: Any, store_root: Any = None
) -> dict[str, Any]:
    """Per device the config names: the baseline's and ``plan``'s latency predicted by
    the stored table (``baseline_ms``, ``compressed_ms``), the speed-up and where the
    plan's ops were priced (``coverage``). Tables come from ``store_root``, else the
    config's ``device_store``, else the user's data dir. Nothing is measured here: a
    device without a stored table (or derived in the config) gets a sentence instead."""
    from frontier.latency_models import DeviceStore, LatencyModel
    from frontier.spaces import CompressionPlan

    store = DeviceStore(store_root or config.device_store)
    out: dict[str, Any] = {}
    for device in config.typed.devices:
        name = device.name
        if device.source == "derived":
            out[name] = f"derived from {device.like!r}: priced by `frontier search` only"
            continue
        if not store.has(name):
            out[name] = f"no table stored in {store.root}: `frontier search` measures one"
            continue
        table = store.load(name)
        offload = table.device_meta.offload_device
        lm = LatencyModel(
            table, offload=store.load(offload) if offload and store.has(offload) else None
        )
        lm.bind(model, example, space)
        base, est = lm.predict(model, CompressionPlan()), lm.predict(model, plan)
        out[name] = {
            "baseline_ms": round(base.latency_ms, 6),
            "baseline": f"measured {base.measured_at}" if base.measured_at else "predicted",
            "compressed_ms": round(est.latency_ms, 6),
            "speedup": round(base.latency_ms / est.latency_ms, 3),
            "coverage": est.coverage,
        }
    return out


def check_local_devices(config: Config) -> None:
    """Refuse a device of this machine it cannot measure (``local-cuda`` without a GPU)
    before the task is built: a baseline may train for minutes first."""
    for device in config.typed.devices:
        if device.local is not None:
            device.local.require()


def search_config(
    config: Config | str | Path,
    trials: int | None,
    backend: str | None,
    address: str | None,
    workers: int | None,
) -> Config:
    """``config`` (loaded where a name or path) with a ``Search``'s overrides: a Ray
    ``address`` alone means the Ray backend."""
    if not isinstance(config, Config):
        config = load_config(config)
    kind = backend or ("ray" if address else None)
    over = {"backend.kind": kind, "backend.address": address, "backend.workers": workers}
    return config.override({**over, "search.trials": trials})


def default_promotion(config: Config) -> SpreadPromotion:
    """Multi-fidelity promotion as ``search.fidelity`` sets it."""
    f = config.search.fidelity
    return SpreadPromotion(share=f.promote, slack=f.slack, toward=f.toward, adapt=f.adapt)


def log_start(search: Any, backend: Any) -> None:
    """The line a search starts its loop with: its study, trials done, backend, MLflow."""
    cfg = search.config
    logger.info(
        "study %r in %s, %d of %d trials done (a plan proposed again is not run: it is "
        "recorded as PRUNED, so trial numbers may pass %d), backend %s (%d at a time), "
        "MLflow at %s",
        search.study_name, search.study_store.url, search.done, cfg.search.trials,
        cfg.search.trials, backend.name, backend.slots, cfg.tracking.uri,
    )  # fmt: skip


def run_summary(search: Any) -> dict[str, float]:
    """What a run logs about itself at its end: failed trials, timing and the sampler's."""
    failed = sum(1 for r in search.records.values() if r.state == "failed")
    rungs = search.evaluation.rungs
    return {
        "failed_trials": failed,
        # plans a constraint ruled out, by the rung that judged them (their highest)
        **{f"ruled_out_at_{rungs[r]}": float(n) for r, n in search.front.ruled_out().items()},
        **search.timing.summary(),
        **sampler_summary(search.study.sampler),
    }


def prepare(config: Config, store: Any, resume: bool) -> TrialRunner:
    """Check the folders and the Ray address, then build the evaluation; the teacher is
    checked before device tables are measured (a new study only)."""
    if config.pipeline is not None:
        raise ConfigError(
            f"{config.name}: a pipeline config is searched by `frontier search` as one "
            "joint search (from Python: frontier.search.PipelineSearch), not as one model"
        )
    for what, folder in search_folders(config).items():
        writable(folder, what)
    check_storage(config.storage or default_storage(config))
    address = ray_address(config.backend.address) if config.backend.kind == "ray" else None
    if address:  # before any long work; the backend checks again when it joins
        check_ray_address(address)
    check_local_devices(config)
    logger.info("building the %s task and space ...", config.name)
    evaluation = TrialRunner(config, store=store, check_teacher=not resume, driver=True)
    for w in evaluation.warnings:
        logger.warning(w)
    for note in evaluation.notes:
        logger.info("note: %s", note)
    return evaluation


def open_study(
    config: Config,
    evaluation: TrialRunner,
    sampler: Any,
    resume: bool,
    initial: list[dict[str, Any]],
    new: bool = False,
) -> tuple[StudyStore, Any]:
    """The storage, locked for this driver, and the study in it (new, or the latest one
    on resume) with its sampler, seeded; a new study has ``initial`` and the anchors
    (``search.anchors``) queued first. A new study beside an unfinished one needs
    ``new``."""
    study_store = StudyStore(config.storage or default_storage(config))
    try:
        return study_store, _study(config, study_store, evaluation, sampler, resume, initial, new)
    except BaseException:
        study_store.close()
        raise


def _study(
    config: Config,
    study_store: StudyStore,
    evaluation: TrialRunner,
    sampler: Any,
    resume: bool,
    initial: list[dict[str, Any]],
    new: bool = False,
) -> Any:
    s = config.search
    directions = [o.direction for o in evaluation.objectives()]
    study = study_store.open(
        config.name, directions, sampler, resume=resume, new=new, trials=s.trials
    )
    if sampler is None:  # reseeded on resume: the same seed would replay old draws
        seed = s.seed + len(study.trials)
        study.sampler = build_sampler(s.sampler, population=s.population, seed=seed)
    if not resume:
        queued = list(initial)
        if s.anchors:
            queued += [p for p in anchor_params(evaluation.space) if p not in queued]
        for params in queued[: s.trials]:
            study.enqueue_trial(params)
    return study


#: how far a table's uncompressed model may be off a fresh timing of it before the search
#: says so (or the table's noise band, where wider); a quiet machine stays within 5%
SPEED_TOLERANCE = 0.15
#: timings of the uncompressed model, each a block of its own, before a change of speed
#: is said: a model that runs in microseconds swung 2x between back-to-back timings here
#: (0.015 and 0.033 ms), and one repeat let 2 of 5 quick starts warn on a quiet machine
SPEED_REPEATS = 4


def baseline(
    study: Any, evaluation: TrialRunner, constraints: list[Constraint]
) -> tuple[dict[str, float], list[Constraint]]:
    """The uncompressed model's values (measured once, kept in the study) and the
    constraints resolved against them; both printed, with a warning where a latency
    table prices pruning slower than no pruning (``slow_pruning``)."""
    if BASELINE_ATTR not in study.user_attrs:
        study.set_user_attr(BASELINE_ATTR, evaluation.baseline())
    values: dict[str, float] = study.user_attrs[BASELINE_ATTR]
    try:
        resolved = [c.resolve(values) for c in constraints]
    except ValueError as err:
        raise SearchError(str(err)) from None
    from frontier.spaces import CompressionPlan

    shown = ", ".join(f"{k} {number_text(k, v)}" for k, v in values.items())
    logger.info("baseline (the uncompressed model): %s", shown)
    for device, lm in evaluation.setup.latency.items():
        when = lm.predict(evaluation.teacher, CompressionPlan()).measured_at
        if when and MetricKey.name("latency_ms", device) in values:
            logger.info(
                "baseline latency on %s: measured %s, beside every row of its table "
                "(speed-ups are against it)", device, when,
            )  # fmt: skip
    for line in speed_check(evaluation):
        logger.warning(line)
    for was, now in zip(constraints, resolved, strict=True):
        if str(was) != str(now):
            logger.info("constraint %s -> %s", was, now)
    if any(name.startswith("latency_ms") for name in evaluation.metrics):
        for line in slow_pruning(evaluation.space, evaluation.setup.latency, evaluation.teacher):
            logger.warning(line)
    return values, resolved


def speed_check(evaluation: TrialRunner) -> list[str]:
    """A line per device of this machine whose table's uncompressed model is off a fresh
    timing of it now by more than the table's noise band (and ``SPEED_TOLERANCE``): the
    machine's speed has changed since the table was built (another job on its cores, a
    shared or throttled CPU), and every latency in ms the table states carries that
    difference. Speed-ups, measured beside the uncompressed model, do not. Costs one
    export and about a second (timed again, up to ``SPEED_REPEATS`` blocks in all, while
    off, and the closest kept: a passing spell of another job is not the table's fault)."""
    from frontier.latency_models import measure_models, whole_model_bytes
    from frontier.spaces import CompressionPlan

    lines = []
    for device, lm in evaluation.setup.latency.items():
        here, table = evaluation.config.typed.device(device).local, evaluation.tables.get(device)
        if here is None or table is None or here.unavailable():
            continue  # a device elsewhere: its runner times it
        stated = lm.predict(evaluation.teacher, CompressionPlan())
        if not stated.measured_at:
            continue  # a few-shot or derived table states no measurement of its own
        meta = table.bundle_meta(stated.bundle_id)  # this space's own noise band
        band = max((meta.noise_pct or 0.0) / 100, SPEED_TOLERANCE)
        try:
            data = whole_model_bytes(
                evaluation.teacher, CompressionPlan(), evaluation.example,
                half=meta.half, qdq=meta.int8_qdq,
            )  # fmt: skip
            now_ms = measure_models([data], device=here)[0]
            for _ in range(SPEED_REPEATS - 1):  # a passing spell, or lasting?
                if abs(stated.latency_ms / now_ms - 1) <= band:
                    break
                again = measure_models([data], device=here)[0]
                now_ms = min(now_ms, again, key=lambda ms: abs(stated.latency_ms / ms - 1))
        except Exception as err:  # a check, not a step the search needs
            logger.info("%s: the uncompressed model was not timed again (%s)", device, err)
            continue
        off = stated.latency_ms / now_ms - 1
        if abs(off) > band:
            where = (
                f"remove {table.path.parent} and run again to measure it anew"
                if table.path
                else "measure the table again"
            )
            lines.append(
                f"{device}: the uncompressed model runs in {now_ms:.4g} ms now; its table, "
                f"measured {stated.measured_at[:16]}, says {stated.latency_ms:.4g} ms, "
                f"{abs(off):.0%} {'less' if off < 0 else 'more'} (beyond its {band:.0%} noise "
                "band): this machine's speed has changed since (another job on its cores, "
                "a shared or throttled CPU). Latencies in ms carry that difference; speed-ups "
                f"and the ranking do not. Where it persists on a quiet machine, {where}"
            )
    return lines


def under_trained(evaluation: TrialRunner, plan: Mapping[str, Any], rung: int, value: float) -> str:
    """The hint for a baseline the uncompressed ``plan`` beats at ``rung`` (a rung that
    trains) by more than the validation split's noise (two binomial standard errors,
    at least 0.005), or "": such a baseline is under-trained, which matters more than
    any compression ("" for a compressed plan, the proxy rung or a metric not in [0, 1])."""
    import math

    name = evaluation.rungs[rung]
    base = evaluation.teacher_accuracy()
    n = evaluation.validation_size()
    if name == "proxy" or not uncompressed(plan) or not 0 <= base <= 1 or not n:
        return ""
    noise = max(2 * math.sqrt(max(base * (1 - base), 1e-4) / n), 0.005)
    if value - base <= noise:
        return ""
    return (
        f"the uncompressed model fine-tuned at the {name} rung scores {ACCURACY} {value:.4f} "
        f"against the baseline's {base:.4f} (noise about {noise:.3f}): the baseline is "
        "under-trained, which matters more than any compression. Train it longer, or "
        "search again with that trial's model as the teacher"
    )


def slow_pruning(space: Any, latency: Mapping[str, Any], model: Any) -> list[str]:
    """A line per device whose table prices pruning every layer alike (FP32) more than
    10% slower than the uncompressed model: the kept channel counts are shapes its
    kernels are not built for, and the search would find no pruned plan faster."""
    from frontier.spaces import uniform_params

    opts = space.options
    wide = {"weight_bits": max(opts.weight_bits), "act_bits": max(opts.act_bits)}
    pruned = [
        (r, space.plan_of(uniform_params(space, prune=r, **wide)))
        for r in sorted(set(opts.prune_ratios))
        if r > 0
    ]
    if not pruned:
        return []
    uncompressed = space.plan_of(space.uncompressed_params())
    out = []
    for device, predictor in sorted(latency.items()):
        base = predictor.predict(model, uncompressed).latency_ms
        priced = [(r, predictor.predict(model, plan).latency_ms) for r, plan in pruned]
        slower = [(r, ms) for r, ms in priced if ms > 1.1 * base]
        if slower:
            ratio, ms = max(slower, key=lambda r: r[1])
            key = MetricKey.name("latency_ms", device)
            out.append(
                f"{key}: {len(slower)} of {len(priced)} uniform prune ratios are "
                f"priced slower than the uncompressed model (every layer at {ratio:g}: "
                f"{ms:.3g} ms against {base:.3g} ms). Kept channel counts are multiples of "
                f"space.round_to={space.options.round_to}; a larger round_to keeps shapes "
                "CPU kernels are built for (docs/tasks.md)"
            )
    return out


def warm_up(evaluation: TrialRunner) -> None:
    """Distillation's soft targets, once in the driver with every core, before workers
    start (a task caches them; each worker would otherwise make its own)."""
    if ACCURACY in evaluation.metrics and evaluation.rungs != ["proxy"]:
        evaluation.setup.soft_teacher  # noqa: B018


def sensitivity_for(
    config: Config, evaluation: Any, sampler: Any, backend: Any = None
) -> tuple[list[dict[str, Any]], str, float] | None:
    """Per-layer sensitivity where the config or a ``SearchAware`` sampler wants it
    (measured on ``backend``'s workers): its rows, their fidelity and the seconds it
    took; None where nothing wants it."""
    wants = isinstance(sampler, SearchAware) and sampler.wants_sensitivity
    if not (config.search.sensitivity or wants):
        return None
    start = time.perf_counter()
    rows, fidelity = for_search(evaluation, config.name, config.search.trials, backend)
    return rows, fidelity, time.perf_counter() - start


def bind_sampler(sampler: Any, search: Any) -> None:
    """Give a ``SearchAware`` sampler the search it proposes for (its records, front,
    sensitivity); any other sampler needs nothing."""
    if isinstance(sampler, SearchAware):
        sampler.bind(search)


def sampler_summary(sampler: Any) -> dict[str, float]:
    """What a ``SearchAware`` sampler spent screening plans: in all, and the median
    proposal (nothing for another sampler)."""
    if not isinstance(sampler, SearchAware):
        return {}
    out = {"sampler_propose_s": sampler.propose_s}
    if sampler.proposals_s:
        out["sampler_propose_median_s"] = statistics.median(sampler.proposals_s)
    return out


def default_callbacks(config: Config, progress: bool | str = True) -> list[Callback]:
    """The search's own energy (CodeCarbon), MLflow tracking and progress output."""
    t = config.tracking
    name, export, measure = t.experiment or config.name, t.export_front, t.measure_front
    mlflow = MlflowCallback(
        uri=t.uri,
        experiment=name,
        export_front=export,
        measure_front=measure,
        test_front=t.test_front,
        profile_front=t.profile_front,
        learn_front=t.learn_front,
        write_lanes=t.write_lanes,
    )
    return [Emissions(config.carbon.country_iso), mlflow, *progress_callbacks(progress)]
