"""Tables of this machine's own devices, measured here: ``ensure_local_table`` measures
a local device's table the first time a space targets it (with progress, its power
from CodeCarbon or the GPU's energy counter), and ``measure_models``/``measure_plans``
time whole models on a device of this machine by the timing protocol."""

from __future__ import annotations

import csv
import json
import logging
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from frontier.spaces import SearchSpace

from ..bundle._bundle import (
    BUDGET_MIN_MODELS,
    _progress,
    default_calibration,
    small_model_budget,
    space_ops,
    write_bundle,
)
from ..bundle._sparse import measure_sparse_rows, sparse_variants
from ..bundle._whole import whole_model_bytes
from ..device._devices import CPU_1T, LOCAL_CPU, LocalDevice, local_device, local_names
from ..device._table import DeviceMeta, DeviceStore, DeviceTable, TableError, write_rows
from ..price._model import LatencyModel
from ..runner import (
    PROTOCOL_VERSION,
    ROUND_S,
    ROUNDS,
    measure_bundle,
    measure_onnx,
)


@contextmanager
def quiet_root_logger() -> Iterator[None]:
    """ONNX Runtime's quantizer logs advice on the root logger for every model. Inside
    one already (a sampler pricing hundreds of plans), nothing is set: each change of a
    level clears every logger's cache."""
    root = logging.getLogger()
    level = root.level
    if level >= logging.ERROR:
        yield
        return
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def cpu_power_w() -> tuple[float, str]:
    """Active power of this machine's CPU from CodeCarbon's CPU data: the matched TDP
    times CodeCarbon's average-consumption ratio, or its default TDP when unmatched."""
    from codecarbon.core.cpu import TDP
    from codecarbon.external import hardware

    from ..runner import cpu_model

    model = cpu_model()
    tdp = None
    try:
        tdp = TDP()._get_cpu_power_from_registry(model)
    except Exception:  # CodeCarbon's matcher; an unknown CPU is not an error here
        tdp = None
    ratio = hardware.CONSUMPTION_PERCENTAGE_CONSTANT
    if tdp:
        return float(tdp) * ratio, f"CodeCarbon TDP {tdp} W for {model!r} x {ratio}"
    default = hardware.POWER_CONSTANT
    return float(
        default
    ) * ratio, f"CodeCarbon default TDP {default} W ({model!r} unmatched) x {ratio}"


def device_power_w(device: LocalDevice, measured: Path) -> tuple[float | None, str]:
    """A local device's active power and where it comes from: on a GPU, the median over
    the whole models of ``measured`` (a runner's CSV) of energy over time per run, both
    read over the same window of replays (``host_ms``; the row's median where it has
    none), from its counter; on a CPU (or a GPU without a counter), CodeCarbon's power."""

    def per_run_ms(row: dict[str, str]) -> float:
        return float(row.get("host_ms") or row["median_ms"])

    with measured.open(newline="") as f:
        ratios = [
            float(r["energy_mj"]) / per_run_ms(r)
            for r in csv.DictReader(f)
            if r.get("energy_mj") and r.get("status") == "ok" and per_run_ms(r) > 0
        ]
    if ratios:
        return float(np.median(ratios)), (
            f"measured: {device.energy}, median over {len(ratios)} whole models"
        )
    if device.runtime.measures_energy:
        return None, f"unknown: {device.name} has no energy counter that could be read"
    return cpu_power_w()


def ensure_local_table(
    model: nn.Module,
    example_inputs: Any,
    space: SearchSpace,
    *,
    store: DeviceStore | None = None,
    name: str = LOCAL_CPU,
    calibration: int | None = None,
    calibration_data: Any = None,
    rounds: int = ROUNDS,
    round_s: float = ROUND_S,
    calibration_budget_s: float | None = None,
) -> DeviceTable:
    """A table of a device of this machine (``name``: ``local-cpu`` with one ONNX
    Runtime thread, ``local-cpu-Nt`` with N, ``local-cuda`` and ``local-cuda-bN`` its
    GPU in CUDA graphs at batch 1 or N; ``_devices``), measured here (with progress)
    for the ops it lacks. A GPU device on a machine without one raises
    ``DeviceUnavailable``.

    The first time a space targets this machine, its op bundle is built and measured
    and merged into the stored table; later calls find every op and measure nothing.
    When the space searches unstructured sparsity, its sparse FP32 convolutions and
    linear layers also get sparse-kernel rows (PyTorch CSR matmul, ``_sparse``).

    Its calibration models are ``calibration``, else as many of the default count as
    fit ``calibration_budget_s``; with neither, a small model's 200 are as many as fit
    ``SMALL_MODEL_CALIBRATION_S`` (at least 60: ``small_model_budget``), so a model
    whose whole models build slowly still gets its first table in minutes.

    Every row is timed by the runner's protocol (``runner.time_models``), in
    milliseconds of this machine as it ran; a stored table timed by another protocol
    is measured again in full.
    """
    device = local_device(name)
    if device is None:
        raise ValueError(f"{name!r} is not a local device ({local_names()})")
    device.require()
    store = store or DeviceStore()
    found = space_ops(model, example_inputs, space, batch_size=device.batch_size, half=device.half)
    try:
        table = store.load(name) if store.has(name) else None
    except TableError as err:  # a table of an older bundle version: measured again
        print(f"{err}; measuring it again", file=sys.stderr)
        table = None
    protocol = (table.device_meta.protocol or {}) if table is not None else {}
    if table is not None and protocol.get("version") != PROTOCOL_VERSION:
        print(
            f"the stored {name} table was timed with another protocol: measuring it again",
            file=sys.stderr,
        )
        table = None
    if table is None or any(table.get(s.key) is None for s in found.ops):
        table = _measure_ops(
            model, example_inputs, space, found, store, device, calibration,
            calibration_data, rounds, round_s, calibration_budget_s,
        )  # fmt: skip
        check = LatencyModel(table)
        check.bind(model, example_inputs, space)
        flagged = check.baseline_check(model)
        if flagged:
            print(f"warning: {flagged}", file=sys.stderr)
    sparse = [  # sparse kernels are timed on the CPU (torch CSR); a GPU prices them dense
        s
        for s in sparse_variants(found.ops, space.options.sparsity)
        if table.get(s.key) is None and device.runtime.sparse_kernels
    ]
    if sparse:
        table = _measure_sparse(table, sparse, store, device, rounds, round_s)
    return table


def _measure_ops(
    model: nn.Module,
    example_inputs: Any,
    space: SearchSpace,
    found: Any,
    store: DeviceStore,
    device: LocalDevice,
    calibration: int | None,
    calibration_data: Any,
    rounds: int,
    round_s: float,
    calibration_budget_s: float | None,
) -> DeviceTable:
    count = calibration if calibration is not None else default_calibration(found)
    at_least = BUDGET_MIN_MODELS
    if calibration is None and calibration_budget_s is None:
        calibration_budget_s, at_least = small_model_budget(found)
    budget = ""
    if calibration is None and calibration_budget_s:
        budget = f" (or as many as {calibration_budget_s:.0f} s allow)"
    print(
        f"measuring {found.count} ops and {count} calibration models{budget} for the "
        f"{device.name} table: once per machine and space ...",
        file=sys.stderr,
    )
    name = device.name
    with tempfile.TemporaryDirectory() as tmp, quiet_root_logger():
        bundle = Path(tmp) / "ops.zip"
        manifest = write_bundle(
            bundle,
            model=model,
            example_inputs=example_inputs,
            space=space,
            calibration=calibration,
            calibration_data=calibration_data,
            calibration_budget_s=calibration_budget_s,
            calibration_at_least=at_least,
            name=name,
            ops=found,
            batch_size=device.batch_size,
            qdq=device.int8_qdq,
        )
        out = Path(tmp) / "table.csv"
        measure_bundle(
            bundle,
            out,
            device=name,
            batch_size=device.batch_size,
            rounds=rounds,
            round_s=round_s,
            backend=device.backend(),
        )
        power_w, source = device_power_w(device, out)
        extra = {"power_source": source, "precisions": list(device.precisions)}
        return store.import_table(
            out,
            name=name,
            manifest=manifest,
            merge=True,
            meta=DeviceMeta(active_power_w=power_w, extra=extra),
        )


def _measure_sparse(
    table: DeviceTable,
    specs: list[Any],
    store: DeviceStore,
    device: LocalDevice,
    rounds: int,
    round_s: float,
) -> DeviceTable:
    """Rows for ``specs`` timed with torch's CSR kernels on ``device``'s threads."""
    import torch

    print(
        f"measuring {len(specs)} sparse-kernel ops (torch CSR matmul) for the "
        f"{table.name} table ...",
        file=sys.stderr,
    )
    start = time.perf_counter()
    rows = measure_sparse_rows(
        specs,
        overhead_ms=table.overhead_ms,
        threads=device.threads,
        rounds=rounds,
        round_s=round_s,
        progress=lambda done, total: _progress("sparse ops", done, total, start),
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sparse.csv"
        write_rows(out, rows)
        Path(str(out) + ".meta.json").write_text(json.dumps(table.device_meta.to_dict()))
        return store.import_table(
            out,
            name=table.name,
            merge=True,
            meta=DeviceMeta(
                extra={"sparse_kernels": f"torch {torch.__version__} CSR matmul (im2col for conv)"}
            ),
        )


def measure_local(model_bytes: bytes, *, device: LocalDevice = CPU_1T) -> float:
    """Latency in ms of an ONNX model on a device of this machine (one CPU thread by
    default), at its batch size, by the timing protocol (``runner.time_models``)."""
    return measure_models([model_bytes], device=device)[0]


def measure_models(
    models: Sequence[bytes | Path],
    *,
    device: LocalDevice = CPU_1T,
    rounds: int = ROUNDS,
    round_s: float = ROUND_S,
    seed: int = 0,
    label: str = "",
    reference: bytes | Path | None = None,
) -> list[float]:
    """Latencies in ms of whole ONNX models (bytes or files) on a device of this
    machine (one CPU thread by default), at its batch size, by the timing protocol
    every Frontier latency follows (``runner.time_models``: one warm session per model,
    rounds that visit every model in turn, the median of each model's round medians),
    stated against ``reference`` timed in the same rounds where given
    (``runner.time_chunked``). ``label`` names the models in progress output (none
    when empty)."""
    start = time.perf_counter()

    def progress(done: int, total: int) -> None:
        if label:
            print(
                f"measured {label}: {done}/{total} ({time.perf_counter() - start:.0f} s)",
                file=sys.stderr,
            )

    stats = measure_onnx(
        models,
        backend=device.backend(),
        batch_size=device.batch_size,
        rounds=rounds,
        round_s=round_s,
        seed=seed,
        progress=progress,
        reference=reference,
    )
    return [s["median_ms"] for s in stats]


def measure_plans(
    model: nn.Module,
    plans: Sequence[Any],
    example_inputs: Any,
    table: DeviceTable,
    *,
    calibration_data: Any = None,
    label: str = "validation models",
    against_first: bool = False,
) -> list[float]:
    """Whole-model latency (ms) of ``model`` compressed by each plan, exported as
    ``export_onnx`` writes it and measured here as the device runner measures whole
    models: by the timing protocol, on the table's threads. ``against_first``: every
    chunk times the first plan's model in the same rounds, and each is stated against
    it (speed-ups over it hold when the machine changes speed)."""
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        start = time.perf_counter()
        for i, plan in enumerate(plans):
            with quiet_root_logger():
                meta = table.device_meta
                data = whole_model_bytes(
                    model,
                    plan,
                    example_inputs,
                    calibration_data,
                    half=meta.half,
                    qdq=meta.int8_qdq,
                )
            files.append(Path(tmp) / f"{i}.onnx")
            files[-1].write_bytes(data)
            if (i + 1) % 10 == 0 or i + 1 == len(plans):
                print(
                    f"exported {i + 1}/{len(plans)} ({time.perf_counter() - start:.0f} s)",
                    file=sys.stderr,
                )
        reference = files[0] if against_first and files else None
        device = table_device(table)
        return measure_models(files, device=device, label=label, reference=reference)


def table_device(table: DeviceTable) -> LocalDevice:
    """The device of this machine that measures ``table``'s models again: the local
    device it names, or (a table from elsewhere) this CPU at the table's threads."""
    found = local_device(table.name)
    if found is not None:
        return found
    return LocalDevice(table.name, threads=table.device_meta.threads or 1)
