"""Is the machine steady enough to judge a table tonight? The runner's timing protocol
(what every table row is) and a user's plain ONNX Runtime loop (``bench_residuals``'s),
on the same exported files, one after the other, several times in one process.

Each repeat times three ResNet-18 (96x96, untrained) corners, the uncompressed model,
the half-pruned INT8 one and the quarter-pruned FP32 one, first by the protocol
(``measure_models``), then by the plain loop. Where the two, or one of them from one
repeat to the next, differ by more than a table's target (10%), the machine's speed moved
within seconds, and no fresh table built then can be judged in ms against a loop.

Run: python benchmarks/bench_protocol_vs_loop.py [--repeats 3]
     [--json benchmarks/report-logs/protocol-vs-loop.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import bench_residuals

HERE = Path(__file__).parent
CORNERS = ("prune 0, fp32", "prune 0.5, int8", "prune 0.25, fp32")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=HERE / "report-logs" / "protocol-vs-loop.json")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from frontier.latency_models import corner_plans, measure_models, whole_model_bytes

    model, x, space, calibration = bench_residuals.build("resnet18")
    plans = dict(corner_plans(space))
    repeats = []
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, label in enumerate(CORNERS):
            files.append(Path(tmp) / f"{i}.onnx")
            files[-1].write_bytes(whole_model_bytes(model, plans[label], x, calibration))
        for rep in range(args.repeats):
            start = time.perf_counter()
            protocol = measure_models(files)
            loop = bench_residuals.plain_loop(files, 0, seed=rep)
            repeats.append(
                {
                    "protocol_ms": dict(zip(CORNERS, map(float, protocol), strict=True)),
                    "loop_ms": dict(zip(CORNERS, map(float, loop), strict=True)),
                    "wall_s": round(time.perf_counter() - start, 1),
                }
            )
            print(json.dumps(repeats[-1]), file=sys.stderr)
    ratios = [r["protocol_ms"][c] / r["loop_ms"][c] for r in repeats for c in CORNERS]
    loop_base = [r["loop_ms"][CORNERS[0]] for r in repeats]
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "model": "resnet18 96x96",
        "repeats": repeats,
        "protocol_over_loop": [round(min(ratios), 3), round(max(ratios), 3)],
        "loop_uncompressed_ms_range": [round(min(loop_base), 3), round(max(loop_base), 3)],
    }
    results = json.loads(args.json.read_text()) if args.json.exists() else []
    results.append(out)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "repeats"}))


if __name__ == "__main__":
    main()
