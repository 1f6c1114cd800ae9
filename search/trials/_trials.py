"""What scores one trial: the task, its teacher, the space, the evaluators per rung and
the devices' latency models, built from a config (in the driver and in each worker).

Over 500 lines: building one trial's world (task, baseline, space, evaluators per rung,
tables, accelerator) and scoring a plan in it are done alike by the driver and by every
worker, from this one class.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from frontier.evaluators import MetricKey
from frontier.spaces import Accelerator, CompressionPlan, SearchSpace

from ..config._config import Config
from ..front._pareto import Objective
from ._accelerator import resolve

ACCURACY = "accuracy"
SIZE = "size_bytes"


@dataclass
class TrialResult:
    """Every metric of one candidate at one rung (plain data, crosses processes).

    Attributes:
        values: metric name -> value.
        fidelity: metric name -> how it was obtained ("short", "table", "exact", ...).
        details: metric name -> the evaluator's details.
        wall_s: seconds the evaluation took, model building included.
        onnx: the scored model as ONNX bytes, where the job exported it (a training rung
            with front exports on), else None.
        onnx_precision: that file's precision ("fp32" or "int8").
        export_error: why that export failed ("" when it did not); the trial stands.
        export_s: seconds the export took (not in ``wall_s``).
        node: the address of the cluster node that scored it ("" outside Ray).
        train_device: the accelerator that trained and scored it (``Accelerator.describe``:
            ``cpu``, ``cuda:0 (NVIDIA H200, bf16)``).
    """

    values: dict[str, float]
    fidelity: dict[str, str]
    details: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    onnx: bytes | None = field(default=None, repr=False)
    onnx_precision: str = ""
    export_error: str = ""
    export_s: float = 0.0
    node: str = ""
    train_device: str = ""
    #: the fine-tuned weights (``torch.save`` of the state dict) of an uncompressed plan
    #: at a training rung: the better teacher, where it beats an under-trained baseline
    weights: bytes | None = field(default=None, repr=False)


def uncompressed(plan: Mapping[str, Any]) -> bool:
    """``plan`` (a plan's dict) leaves the model as it is, distillation aside."""
    return (
        not any(plan.get("prune", {}).values())
        and all(b >= 32 for b in plan.get("weight_bits", {}).values())
        and all(b >= 32 for b in plan.get("act_bits", {}).values())
        and not any(plan.get("sparsity", {}).values())
        and plan.get("student") is None
        and plan.get("activation") is None
        and not any(plan.get("techniques", {}).values())
    )


def search_threads(config: Config) -> int | None:
    """The torch threads of the search's own training before its trials start (a
    baseline on a cold cache): the cores its trials will share, ``backend.workers`` x
    ``threads_per_trial``, at most the cores this process may run on. None where
    ``threads_per_trial`` is None (torch's default). ResNet-50's baseline on this 2-core
    machine: 1.75 s a step on one thread, 0.95 on two (bench_baseline_threads.py)."""
    per_trial = config.backend.threads_per_trial
    if per_trial is None:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(config.backend.workers * per_trial, cores or 1))


@contextlib.contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    """Torch's intra-op threads set to ``threads`` (None: unchanged) for a block. A trial
    on more threads than it gets cores waits at every op's barrier for a descheduled
    thread (docs/search.md, "Threads")."""
    import torch

    before = torch.get_num_threads()
    if threads is not None and threads != before:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _quiet() -> Any:
    from frontier.latency_models import quiet_root_logger

    return quiet_root_logger()


def _one_file(path: Path) -> None:
    """Refuse a front member's export that is not one file: a model whose weights are
    stored beside it (over 2 GiB, ``spaces``' ``save_onnx``) would reach MLflow, ``pick``
    and ``explore`` as a graph without its weights."""
    from frontier.spaces import data_file

    weights = data_file(path)
    if weights.exists():
        size_gb = weights.stat().st_size / 1e9
        path.unlink(missing_ok=True)
        weights.unlink()
        raise RuntimeError(
            f"the model's weights ({size_gb:.2f} GB) are more than one ONNX file holds "
            "(2 GiB); Frontier does not log such a model's front members yet (its "
            "scores stand, and its latency table works)"
        )


class TrialRunner:
    """Runs the trials of one config's space: applies a plan, fine-tunes it at a rung
    and scores it by each objective's evaluator (``run_job``), and exports it.

    Args:
        config: the search config.
        tables: device name -> DeviceTable for every device the config names; None
            resolves them (``resolve_tables``: measures ``local-cpu`` the first time).
            The driver resolves them and hands them to Ray workers with each trial.
        store: the DeviceStore to resolve tables from.
        accelerator: where this process trains and scores (``backend.accelerator``
            resolved here: a worker is handed its own); None resolves it for the driver
            (``driver_accelerator``).
        driver: this is the search's own process: a baseline it trains uses the cores
            its trials will share (``search_threads``), not one trial's threads.
    """

    def __init__(
        self,
        config: Config,
        tables: Mapping[str, Any] | None = None,
        store: Any = None,
        *,
        check_teacher: bool = False,
        accelerator: Accelerator | None = None,
        driver: bool = False,
    ) -> None:
        from frontier.evaluators import EvalSetup
        from frontier.experiments import build_task, task_baseline, use_accelerator
        from frontier.latency_models import LatencyModel
        from frontier.spaces import discover

        self.config = config
        self.accelerator = accelerator or driver_accelerator(config)
        self.task = build_task(config.task.name, **config.task.options)
        # a baseline trained in a worker gets a trial's threads: on a busy machine
        # torch's default (every core) waited 46 s where one thread took 4; in the
        # driver, the cores its trials will share (docs/search.md, "Threads")
        threads = search_threads(config) if driver else config.backend.threads_per_trial
        with use_accelerator(self.accelerator), _torch_threads(threads):
            self.teacher, self.example = task_baseline(self.task, config.task.name)
        if config.task.teacher:
            from frontier.experiments import load_weights

            load_weights(self.teacher, Path(config.task.teacher).expanduser())
        self.metrics = config.metric_names()
        self.rungs = list(config.search.fidelity.rungs)
        self._teacher_accuracy: float | None = None
        self._val_labels: list[Any] = []  # the targets that accuracy was measured on
        self.warnings: list[str] = []
        #: what this search cannot measure (an untrained task), printed and recorded
        self.notes: list[str] = list(getattr(self.task, "limitations", list)())  # optional hook
        # the space and the latency models join it below; checking the teacher needs it
        self.setup = EvalSetup(
            task=self.task,
            teacher=self.teacher,
            seed=config.search.seed,
            accelerator=self.accelerator,
        )
        if check_teacher:
            self._check_teacher()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.space: SearchSpace = discover(self.teacher, self.example, config.space)
        self.warnings += [str(w.message) for w in caught]
        if tables is None:
            tables = resolve_tables(
                config, (self.task, self.teacher, self.example, self.space), store
            )
        self.tables = dict(tables)
        for name in config.device_names():
            if name not in tables:
                raise ValueError(f"no device table for {name!r}")
            offload = tables[name].device_meta.offload_device
            lm = LatencyModel(tables[name], offload=tables.get(offload) if offload else None)
            lm.bind(self.teacher, self.example, self.space)
            self.setup.latency[name] = lm
        self.setup.space = self.space
        if not getattr(self.task, "trained", True) and self.rungs != ["proxy"]:
            self.rungs = ["proxy"]
        self._evaluators: dict[tuple[str, str], Any] = {}

    # -- objectives ---------------------------------------------------------------------
    def _options(self, name: str) -> dict[str, Any]:
        for o in self.config.objectives:
            if o.name == name:
                return dict(o.options)
        return {}

    def fidelity(self, rung: int | str) -> str:
        """The fidelity of ``rung``: a rung index, or a fidelity name (``"proxy"``) to
        score at one the config does not list."""
        return rung if isinstance(rung, str) else self.rungs[rung]

    def evaluator(self, name: str, rung: int | str = 0) -> Any:
        """The evaluator of ``name`` at ``rung`` (an index or a fidelity name; only
        accuracy changes with the rung)."""
        from frontier.evaluators import build_evaluator

        key = (name, self.fidelity(rung) if name == ACCURACY else "")
        if key not in self._evaluators:
            options = self._options(name)
            if name == ACCURACY:
                options["fidelity"] = self.fidelity(rung)
            if MetricKey.parse(name).metric == "co2e_g":
                options.setdefault("scenario", self.config.carbon.scenario())
            self._evaluators[key] = build_evaluator(name, **options)
        return self._evaluators[key]

    def objectives(self) -> list[Objective]:
        """The config's objectives with their directions (the evaluator's unless given)."""
        return [
            Objective(o.name, o.direction or self.evaluator(o.name).direction)
            for o in self.config.objectives
        ]

    def recorded(self) -> list[Objective]:
        """Every metric a trial records, with its direction: the objectives first, then
        what only a constraint or ``metrics`` names."""
        objectives = self.objectives()
        named = {o.name for o in objectives}
        return objectives + [
            Objective(m, self.evaluator(m).direction) for m in self.metrics if m not in named
        ]

    # -- scoring ------------------------------------------------------------------------
    def plan(self, data: Mapping[str, Any]) -> CompressionPlan:
        return CompressionPlan.from_dict(dict(data), space=self.space)

    def evaluate(
        self,
        plan: CompressionPlan,
        rung: int | str = 0,
        metrics: list[str] | None = None,
        *,
        export: bool = False,
        weights: bool = False,
    ) -> TrialResult:
        """Score ``plan`` at ``rung`` on ``metrics`` (default: every metric of the config);
        with ``export``, also the model the accuracy was measured on as ONNX bytes (what
        the search writes for a front member, without fine-tuning it again); with
        ``weights``, also its state dict (``TrialResult.weights``).

        Raises:
            EvaluationError: an evaluator failed or gave a value that is not finite.
        """
        from frontier.evaluators import Candidate, EvaluationError

        start = time.perf_counter()
        candidate = Candidate(plan)
        values: dict[str, float] = {}
        fidelity: dict[str, str] = {}
        details: dict[str, Any] = {}
        names = list(metrics or self.metrics)
        with _quiet():
            # accuracy first: the model it builds is the one the costs are counted on;
            # the size last, so that it reads the count MACs or BOPs made (alone, it
            # counts without the MACs pass; first, MACs would be counted again)
            for name in sorted(names, key=lambda n: (n != ACCURACY, n == SIZE)):
                m = self.evaluator(name, rung)(candidate, self.setup)
                if not math.isfinite(m.value):
                    raise EvaluationError(f"objective {name!r} is {m.value} (not finite)")
                values[name], fidelity[name], details[name] = m.value, m.fidelity, m.details
        values = {n: values[n] for n in names}
        result = TrialResult(values, fidelity, details, time.perf_counter() - start)
        result.train_device = self.accelerator.describe()
        if weights and candidate.scored is not None:
            buffer = io.BytesIO()
            torch.save(candidate.scored.state_dict(), buffer)
            result.weights = buffer.getvalue()
        if export and candidate.scored is not None:
            start = time.perf_counter()
            try:
                result.onnx, result.onnx_precision = self._onnx_bytes(candidate.scored, plan)
            except Exception as err:  # the score stands; the run says why it has no model
                result.export_error = f"{type(err).__name__}: {err}"
            result.export_s = time.perf_counter() - start
        return result

    def exports_in_job(self, rung: int | str) -> bool:
        """Whether a job at ``rung`` exports its scored model: at a training rung when the
        search writes front members' models (fine-tuning again in the driver costs as
        much as the job did; exporting costs seconds); never at a named fidelity."""
        return (
            isinstance(rung, int)
            and self.config.tracking.export_front
            and ACCURACY in self.metrics
            and self.rungs[rung] != "proxy"
        )

    def run_job(self, plan: Mapping[str, Any], rung: int | str) -> TrialResult:
        """A job as the backends hand it over: plan data scored at ``rung``; rung 0 and a
        named fidelity measure every metric, a promotion only what the rung changes
        (accuracy); the scored model comes back as ONNX where ``exports_in_job``. Torch
        runs on ``backend.threads_per_trial`` threads meanwhile."""
        trains = ACCURACY in self.metrics and self.fidelity(rung) != "proxy"
        with _torch_threads(self.config.backend.threads_per_trial):
            return self.evaluate(
                self.plan(plan),
                rung,
                None if rung == 0 or isinstance(rung, str) else [ACCURACY],
                export=self.exports_in_job(rung),
                weights=trains and uncompressed(plan),
            )

    def scored_model(self, plan: CompressionPlan, rung: int) -> nn.Module:
        """The model the accuracy at ``rung`` was measured on (fine-tuned where the rung
        fine-tunes; seeded, so the same as during the search), for export."""
        from frontier.evaluators import Candidate

        candidate = Candidate(plan)
        if ACCURACY in self.metrics and self.rungs[rung] != "proxy":
            model, _ = self.evaluator(ACCURACY, rung).fit(candidate, self.setup)
            return model
        return self.setup.compressed(candidate)

    def export(self, plan: Mapping[str, Any], rung: int, path: Path) -> Any:
        """Write the model ``plan``'s accuracy at ``rung`` was measured on as ONNX at
        ``path`` (INT8 where the plan quantises), one file as MLflow keeps a front
        member's (a model over 2 GiB is refused, ``_one_file``); returns the
        ``ExportResult``."""
        compression = self.plan(plan)
        threads = self.config.backend.threads_per_trial
        with _torch_threads(threads):
            result = self._export_model(self.scored_model(compression, rung), compression, path)
        _one_file(path)
        return result

    def export_baseline(self, path: Path) -> Any:
        """Write the uncompressed model (every choice at its uncompressed value, no
        fine-tuning) as ONNX at ``path``: what compressed models are compared with."""
        from frontier.evaluators import Candidate

        plan = self.space.plan_of(self.space.uncompressed_params())
        return self._export_model(self.setup.compressed(Candidate(plan)), plan, path)

    def _export_model(self, model: nn.Module, plan: CompressionPlan, path: Path) -> Any:
        from frontier.spaces import export_onnx

        with warnings.catch_warnings(), _quiet():
            warnings.simplefilter("ignore")
            return export_onnx(
                model,
                plan,
                self.example,
                path,
                calibration_data=self.setup.calibration(),
                half=self.half,
                qdq=self.qdq,
            )

    @property
    def half(self) -> bool:
        """Whether models are exported with 16-bit layers in FP16: where every device
        the search prices runs them so (GPU tables, ``half`` in their metadata); a
        search that also prices a CPU exports them FP32, as the CPU table prices them."""
        return bool(self.tables) and all(t.device_meta.half for t in self.tables.values())

    @property
    def qdq(self) -> bool:
        """Whether models are exported with INT8 in QDQ format: where every device the
        search prices reads it so (OpenVINO tables, ``int8_qdq`` in their metadata); a
        search that also prices ONNX Runtime exports ONNX Runtime's QOperator format."""
        return bool(self.tables) and all(t.device_meta.int8_qdq for t in self.tables.values())

    def _onnx_bytes(self, model: nn.Module, plan: CompressionPlan) -> tuple[bytes, str]:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="frontier-job-") as tmp:
            result = self._export_model(model, plan, Path(tmp) / "model.onnx")
            _one_file(result.path)
            return result.path.read_bytes(), result.precision

    def reports_test(self) -> bool:
        """Whether a search reports test accuracy (accuracy searched on a trained model)."""
        return ACCURACY in self.metrics and self.rungs != ["proxy"]

    def test_accuracy(self, onnx_path: Path) -> float:
        """The task metric of an exported model on the test split: reporting only, never
        read by what chooses models."""
        from frontier.evaluators import measure_onnx_accuracy, task_score

        return measure_onnx_accuracy(
            onnx_path, self.task.loaders().test, score=task_score(self.task)
        )

    def baseline(self) -> dict[str, float]:
        """Every metric of the uncompressed model (accuracy: the teacher's validation
        accuracy), the scale that hypervolume is normalised by."""
        others = [m for m in self.metrics if m != ACCURACY]
        values = self.evaluate(CompressionPlan(), 0, others).values if others else {}
        if ACCURACY in self.metrics and self.rungs == ["proxy"]:
            # proxy-only: the scale is the teacher's own proxy value, not its accuracy
            values.update(self.evaluate(CompressionPlan(), 0, [ACCURACY]).values)
        elif ACCURACY in self.metrics:
            values[ACCURACY] = self.teacher_accuracy()
        return values

    def teacher_accuracy(self) -> float:
        """The teacher's metric on the validation split (measured once)."""
        from frontier.evaluators import measure_accuracy, task_score

        if self._teacher_accuracy is None:
            self._val_labels = []
            self._teacher_accuracy = measure_accuracy(
                self.setup.teacher_placed,
                self.task.loaders().val,
                labels=self._val_labels,
                score=task_score(self.task),
            )
        return self._teacher_accuracy

    def validation_size(self) -> int:
        """How many validation samples the teacher's accuracy was measured on."""
        self.teacher_accuracy()
        return sum(len(y) for y in self._val_labels)

    def _check_teacher(self) -> None:
        """Stop before any long work when the teacher's outputs are not finite or it
        scores about what chance does (``task.check_baseline: false`` warns instead)."""
        from frontier.evaluators import EvaluationError
        from frontier.experiments import TaskError

        if ACCURACY not in self.metrics or self.rungs == ["proxy"]:
            return
        try:
            accuracy = self.teacher_accuracy()
        except EvaluationError as err:
            raise TaskError(f"the task's baseline model cannot be scored: {err}") from None
        problem = self._baseline_problem(accuracy)
        if problem and self.config.task.check_baseline:
            raise TaskError(
                f"{problem}. To search anyway: task.check_baseline: false in the config "
                "(or --set task.check_baseline=false)"
            )
        if problem:
            self.warnings.append(problem)

    def _chance(self) -> tuple[float, str] | None:
        """The task's metric for a model that always answers the validation split's most
        common class, and that class; None where the targets are not class ids (read
        from the pass that measured the teacher's accuracy)."""
        import torch

        self.teacher_accuracy()
        labels = self._val_labels
        if not labels or not all(
            isinstance(y, torch.Tensor) and y.dim() == 1 and not y.is_floating_point()
            for y in labels
        ):
            return None
        y = torch.cat(labels)
        with torch.no_grad():
            out = self.teacher(self.example)
        if not isinstance(out, torch.Tensor) or int(y.min()) < 0:
            return None
        classes = max(int(out.shape[-1]), int(y.max()) + 1)
        common = int(torch.bincount(y, minlength=classes).argmax())
        logits = torch.zeros(len(y), classes)
        logits[:, common] = 1.0
        return float(self.task.metric(logits, y)), f"always class {common}"

    def _baseline_problem(self, accuracy: float) -> str:
        """Why the teacher's ``accuracy`` makes a search meaningless ('' when it does
        not): it is within a tenth of the way from chance to perfect."""
        found = self._chance()
        if found is None:
            return ""
        chance, answer = found
        if accuracy >= chance + 0.1 * (1.0 - chance):
            return ""
        return (
            f"the task's baseline model scores {ACCURACY} {accuracy:.4f} on the validation "
            f"split, about what {answer} scores ({chance:.4f}): is it trained, and are its "
            "weights loaded? Compressing it measures noise"
        )


def resolve_tables(
    config: Config, evaluation_parts: tuple[Any, Any, Any, Any], store: Any = None
) -> dict[str, Any]:
    """Device tables for every device the config names: ``local-cpu`` (and
    ``local-cpu-Nt``, N threads) is measured here the first time (with progress),
    others come from the device store.

    Args:
        config: the search config.
        evaluation_parts: (task, teacher, example_inputs, space).
        store: a DeviceStore (default: ``config.device_store`` or the user's data dir).
    """
    from frontier.latency_models import DeviceStore, TableError, ensure_local_table

    task, teacher, example, space = evaluation_parts
    store = store or DeviceStore(config.device_store)
    tables: dict[str, Any] = {}
    for device in config.typed.devices:
        name = device.name
        if device.source == "derived":
            assert device.like is not None  # a derived device names its table
            tables[name] = tables[device.like].derive(
                name,
                unsupported=list(device.unsupported),
                offload=device.offload or device.like,
                transfer_gbps=device.transfer_gbps,
            )
        elif device.source == "local":  # local-cpu, local-cuda-b32, ...: measured here
            tables[name] = ensure_local_table(
                teacher,
                example,
                space,
                store=store,
                name=name,
                calibration_data=task.calibration_batches(),
                calibration=config.local_table.calibration,
                calibration_budget_s=config.local_table.calibration_budget_s,
                rounds=config.local_table.rounds,
                round_s=config.local_table.round_s,
            )
        elif store.has(name):
            tables[name] = store.load(name)
        else:
            raise TableError(
                f"device {name!r}: no table in {store.root} (stored: "
                f"{', '.join(store.names()) or 'none'}); measure one with `frontier lut ops` "
                f"and `frontier lut measure`, then `frontier lut import --name {name}`"
            )
    return tables


def driver_accelerator(config: Config) -> Accelerator:
    """The driver's accelerator: where trials run in the driver (one local worker),
    ``backend.accelerator`` as it says (``cuda`` without a GPU is an error); where they
    run in workers, a GPU the driver has for the baseline, else the CPU."""
    b = config.backend
    in_driver = b.kind == "local" and b.workers == 1
    return resolve(
        b.accelerator, b.mixed_precision, required=in_driver, where="the search's own process"
    )
