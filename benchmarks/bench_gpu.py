"""The GPU path in one call: tables, a trial's training and energy on a lent GPU.

A GPU machine is lent for minutes and runs one prepared command, with torch,
torchvision, onnx, onnxruntime (CPU), numpy, pandas and nvidia-ml-py and nothing from a
package index. So this runs in three steps:

1. ``prepare DIR`` (here) writes into DIR, a folder that travels to the GPU machine
   (``.dev/gpu`` by default: ignored by git, carried by the device tool's ``carry``):
   - four op bundles, weights stripped: an image space (torchvision MobileNetV2 at
     224x224, prune 0 or 0.5 per group, 16 or 32-bit weights) and the text-student
     space (all-MiniLM-L6-v2's shape: 6 layers, hidden 384, 64 tokens; heads and FFN
     widths cut by 0-75%, up to half the layers dropped, 16 or 32-bit weights per
     layer), each at batch 1 and 32, written as a GPU runs them (``half``: 16-bit
     layers FP16, the rest FP32);
   - ``torch_pruning.zip``, the one package ``frontier.spaces`` needs that the GPU
     machine lacks (imported from the zip there);
   - ``cpu.json``: this CPU's figures for the training work of phase 2 below (seconds
     per step, measured over a few steps, and the trial's steps);
   - ``prepare.json``: what was written and its size (everything that must travel).
2. ``measure DIR --out OUT`` (there) runs under one deadline (``--deadline-s``, 450 by
   default), each phase with its own error handling and budget, and writes as it goes
   (``OUT/measure.json`` after every item; the tables' CSVs chunk by chunk, packed into
   ``OUT/tables.tgz`` after each bundle: two files, as the device tool returns at most
   eight), so a run killed at any point still returns what it measured:

   0. self-test: versions, the NVML energy counter, and a captured CUDA graph's replay
      against eager PyTorch (image FP32 and FP16, text FP16 whole models);
   1. the GPU tables: ``runner_torch.py`` on each bundle (CUDA graph replays timed by
      CUDA events, whole models' energy from NVML), one process per bundle;
   2. one trial's training on the GPU (MobileNetV2 and ResNet-50 as the Fashion-MNIST
      scenarios train them, the text student distilled from cached logits), through
      Frontier's own loop (``distill``) with bf16 autocast, against this CPU's figure,
      host syncs per step counted with ``torch.cuda.set_sync_debug_mode``;
   3. energy per inference: MobileNetV2 and ResNet-50 at 224x224, FP32 and FP16, batch 1
      and 32, captured graphs, NVML over 2-second windows.

   Estimated on one H100 from the code (per-model costs from the 2026-11-27 H200
   figures in DESIGN.md): phase 0 about 20 s (CUDA start, cuDNN's first plans); phase
   1 about 50-70 s a bundle at 0.05 s a model warm-up, 3 rounds of 0.02 s and, for each
   of 37 whole models, 20 eager runs and a 0.25 s energy window (about 240 s in all,
   capped at 260 s); phase 2 about 60 s (cuDNN autotuning and 2 x 20 warm-up steps
   included; capped at 100 s); phase 3 about 40 s (8 captures, 3 s each). In all about
   6 minutes, under the 8 a lease allows; the deadline stops whatever runs past it.
3. ``report DIR OUT`` (here) imports each table, checks its predictions against its
   validation models' graph replays and writes ``benchmarks/report-logs/gpu-tables.json``
   (per space and batch: plans within +/-10%, MAPE, Kendall tau, n) and
   ``benchmarks/report-logs/accelerator.json`` (per model: a trial's training time on
   the GPU and on this CPU and their ratio, ``speedup``; host syncs per step; energy).

``--quick`` (``prepare`` and ``measure``) makes everything small, and ``measure
--device cpu`` runs it on this machine with the wall clock (no graphs, no NVML): the
dry run a test runs, in about a minute, so the script cannot rot before a GPU comes.

Run: python benchmarks/bench_gpu.py prepare .dev/gpu
     (on the GPU machine) python benchmarks/bench_gpu.py measure .dev/gpu --out $OUT
     python benchmarks/bench_gpu.py report .dev/gpu OUT
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LOGS = HERE / "report-logs"
#: the spaces and batches of the GPU tables
SPACES = ("image", "text")
BATCHES = (1, 32)
#: the dry run's: PyTorch's FP16 kernels on a CPU are slow, and a CPU is not what it checks
QUICK_BATCHES = (1, 2)
#: seconds ``measure`` may take in all, and the most each phase may take of it
DEADLINE_S = 450
PHASE_S = {"selftest": 40, "tables": 260, "training": 100, "energy": 60}
#: whole models per bundle: calibration (the table's sum against whole models) and
#: validation (the plans the table is checked on)
CALIBRATION, VALIDATION = 12, 24
#: a trial's training, as the scenarios' configs run it at the full rung
TRAINING = {
    # model: (trial steps, batch, timed steps on a GPU, timed steps on this CPU)
    "mobilenet_v2": (1440, 128, 60, 3),  # mobilenetv2-flops40: 60 steps x full_factor 24
    "resnet50": (320, 128, 30, 2),  # resnet50-edge: 40 steps x full_factor 8
    "text-student": (600, 32, 60, 3),  # text-student: 150 steps x full_factor 4
}
WARMUP_STEPS = 20
#: the GPU tables, packed into one file of ``measure``'s OUT
TABLES_TGZ = "tables.tgz"
MINILM = {
    "vocab_size": 30522,
    "max_positions": 512,
    "hidden": 384,
    "layers": 6,
    "heads": 12,
    "ffn": 1536,
    "head_dim": 32,
    "length": 64,
    "classes": 3,
}
QUICK_TEXT = {
    "vocab_size": 50,
    "max_positions": 12,
    "hidden": 96,
    "layers": 3,
    "heads": 4,
    "ffn": 64,
    "head_dim": 24,
    "length": 12,
    "classes": 3,
}


# ---------------------------------------------------------------------------- prepare


def _text_shape(quick: bool) -> dict[str, int]:
    return QUICK_TEXT if quick else MINILM


def _text_model(quick: bool) -> tuple[Any, Any, Any]:
    """The text student's teacher shape (untrained, seeded), example ids, its options."""
    import torch

    from frontier.spaces import SpaceOptions, TextTransformer, TransformerShape

    s = _text_shape(quick)
    shape = TransformerShape(
        vocab_size=s["vocab_size"],
        max_positions=s["max_positions"],
        hidden=s["hidden"],
        heads=(s["heads"],) * s["layers"],
        ffn=(s["ffn"],) * s["layers"],
        head_dim=s["head_dim"],
        num_classes=s["classes"],
    )
    torch.manual_seed(0)
    model = TextTransformer(shape).eval()
    ids = torch.randint(1, s["vocab_size"], (1, s["length"]))
    ratios = [0.0, 0.5] if quick else [0.0, 0.25, 0.5, 0.75]
    options = SpaceOptions(
        prune_ratios=(0.0,),
        weight_bits=(16, 32),
        act_bits=(32,),
        ties={f"layers.{i}": rf"layers\.{i}\..*" for i in range(s["layers"])},
        techniques={
            "transformer-prune": {"head_ratios": ratios, "ffn_ratios": ratios},
            "layer-drop": {"max_share": 0.5},
        },
    )
    return model, ids, options


def _image_model(quick: bool) -> tuple[Any, Any, Any]:
    """torchvision MobileNetV2 (untrained, seeded: latency needs no training) at 224x224
    (quick: a three-layer stand-in at 16x16), prune 0 or 0.5 per group, 16 or 32-bit
    weights."""
    import torch
    import torchvision

    from frontier.spaces import SpaceOptions

    torch.manual_seed(0)
    if quick:  # a few of MobileNetV2's kinds of layer, in seconds
        from torch import nn

        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU6(),
            nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16), nn.ReLU6(),
            nn.Conv2d(16, 24, 1), nn.BatchNorm2d(24),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 10),
        ).eval()  # fmt: skip
        x = torch.randn(1, 3, 16, 16)
    else:
        model = torchvision.models.mobilenet_v2(num_classes=10).eval()
        x = torch.randn(1, 3, 224, 224)
    options = SpaceOptions(prune_ratios=(0.0, 0.5), weight_bits=(16, 32), act_bits=(32,))
    return model, x, options


def _bundles(folder: Path, quick: bool) -> dict[str, Any]:
    from frontier.latency_models import write_bundle
    from frontier.spaces import discover

    written = {}
    for space in SPACES:
        model, x, options = (_image_model if space == "image" else _text_model)(quick)
        found = discover(model, x, options)
        for batch in QUICK_BATCHES if quick else BATCHES:
            name = f"{space}-b{batch}"
            path = folder / f"{name}.zip"
            start = time.perf_counter()
            manifest = write_bundle(
                path,
                model=model,
                example_inputs=x,
                space=found,
                name=name,
                calibration=8 if quick else CALIBRATION,
                validation=4 if quick else VALIDATION,
                batch_size=batch,
                half=True,
                progress=lambda *a: None,
            )
            written[name] = {
                "ops": manifest["op_count"],
                "models": len(manifest["models"]),
                "bytes": path.stat().st_size,
                "build_s": round(time.perf_counter() - start, 1),
            }
            print(f"wrote {path}: {written[name]}", file=sys.stderr)
    return written


def _zip_package(name: str, out: Path) -> None:
    """An installed pure-Python package as a zip the GPU machine imports from."""
    import importlib

    pkg = Path(importlib.import_module(name).__file__ or "").parent
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(pkg.rglob("*.py")):
            zf.write(f, f.relative_to(pkg.parent))


def prepare(folder: Path, *, quick: bool = False) -> dict[str, Any]:
    """Bundles, the package the GPU machine lacks and this CPU's training figures."""
    folder.mkdir(parents=True, exist_ok=True)
    bundles = _bundles(folder, quick)
    _zip_package("torch_pruning", folder / "torch_pruning.zip")
    cpu = {"machine": _machine("cpu"), "training": {}}
    for model in TRAINING:
        cpu["training"][model] = _guarded(lambda m=model: train_trial(m, "cpu", quick=quick))
        print(f"cpu training {model}: {cpu['training'][model]}", file=sys.stderr)
    (folder / "cpu.json").write_text(json.dumps(cpu, indent=1))
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    info = {
        "quick": quick,
        "bundles": bundles,
        "travel_bytes": size,
        "travel_mib": round(size / 2**20, 2),
    }
    (folder / "prepare.json").write_text(json.dumps(info, indent=1))
    print(f"wrote {folder}: {info['travel_mib']} MiB to carry", file=sys.stderr)
    return info


# ---------------------------------------------------------------------------- shared


def _frontier_importable(folder: Path) -> None:
    """Make ``frontier.*`` importable from this checkout without installing it (the GPU
    machine has no package index): a namespace folder of links to the part folders,
    and ``torch_pruning`` from the zip ``prepare`` wrote where it is not installed."""
    try:
        import frontier.spaces  # noqa: F401

        return
    except ImportError:
        pass
    shim = Path(tempfile.mkdtemp(prefix="frontier-shim-")) / "frontier"
    shim.mkdir()
    for part in ("spaces", "search", "evaluators", "latency_models", "experiments"):
        (shim / part).symlink_to(ROOT / part, target_is_directory=True)
    sys.path.insert(0, str(shim.parent))
    try:
        import torch_pruning  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(folder / "torch_pruning.zip"))


def _machine(device: str) -> dict[str, Any]:
    import platform

    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "device": device,
    }
    with contextlib.suppress(Exception):
        import onnx
        import onnxruntime

        info.update(onnx=onnx.__version__, onnxruntime=onnxruntime.__version__)
    if device.startswith("cuda"):
        info.update(
            gpu=torch.cuda.get_device_name(device),
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
        )
    return info


def _guarded(fn: Callable[[], Any]) -> Any:
    """``fn()``, or what went wrong (one phase's error never stops the others)."""
    try:
        return fn()
    except Exception as err:
        traceback.print_exc()
        return {
            "error": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
        }


# ---------------------------------------------------------------------------- training


def _image_loaders(batch: int, cuda: bool, samples: int) -> Any:
    """Fashion-MNIST-shaped batches (1x28x28, 10 classes), seeded: a step's time does not
    depend on the pixels, and the data set does not travel."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    gen = torch.Generator().manual_seed(0)
    x = torch.rand(samples, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (samples,), generator=gen)
    data = TensorDataset(x, y)
    train = DataLoader(
        data, batch_size=batch, shuffle=True, pin_memory=cuda, drop_last=True, generator=gen
    )
    return type("Loaders", (), {"train": train, "val": train})()


def _text_loaders(batch: int, cuda: bool, samples: int, quick: bool) -> tuple[Any, Any]:
    """Tweet-like texts (4 to the full length, padded with 0), as the text task batches
    them (by length, each batch cut to its longest), and their ids for cached logits."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from frontier.experiments import LengthBatches, trim

    s = _text_shape(quick)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, s["vocab_size"], (samples, s["length"]), generator=gen)
    lengths = torch.randint(4, s["length"] + 1, (samples,), generator=gen)
    ids[torch.arange(s["length"])[None, :] >= lengths[:, None]] = 0
    y = torch.randint(0, s["classes"], (samples,), generator=gen)
    sampler = LengthBatches(ids, batch, gen)
    train = DataLoader(
        TensorDataset(ids, y), batch_sampler=sampler, collate_fn=trim, pin_memory=cuda
    )
    return type("Loaders", (), {"train": train, "val": train})(), ids


def _trial_models(name: str, quick: bool, samples: int, batch: int, cuda: bool) -> tuple:
    """The teacher, a seeded trial's student (a plan of the scenario's space applied)
    and the loaders of one trial's training."""
    import torch

    from frontier.spaces import CompressionPlan, SpaceOptions, apply_plan, discover

    if name == "text-student":
        from frontier.experiments import CachedLogits

        model, x, options = _text_model(quick)
        loaders, ids = _text_loaders(batch, cuda, samples, quick)
        space = discover(model, x, options)
        plan = space.sample(3)
        gen = torch.Generator().manual_seed(1)
        teacher = CachedLogits(
            model, ids, torch.randn(len(ids), _text_shape(quick)["classes"], generator=gen)
        )
        student = apply_plan(model, plan, x)
        return teacher, student, loaders, plan
    from frontier.experiments import adapt_model

    torch.manual_seed(0)
    model = adapt_model(name)
    loaders = _image_loaders(batch, cuda, samples)
    calib = [x for x, _ in list(loaders.train)[:2]]
    with torch.no_grad():  # batch norm's statistics of the data, as a trained model has
        model.train()
        for x in calib * 3:
            model(x)
    model.eval()
    x = calib[0][:2]
    options = SpaceOptions(prune_ratios=(0.0, 0.25, 0.5), weight_bits=(8, 32), act_bits=(8, 32))
    space = discover(model, x, options)
    names = [q.name for q in space.layers]
    # a compressed trial: every group pruned by a quarter, every layer fake-quantized
    plan = CompressionPlan(
        prune={g.name: 0.25 for g in space.groups},
        weight_bits=dict.fromkeys(names, 8),
        act_bits=dict.fromkeys(names, 8),
    )
    student = apply_plan(model, plan, x, calibration_data=calib)
    return model, student, loaders, plan


def train_trial(name: str, device: str, *, quick: bool = False) -> dict[str, Any]:
    """Seconds per step of one trial's training of ``name`` on ``device`` through
    ``distill`` (Frontier's loop: Adam, distillation from the teacher, the student's
    fake quantization), after warm-up steps; on a GPU with bf16 autocast, and host
    syncs counted over the timed steps."""
    import torch

    from frontier.evaluators import distill
    from frontier.spaces import Accelerator

    trial_steps, batch, gpu_steps, cpu_steps = TRAINING[name]
    cuda = device.startswith("cuda")
    if quick:
        batch, gpu_steps, cpu_steps = 4, 2, 1
    steps = gpu_steps if cuda else cpu_steps
    warm = (WARMUP_STEPS if cuda else 1) if not quick else 1
    samples = batch * (steps + warm + 2)
    teacher, student, loaders, plan = _trial_models(name, quick, samples, batch, cuda)
    bf16 = cuda and torch.cuda.is_bf16_supported()
    acc = Accelerator(device, bf16=bf16, name=device)
    teacher, student = teacher.to(device), student.to(device)
    kw = {"temperature": 2.0, "alpha": 0.5, "lr": 1e-4, "seed": 0, "accelerator": acc}
    distill(student, teacher, loaders, steps=warm, **kw)  # cuDNN plans, allocator

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    sync()
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            losses = distill(student, teacher, loaders, steps=steps, **kw)
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
    sync()
    elapsed = time.perf_counter() - start
    syncs = sum("synchroniz" in str(w.message) for w in caught)
    per_step = elapsed / steps
    return {
        "device": device,
        "bf16": bf16,
        "batch": batch,
        "steps_timed": steps,
        "s_per_step": round(per_step, 5),
        "trial_steps": trial_steps,
        "trial_s": round(per_step * trial_steps, 2),
        # one read at the end of the loop (its losses) is by design
        "host_syncs": syncs if cuda else None,
        "host_syncs_per_step": round(syncs / steps, 3) if cuda else None,
        "final_loss": round(losses[-1], 4) if losses else None,
        "plan": plan.to_json() if len(plan.to_json()) < 2000 else "(long)",
    }


# ---------------------------------------------------------------------------- measure


class Recorder:
    """``OUT/measure.json``, written again after every item."""

    def __init__(self, out: Path, deadline_s: float) -> None:
        self.path = out / "measure.json"
        self.end = time.monotonic() + deadline_s
        self.data: dict[str, Any] = {"deadline_s": deadline_s, "phases": {}}
        self.save()

    def left(self) -> float:
        return self.end - time.monotonic()

    def put(self, phase: str, key: str, value: Any) -> None:
        self.data["phases"].setdefault(phase, {})[key] = value
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[float]:
        """A phase's budget: its cap or what the deadline leaves, whichever is less."""
        budget = min(PHASE_S[name], self.left())
        start = time.monotonic()
        print(f"== phase {name} (budget {budget:.0f} s)", file=sys.stderr, flush=True)
        try:
            yield budget
        except Exception as err:
            traceback.print_exc()
            self.put(name, "error", f"{type(err).__name__}: {err}")
        finally:
            self.put(name, "wall_s", round(time.monotonic() - start, 1))


def _runners() -> tuple[Any, Any]:
    sys.path.insert(0, str(ROOT / "latency_models"))
    import runner
    import runner_torch

    return runner, runner_torch


def selftest(folder: Path, device: str, rec: Recorder) -> None:
    """Versions, NVML, and each bundle's first calibration model replayed from its
    captured graph against eager PyTorch."""
    import numpy as np
    import torch

    runner, runner_torch = _runners()
    rec.put("selftest", "machine", _machine(device))
    cuda = device.startswith("cuda")
    if cuda:
        counter = runner_torch.open_energy(device)
        rec.put("selftest", "nvml_mj", counter.read_mj() if counter else None)
    backend = runner_torch.GraphBackend(device, energy=(lambda: 0.0) if not cuda else None)
    for name in ("image-b1", "text-b1"):
        path = folder / f"{name}.zip"
        manifest = runner.read_manifest(path)
        picks = [m for m in manifest["models"] if m["kind"] == "calibration"][:1]
        picks += [m for m in manifest["models"] if m.get("precision") == "fp16"][:1]
        picks += [m for m in manifest["models"] if m["kind"] == "baseline"][:1]
        with zipfile.ZipFile(path) as zf:
            for entry in picks:
                data = zf.read(entry["file"])
                run, feeds = backend.open(data, entry, batch_size=4, rng=np.random.default_rng(0))
                got = [o.clone() for o in run()]
                eager = getattr(run, "eager", run)()
                err = max(
                    float((g.float() - e.float()).abs().max() / (e.float().abs().max() + 1e-12))
                    for g, e in zip(got, eager, strict=True)
                )
                rec.put(
                    "selftest",
                    f"{name}:{entry['id']}",
                    {
                        "kind": entry["kind"],
                        "precision": entry.get("precision", ""),
                        "replay_vs_eager_rel_err": err,
                        "graph": cuda,
                    },
                )
                del run, feeds
                if cuda:
                    torch.cuda.empty_cache()


def tables(folder: Path, out: Path, device: str, rec: Recorder, budget: float, quick: bool) -> None:
    """Each bundle measured by ``runner_torch.py`` in its own process (a GPU fault in
    one stops only that one), under what the phase's budget leaves."""
    end = time.monotonic() + budget
    # the runner writes four files a table; the device tool returns at most eight files
    # from OUT, so the tables are written beside it and packed into one archive there
    # after each bundle (a run killed mid-bundle still returns the ones before)
    work = Path(tempfile.mkdtemp(prefix="bench-gpu-tables-"))
    batches = QUICK_BATCHES if quick else BATCHES
    names = [f"{s}-b{b}" for b in batches for s in SPACES]  # batch 1 of both first
    for k, name in enumerate(names):
        left = end - time.monotonic()
        if left < 5:
            rec.put("tables", name, {"skipped": "no time left"})
            continue
        # an even share of what is left, so one slow bundle does not starve the others
        share = left / (len(names) - k)
        csv_path = work / f"{name}.csv"
        args = [
            sys.executable,
            str(ROOT / "latency_models" / "runner_torch.py"),
            str(folder / f"{name}.zip"),
            "--device",
            f"gpu-{name}",
            "--out",
            str(csv_path),
            "--torch-device",
            device,
        ]
        if quick:
            args += ["--rounds", "1", "--round-s", "0.002"]
        else:
            args += [
                "--rounds",
                "3",
                "--round-s",
                "0.02",
                "--warmup-s",
                "0.05",
                "--energy-window-s",
                "0.25",
            ]
        start = time.monotonic()
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=share)
            status = {"rc": done.returncode, "stderr": done.stderr.strip().splitlines()[-3:]}
        except subprocess.TimeoutExpired:
            status = {"rc": "timeout", "timeout_s": round(share)}
        status["wall_s"] = round(time.monotonic() - start, 1)
        status["rows"] = _count_rows(csv_path)
        _pack(work, out / TABLES_TGZ)
        rec.put("tables", name, status)


def _pack(folder: Path, archive: Path) -> None:
    """Every file of ``folder`` into the gzipped tar ``archive``, replaced whole."""
    import tarfile

    tmp = archive.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for f in sorted(folder.iterdir()):
            tar.add(f, arcname=f.name)
    tmp.replace(archive)


def _count_rows(path: Path) -> dict[str, int]:
    if not path.exists():
        return {}
    counts: dict[str, int] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            key = f"{row['kind']}:{row['status']}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def training(device: str, rec: Recorder, budget: float, quick: bool) -> None:
    end = time.monotonic() + budget
    for name in TRAINING:
        if end - time.monotonic() < 5:
            rec.put("training", name, {"skipped": "no time left"})
            continue
        rec.put("training", name, _guarded(lambda n=name: train_trial(n, device, quick=quick)))
        if device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()


def energy(device: str, rec: Recorder, budget: float, quick: bool) -> None:
    """ms and mJ per inference of uncompressed MobileNetV2 and ResNet-50, FP32 and FP16,
    batch 1 and 32, as captured graphs (on a CPU: eager, no energy)."""
    import torch

    _, runner_torch = _runners()
    end = time.monotonic() + budget
    cuda = device.startswith("cuda")
    counter = runner_torch.open_energy(device) if cuda else None
    side = 32 if quick else 224
    batches = QUICK_BATCHES if quick else BATCHES
    torch.backends.cudnn.benchmark = True
    for arch in ("mobilenet_v2", "resnet50"):
        for dtype in (torch.float32, torch.float16):
            for batch in batches:
                key = f"{arch}:{str(dtype).removeprefix('torch.')}:b{batch}"
                if end - time.monotonic() < 3:
                    rec.put("energy", key, {"skipped": "no time left"})
                    continue
                rec.put(
                    "energy",
                    key,
                    _guarded(
                        lambda a=arch, d=dtype, b=batch: _energy_one(
                            runner_torch, a, d, b, side, device, counter, quick
                        )
                    ),
                )


def _energy_one(
    rt: Any, arch: str, dtype: Any, batch: int, side: int, device: str, counter: Any, quick: bool
) -> dict[str, Any]:
    import torch
    import torchvision

    cuda = device.startswith("cuda")
    if not cuda and dtype == torch.float16:
        return {"skipped": "FP16 is a GPU's"}
    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(num_classes=10).eval().to(device, dtype)
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, side, side, device=device, dtype=dtype)
    x = x.contiguous(memory_format=torch.channels_last)

    def eager() -> Any:
        with torch.inference_mode():
            return model(x)

    run = rt.capture(eager) if cuda else eager
    timer = rt.CudaEventTimer() if cuda else rt.runner.wall_clock_ms
    for _ in range(10):
        run()
    windows = []
    for _ in range(3 if quick else 5):
        windows.append(statistics.median(timer(run) for _ in range(5 if quick else 50)))
    out: dict[str, Any] = {"ms": round(statistics.median(windows), 4)}
    if counter is not None:
        sync = lambda: torch.cuda.synchronize(device)  # noqa: E731
        mj, host_ms = rt.energy_per_run(run, counter.read_mj, window_s=2.0, sync=sync)
        out.update(
            mj_per_inference=round(mj / batch, 3),
            mj_per_run=round(mj, 3),
            watts=round(mj / host_ms, 1),
            host_ms=round(host_ms, 4),
        )
    return out


def measure(
    folder: Path,
    out: Path,
    *,
    device: str = "cuda",
    quick: bool = False,
    deadline_s: float = DEADLINE_S,
) -> dict[str, Any]:
    """The four phases under one deadline; ``OUT/measure.json`` after every item."""
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    _frontier_importable(folder)
    rec = Recorder(out, deadline_s)
    rec.data["prepare"] = json.loads((folder / "prepare.json").read_text())
    with rec.phase("selftest"):
        selftest(folder, device, rec)
    with rec.phase("tables") as budget:
        tables(folder, out, device, rec, budget, quick)
    with rec.phase("training") as budget:
        training(device, rec, budget, quick)
    with rec.phase("energy") as budget:
        energy(device, rec, budget, quick)
    rec.data["left_s"] = round(rec.left(), 1)
    rec.save()
    return rec.data


# ---------------------------------------------------------------------------- report


def report(folder: Path, results: Path, out_dir: Path = LOGS) -> tuple[dict, dict]:
    """Import the GPU tables, validate each on its validation models; the training and
    energy figures beside this CPU's; ``gpu-tables.json`` and ``accelerator.json``."""
    from frontier.latency_models import DeviceStore, LatencyModel, error_summary

    measured = json.loads((results / "measure.json").read_text())
    prep = json.loads((folder / "prepare.json").read_text())
    cpu = json.loads((folder / "cpu.json").read_text())
    machine = measured["phases"].get("selftest", {}).get("machine", {})
    store = DeviceStore(Path(tempfile.mkdtemp(prefix="gpu-store-")))
    tables_out: dict[str, Any] = {
        "machine": machine,
        "travel_mib": prep["travel_mib"],
        "quick": prep["quick"],
        "selftest": {
            k: v for k, v in measured["phases"].get("selftest", {}).items() if k != "machine"
        },
        "tables": {},
    }
    import tarfile

    tables_dir = Path(tempfile.mkdtemp(prefix="gpu-tables-"))
    if (results / TABLES_TGZ).exists():
        with tarfile.open(results / TABLES_TGZ) as tar:
            tar.extractall(tables_dir, filter="data")
    for csv_path in sorted(tables_dir.glob("*.csv")):
        name = csv_path.stem
        entry: dict[str, Any] = {"rows": _count_rows(csv_path)}
        try:
            table = store.import_table(csv_path, name=f"gpu-{name}", allow_degraded=True)
            lm = LatencyModel(table)
            pred, meas = [], []
            for row in table.whole_models("validation"):
                specs = [lm.spec_of(k) for k in table.models[row.key]["op_keys"]]
                pred.append(lm.predict_ops(specs).latency_ms)
                meas.append(row.median_ms)
            base = [r for r in table.rows if r.kind == "baseline" and r.status == "ok"]
            entry.update(
                space=name.split("-")[0],
                batch=table.device_meta.batch_size or 0,
                validation=error_summary(pred, meas) if len(pred) > 1 else {"samples": len(pred)},
                median_validation_ms=round(statistics.median(meas), 4) if meas else None,
                baseline_energy_mj=base[0].energy_mj if base else None,
                import_warnings=table.meta.get("import_warnings", []),
            )
        except Exception as err:
            entry["error"] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
        tables_out["tables"][name] = entry
    accel: dict[str, Any] = {
        "machine": machine,
        "quick": prep["quick"],
        "models": {},
        "energy": measured["phases"].get("energy", {}),
    }
    for model, gpu in measured["phases"].get("training", {}).items():
        if not isinstance(gpu, dict) or model in ("wall_s", "error"):
            continue
        here = cpu["training"].get(model, {})
        row: dict[str, Any] = {"gpu": gpu, "cpu": here}
        if "trial_s" in gpu and "trial_s" in here:
            row["trial_s_gpu"], row["trial_s_cpu"] = gpu["trial_s"], here["trial_s"]
            row["speedup_gpu_over_cpu"] = round(here["trial_s"] / gpu["trial_s"], 2)
            row["host_syncs_per_step"] = gpu.get("host_syncs_per_step")
        accel["models"][model] = row
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gpu-tables.json").write_text(json.dumps(tables_out, indent=1, default=str))
    (out_dir / "accelerator.json").write_text(json.dumps(accel, indent=1, default=str))
    print(f"wrote {out_dir / 'gpu-tables.json'} and {out_dir / 'accelerator.json'}")
    return tables_out, accel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_gpu", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="write the bundles and this CPU's figures (here)")
    p.add_argument("folder", type=Path, nargs="?", default=ROOT / ".dev" / "gpu")
    p.add_argument("--quick", action="store_true", help="small spaces: the dry run")
    m = sub.add_parser("measure", help="the four phases (on the GPU machine)")
    m.add_argument("folder", type=Path)
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--device", default="cuda", help="cuda (default), or cpu: the dry run")
    m.add_argument("--quick", action="store_true")
    m.add_argument("--deadline-s", type=float, default=DEADLINE_S)
    r = sub.add_parser("report", help="import, validate and write the two JSON files (here)")
    r.add_argument("folder", type=Path)
    r.add_argument("results", type=Path, help="measure's --out folder")
    r.add_argument("--out-dir", type=Path, default=LOGS)
    args = parser.parse_args(argv)
    if args.step == "prepare":
        prepare(args.folder, quick=args.quick)
    elif args.step == "measure":
        measure(
            args.folder, args.out, device=args.device, quick=args.quick, deadline_s=args.deadline_s
        )
    else:
        report(args.folder, args.results, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
