"""The perception scenario end to end: detection, segmentation and depth on one frame,
searched as one pipeline (``perception-pipeline``), beside the split a user would make
by hand.

1. **Joint**: the built-in ``perception-pipeline`` config, its three teachers trained
   here (cached), its tables measured here, ``--trials`` joint trials.
2. **Hand split**: for each stage, a search of that stage alone on ``local-cpu``, bound
   to half its own uncompressed latency and to its accuracy constraint
   (``--hand-trials`` each); every combination of their front members is a pipeline,
   priced and scored by the joint search's tables and rung, and the hypervolume of the
   feasible ones is set beside the joint search's.
3. **The pick**: the joint front's fastest member. It and the teacher pipeline (twice:
   the ceiling) are run here frame by frame in the same rounds (predicted beside
   measured), and each stage's exported model is scored on the test split in ONNX
   Runtime beside its teacher's.

Writes ``benchmarks/report-logs/perception.json``:

    python benchmarks/bench_perception.py [--trials 30] [--hand-trials 10] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import logging
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
OUT = HERE / "report-logs" / "perception.json"


def base_config(work: Path, trials: int, steps: int, smoke: bool) -> dict[str, Any]:
    from frontier.experiments import builtin_configs

    data = yaml.safe_load(builtin_configs()["perception-pipeline"].read_text())
    data["device_store"] = str(work / "store")
    data["search"]["trials"] = trials
    data["tracking"] = {"uri": f"sqlite:///{work / 'mlflow.db'}", "export_front": False,
                        "measure_front": False}  # fmt: skip
    for stage in data["pipeline"]["stages"]:
        stage["accuracy"] = {"steps": steps}
        if smoke:  # the script's own check: a few scenes, a table in seconds
            stage["task"]["options"] = {"epochs": 1, "scenes": {"train": 64, "val": 16, "test": 16}}
    if smoke:
        data["local_table"] = {"calibration": 0, "round_s": 0.01}
    return data


def hand_config(data: dict[str, Any], stage: dict[str, Any], budget_ms: float) -> dict[str, Any]:
    """One stage alone on ``local-cpu``, bound to ``budget_ms`` and its own constraint."""
    one = copy.deepcopy(data)
    one["name"] = f"{data['name']}-hand-{stage['name']}"
    one["devices"] = ["local-cpu"]
    one["pipeline"] = {"stages": [stage], "budget_ms": budget_ms}
    one["constraints"] = [c for c in data["constraints"] if c.startswith(f"{stage['name']}.")]
    return one


def test_metrics(search: Any, trial: Any, folder: Path) -> dict[str, float]:
    """Each stage of ``trial`` exported and scored on the test split in ONNX Runtime."""
    search.export_member(trial, folder)
    return {
        s: float(search.runners[s].test_accuracy(folder / s / "model.onnx"))
        for s in search.stage_names
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--hand-trials", type=int, default=10)
    parser.add_argument("--steps", type=int, default=60, help="each stage's fine-tuning steps")
    parser.add_argument("--workdir", type=Path, help="default: a fresh temporary folder")
    parser.add_argument("--json", type=Path, default=OUT)
    parser.add_argument("--smoke", action="store_true", help="a few scenes: checks the script")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for noisy in ("mlflow", "alembic", "urllib3", "codecarbon"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from frontier.latency_models import placements
    from frontier.search import (
        PipelineSearch,
        PipelineTrial,
        hypervolume,
        pareto_mask,
        parse_config,
    )

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-perception-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    data = base_config(work, args.trials, args.steps, args.smoke)
    joint = PipelineSearch(parse_config(data, source="bench"), storage=str(work / "joint.journal"))
    teacher = joint.prepare()
    prepared_s = time.monotonic() - started
    result = joint.run()
    joint_s = time.monotonic() - started - prepared_s

    # the hand split: each stage alone, bound to half its own uncompressed latency
    cpu = "local-cpu"
    hand_fronts: dict[str, list[dict[str, Any]]] = {}
    hand_sizes: dict[str, int] = {}
    hand_s = time.monotonic()
    for stage in data["pipeline"]["stages"]:
        name = stage["name"]
        budget = 0.5 * joint.score_stage(name, teacher.plans[name])[f"latency_ms@{cpu}"]
        one = PipelineSearch(
            parse_config(hand_config(data, stage, budget), source="bench"),
            storage=str(work / f"hand-{name}.journal"),
        )
        alone = one.run(trials=args.hand_trials)
        hand_sizes[name] = len(alone.front)
        hand_fronts[name] = [t.plans[name] for t in alone.front] or [teacher.plans[name]]
        for key, values in one.scores[name].items():  # scored alike: the same rung and seed
            joint.scores[name].setdefault(key, values)
    hand_s = time.monotonic() - hand_s
    on_cpu = {s: cpu for s in joint.stage_names}
    combos = []
    for chosen in itertools.product(*(hand_fronts[s] for s in joint.stage_names)):
        plans = dict(zip(joint.stage_names, chosen, strict=True))
        values = joint.evaluate(plans, on_cpu)
        feasible = all(c.holds(values[c.objective]) for c in joint.constraints)
        combos.append(PipelineTrial(-10 - len(combos), plans, on_cpu, values, feasible=feasible))
    ok = [t for t in combos if t.feasible]
    import numpy as np

    objectives = joint.objectives
    reference = [teacher.values[o.name] for o in objectives]
    hand_hv = 0.0
    hand_front: list[Any] = []
    if ok:
        table = np.array([[t.values[o.name] for o in objectives] for t in ok])
        hand_front = [t for t, on in zip(ok, pareto_mask(table, objectives), strict=True) if on]
        hand_hv = hypervolume(
            np.array([[t.values[o.name] for o in objectives] for t in hand_front]),
            objectives,
            reference,
        )

    # the pick, and the teacher pipeline, run here and scored on the test split
    front = [t for t in result.front if t.number >= 0]
    pick = min(front, key=lambda t: t.values["latency_ms@frame"]) if front else None
    best_hand = min(hand_front, key=lambda t: t.values["latency_ms@frame"]) if hand_front else None
    again = PipelineTrial(-2, teacher.plans, teacher.placement, teacher.values)  # the ceiling
    members = [t for t in (pick, best_hand) if t is not None] + [again]
    measured = joint.measure(members)
    by_number = {m.number: m for m in measured}
    ceiling = by_number[-2].measured_ms / by_number[-1].measured_ms - 1 if -2 in by_number else None
    tests = {"teacher": test_metrics(joint, teacher, work / "export" / "teacher")}
    if pick is not None:
        tests["pick"] = test_metrics(joint, pick, work / "export" / "pick")
    every_placement = len(list(placements(joint._choices())))

    def row(t: Any) -> dict[str, Any]:
        m = by_number.get(t.number)
        return {
            "trial": t.number,
            "placement": t.placement,
            "plans": t.plans,
            "values": t.values,
            "measured_ms": m.measured_ms if m else None,
            "speedup_measured": m.speedup_measured if m else None,
        }

    commit = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    report = {
        "date": datetime.now().isoformat(timespec="seconds"),
        "commit": commit,
        "command": "python benchmarks/bench_perception.py " + " ".join(sys.argv[1:]),
        "seconds": {
            "prepare": round(prepared_s, 1),
            "joint": round(joint_s, 1),
            "hand": round(hand_s, 1),
            "total": round(time.monotonic() - started, 1),
        },
        "trials": len(result.trials),
        "hand_trials_each": args.hand_trials,
        "steps": args.steps,
        "placements_priced": every_placement,
        "stage_plans_scored": result.evaluations,
        "teacher": row(teacher),
        "pick": row(pick) if pick else None,
        "best_hand": row(best_hand) if best_hand else None,
        "front": [row(t) for t in front],
        "hypervolume": {"joint": result.hypervolume, "hand": hand_hv},
        "ceiling_teacher_twice": ceiling,
        "hand_front_sizes": hand_sizes,
        "hand_combinations": len(combos),
        "hand_feasible": len(ok),
        "test": tests,
        "stage_context_ms": joint.context_ms,
        "constraints": [str(c) for c in joint.constraints],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({k: report[k] for k in ("seconds", "hypervolume", "test")}, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
