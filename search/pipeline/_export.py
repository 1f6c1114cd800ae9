"""A pipeline front member as a deployment reads it: each stage's ONNX model and plan in
a folder of its own, and ``pipeline.json`` saying which stage runs where, in which
order, what each reads and what is copied between devices, with the schedule the tables
predicted. ``frontier pick`` adds ``run_pipeline.py``, a short example that runs it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ..config._pipeline import FRAME
from ..config._uri import TrackingError

#: what ``pipeline.json`` says it is
FORMAT = "frontier-pipeline"
VERSION = 1
MANIFEST = "pipeline.json"
EXAMPLE = "run_pipeline.py"


def manifest(search: Any, trial: Any) -> dict[str, Any]:
    """``pipeline.json`` of ``trial``: stages, placements, order, copies and the
    predicted schedule (its stages' latencies as the trial recorded them)."""
    from ._price import schedule

    pipeline = search.pipeline
    latency = {s: trial.values[f"{s}.latency_ms"] for s in search.stage_names}
    est = schedule(
        search.config, trial.placement, latency, {}, search.output_bytes, search.frame_bytes
    )
    frame_device = pipeline.frame_device or search.config.listed_devices()[0]
    stages = []
    for s in pipeline.stages:
        device = trial.placement[s.name]
        here = search.config.typed.device(device).local
        stages.append(
            {
                "name": s.name,
                "model": f"{s.name}/model.onnx",
                "plan": f"{s.name}/plan.json",
                "device": device,
                "runtime": here.kind if here else "",
                "threads": here.threads if here else 1,
                "reads": list(s.reads),
                "output_bytes": search.output_bytes[s.name],
            }
        )
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": search.config.name,
        "trial": trial.number,
        "frame": {"device": frame_device, "bytes": search.frame_bytes, "input": FRAME},
        "order": [s.name for s in pipeline.stages],
        "stages": stages,
        "copies": [
            {"from": c.source, "to": c.target, "link": c.link, "bytes": c.size_bytes}
            for c in est.copies
        ],
        "predicted": {
            "latency_ms@frame": trial.values["latency_ms@frame"],
            "energy_mj@frame": trial.values.get("energy_mj@frame"),
            "schedule_ms": {n: [est.start_ms[n], est.end_ms[n]] for n in est.start_ms},
            "critical_path": list(est.critical),
        },
    }


def export_member(search: Any, trial: Any, folder: Path, done: dict[str, Path]) -> list[Path]:
    """Write ``trial``'s stages (``STAGE/model.onnx``, ``STAGE/plan.json``) and
    ``pipeline.json`` under ``folder``; ``done`` (stage and plan -> a model written
    before) spares exporting, and fine-tuning, a stage's plan twice."""
    files = []
    for s in search.stage_names:
        plan = trial.plans[s]
        stage_dir = folder / s
        stage_dir.mkdir(parents=True, exist_ok=True)
        model = stage_dir / "model.onnx"
        key = f"{s}:{json.dumps(plan, sort_keys=True)}"
        if key in done:
            shutil.copyfile(done[key], model)
        else:
            search.runners[s].export(plan, 0, model)
            done[key] = model
        (stage_dir / "plan.json").write_text(json.dumps(plan, indent=1))
        files += [model, stage_dir / "plan.json"]
    path = folder / MANIFEST
    path.write_text(json.dumps(manifest(search, trial), indent=1))
    return [*files, path]


def read_manifest(path: Path) -> dict[str, Any]:
    """A ``pipeline.json``, checked: ``TrackingError`` names the file and what is wrong."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise TrackingError(f"{path}: not a pipeline manifest ({err})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TrackingError(f"{path}: not a pipeline manifest (format {FORMAT!r} expected)")
    if data.get("version") != VERSION:
        raise TrackingError(
            f"{path}: manifest version {data.get('version')!r}; this Frontier reads {VERSION}"
        )
    return data


#: ``run_pipeline.py``: what a deployment does with the folder, in a few lines
RUN_EXAMPLE = '''"""Run a pipeline Frontier picked: each stage in ONNX Runtime (or OpenVINO where
pipeline.json says so), one thread per device, a stage starting once what it reads is
done. Feeds seeded random frames of each stage's input shape; put your camera's frames
and your stages' real hand-over in their place. Needs numpy and onnxruntime."""

import json
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

HERE = Path(__file__).resolve().parent
SPEC = json.loads((HERE / "pipeline.json").read_text())
TYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}


def open_stage(stage):
    """A call that runs the stage's model once on seeded random inputs."""
    path = str(HERE / stage["model"])
    if stage["runtime"] == "openvino":
        import openvino as ov

        compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_NUM_THREADS": stage["threads"]})
        request = compiled.create_infer_request()
        shapes = [(i.get_partial_shape().to_shape(), np.float32) for i in compiled.inputs]
        feeds = [np.random.default_rng(0).standard_normal(s).astype(t) for s, t in shapes]
        return lambda: request.infer(feeds)
    options = ort.SessionOptions()
    options.intra_op_num_threads = stage["threads"]
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(
            TYPES.get(i.type, np.float32)
        )
        for i in session.get_inputs()
    }
    return lambda: session.run(None, feeds)


def frame(runs):
    """One frame through the stages; its time in ms."""
    done = {s["name"]: threading.Event() for s in SPEC["stages"]}
    devices = {}
    for s in SPEC["stages"]:
        devices.setdefault(s["device"], []).append(s)

    def work(stages):
        for s in stages:
            for r in s["reads"]:
                if r in done:
                    done[r].wait()
            runs[s["name"]]()
            done[s["name"]].set()

    first, *others = devices.values()
    threads = [threading.Thread(target=work, args=(q,)) for q in others]
    start = time.perf_counter()
    for t in threads:
        t.start()
    work(first)  # the first device's stages in this thread
    for t in threads:
        t.join()
    return (time.perf_counter() - start) * 1e3


if __name__ == "__main__":
    runs = {s["name"]: open_stage(s) for s in SPEC["stages"]}
    times = [frame(runs) for _ in range(200)][50:]
    print(f"{SPEC['name']} trial {SPEC['trial']}: median {np.median(times):.4g} ms a frame "
          f"(predicted {SPEC['predicted']['latency_ms@frame']:.4g} ms)")
'''
