"""Speed of discovery and plan application on resnet50 (224x224), on this machine.

Targets (issue: foundation): discover(resnet50) <= 5 s, apply_plan(resnet50, random plan) <= 2 s.
Run: python benchmarks/bench_spaces.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import torch
import torchvision

from frontier.spaces import SpaceOptions, apply_plan, discover, model_cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    discover_s, apply_s = [], []
    space = None
    for _ in range(args.repeats):
        t = time.perf_counter()
        space = discover(model, x, SpaceOptions(round_to=8))
        discover_s.append(time.perf_counter() - t)
    assert space is not None
    for seed in range(args.repeats):
        plan = space.sample(seed)
        t = time.perf_counter()
        small = apply_plan(model, plan, x)
        apply_s.append(time.perf_counter() - t)
    cost = model_cost(small, plan, x)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"resnet50: {len(space.groups)} prunable groups, {len(space.layers)} quantizable layers")
    print(
        f"discover(resnet50):   median {statistics.median(discover_s):.2f} s, "
        f"max {max(discover_s):.2f} s (target <= 5 s)"
    )
    print(
        f"apply_plan(resnet50): median {statistics.median(apply_s):.2f} s, "
        f"max {max(apply_s):.2f} s (target <= 2 s)"
    )
    print(f"last plan: {cost.params / 1e6:.1f} M params, {cost.macs / 1e9:.2f} GMACs")
    if args.json:
        figures = {
            "discover_s": statistics.median(discover_s),
            "discover_max_s": max(discover_s),
            "apply_s": statistics.median(apply_s),
            "apply_max_s": max(apply_s),
            "groups": len(space.groups),
            "layers": len(space.layers),
        }
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
