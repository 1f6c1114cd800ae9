"""A pipeline of three users' own models on one frame: do the frame's predictions hold
when the pipeline runs here, and does placing a stage on a second runtime pay?

Three stages read the same 32x32 Fashion-MNIST frame: MNASNet 0.5, MobileNetV3-Small
and ResNet-18 (``benchmarks/own_model``, trained here for ``--epochs``), each may run on
``local-cpu`` (ONNX Runtime, 1 thread) or ``local-openvino`` (OpenVINO, 1 thread, FP32):
two runtimes that, on this 2-core machine, can run two stages at once. The joint search
scores plans at the proxy rung (no fine-tuning: latency does not depend on it), then:

- **Predictions hold**: the front and the uncompressed pipeline are run here frame by
  frame (one thread per device) and each measured frame time is set beside the tables'
  ``latency_ms@frame``, in ms and in speed-up over the uncompressed pipeline;
- **Placement pays**: the uncompressed stages are run in two placements, all on
  ``local-cpu`` and the placement the tables price fastest, side by side in the same
  rounds; the measured gain is set beside the predicted one;
- **The ceiling**: the uncompressed pipeline is run twice in the same rounds, so a miss
  can be told from the machine's own noise.

Writes ``benchmarks/report-logs/pipeline.json``. Run on a quiet machine:

    python benchmarks/bench_pipeline.py [--trials 40] [--epochs 1] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
OUT = HERE / "report-logs" / "pipeline.json"


def config(epochs: int, trials: int, store: Path) -> dict:
    space = {"prune_ratios": [0.0, 0.25, 0.5], "weight_bits": [8, 32], "act_bits": [8, 32]}
    stage = lambda name, task: {  # noqa: E731
        "name": name,
        "task": {"name": task, "options": {"epochs": epochs}},
        "space": space,
    }
    return {
        "name": "bench-pipeline",
        "plugins": ["user_task"],
        "devices": ["local-cpu", "local-openvino"],
        "device_store": str(store),
        "local_table": {"calibration_budget_s": 30},
        "search": {
            "sampler": "nsga2",
            "trials": trials,
            "population": 10,
            "seed": 0,
            "fidelity": {"rungs": ["proxy"]},
        },
        "tracking": {"export_front": False, "measure_front": False},  # measured below
        "pipeline": {
            "stages": [
                stage("mnasnet", "own-mnasnet"),
                stage("mbv3", "mbv3_task:OwnMbv3"),
                stage("resnet18", "resnet18_task:OwnResnet18"),
            ]
        },
    }


def plain_loop_ms(search, rounds: int = 5, frames: int = 30) -> float:
    """The uncompressed stages run one after another in plain ONNX Runtime sessions (1
    thread each), as a user checks a pipeline on one CPU: the median of the rounds'
    median frame times."""
    import statistics

    import numpy as np
    import onnxruntime as ort

    from frontier.latency_models import whole_model_bytes
    from frontier.spaces import CompressionPlan

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    runs = []
    for s in search.stage_names:
        runner = search.runners[s]
        data = whole_model_bytes(runner.teacher, CompressionPlan(), runner.example)
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: np.asarray(runner.example, dtype=np.float32)}
        runs.append(lambda session=session, feed=feed: session.run(None, feed))

    def frame() -> float:
        start = time.perf_counter()
        for run in runs:
            run()
        return (time.perf_counter() - start) * 1e3

    for _ in range(20):
        frame()
    return statistics.median(
        statistics.median(frame() for _ in range(frames)) for _ in range(rounds)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--epochs", type=int, default=1, help="each stage's own training")
    parser.add_argument("--workdir", type=Path, help="default: a fresh temporary folder")
    parser.add_argument("--json", type=Path, default=OUT)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE / "own_model"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(HERE / "own_model"), os.environ.get("PYTHONPATH", "")] if p
    )
    from frontier.search import PipelineSearch, PipelineTrial, parse_config

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    started = time.monotonic()
    journal = work / "study.journal"
    resumed = journal.is_file()  # a journal of an earlier run: its trials are not redone
    cfg = parse_config(config(args.epochs, args.trials, work / "store"), source="bench")
    search = PipelineSearch(cfg, storage=str(journal))
    result = search.run()
    searched_s = time.monotonic() - started

    base = result.baseline
    uncompressed = {s: base.plans[s] for s in search.stage_names}
    all_cpu = {s: "local-cpu" for s in search.stage_names}
    # the front priced as this search prices it now (a resumed benchmark's journal may
    # predate a change of the pricing), measured in the same rounds as two more placements
    front = [
        PipelineTrial(t.number, t.plans, t.placement, search.evaluate(t.plans, t.placement))
        for t in result.front
    ]
    placed = [
        PipelineTrial(-2, uncompressed, all_cpu, search.evaluate(uncompressed, all_cpu)),
        PipelineTrial(-3, uncompressed, base.placement, base.values),  # again: the ceiling
    ]
    every = search.measure(front + placed)  # the uncompressed pipeline first, then these
    measured, side = every[: len(front) + 1], [every[0], *every[len(front) + 1 :]]
    plain_ms = plain_loop_ms(search)
    commit = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    report = {
        "date": datetime.now().isoformat(timespec="seconds"),
        "commit": commit,
        "command": "python benchmarks/bench_pipeline.py " + " ".join(sys.argv[1:]),
        "trials": len(result.trials),
        "resumed": resumed,
        "search_s": round(searched_s, 1),
        "stage_plans_scored": result.evaluations,
        "stages_uncompressed_ms": {
            s: {
                d: search.score_stage(s, base.plans[s])[f"latency_ms@{d}"]
                for d in ("local-cpu", "local-openvino")
            }
            for s in search.stage_names
        },
        "baseline_placement": base.placement,
        "stage_context_ms": search.context_ms,
        "front": [
            {
                "trial": t.number,
                "placement": t.placement,
                **{k: t.values[k] for k in ("latency_ms@frame", "accuracy_kept", "size_bytes")},
            }
            for t in front
        ],
        "measured": [m.__dict__ | {"speedup_error": m.speedup_error} for m in measured],
        "placement": {
            "all_on_local_cpu": {
                "predicted_ms": placed[0].values["latency_ms@frame"],
                "measured_ms": side[1].measured_ms,
            },
            "best_placement": {
                "placement": base.placement,
                "predicted_ms": base.values["latency_ms@frame"],
                "measured_ms": side[0].measured_ms,
            },
            "ceiling_same_pipeline_twice": side[2].measured_ms / side[0].measured_ms - 1,
            "plain_loop_all_on_local_cpu_ms": plain_ms,
        },
    }
    within = [abs(m.predicted_ms / m.measured_ms - 1) <= 0.10 for m in measured]
    speedups = [m.speedup_error <= 0.10 for m in measured if m.number >= 0]
    cpu_ms, best_ms = placed[0].values["latency_ms@frame"], base.values["latency_ms@frame"]
    report["summary"] = {
        "frames_within_10pct": f"{sum(within)}/{len(within)}",
        "speedups_within_10pct": f"{sum(speedups)}/{len(speedups)}",
        "placement_gain_predicted": cpu_ms / best_ms,
        "placement_gain_measured": side[1].measured_ms / side[0].measured_ms,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1, default=str))
    print(yaml.safe_dump(report["summary"], sort_keys=False))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
