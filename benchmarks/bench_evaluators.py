"""The accuracy ladder on the digits task: does the cheap rung rank like the expensive one?

For 30 seeded random plans (pruning, 2-32 bit weights, 4-32 bit activations,
distillation settings) of the digits MLP and CNN: Spearman rank correlation of the
*short* rung (100 distillation steps, validation accuracy) and of each zero-cost *proxy*
signal against the *full* rung (distillation to convergence, test accuracy), and the
wall time of one short evaluation.

Targets (evaluator issue): short vs full Spearman >= 0.8; best proxy reported (goal
>= 0.5); one short evaluation <= 3 s.
Run: python benchmarks/bench_evaluators.py [--plans 30] [--steps 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings
from pathlib import Path

import torch
from scipy.stats import spearmanr

from frontier.evaluators import Candidate, EvalSetup, build_evaluator
from frontier.experiments import DigitsTask
from frontier.spaces import DistillOptions, SpaceOptions, discover


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plans", type=int, default=30)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    figures: dict[str, dict[str, float]] = {}
    warnings.simplefilter("ignore")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"{args.plans} plans, short = {args.steps} steps"
    )
    for family, round_to in (("mlp", 8), ("cnn", 4)):
        task = DigitsTask(model=family)
        teacher = task.baseline()
        space = discover(
            teacher,
            task.example_inputs(),
            SpaceOptions(
                prune_ratios=(0.0, 0.25, 0.5, 0.75, 0.875),
                weight_bits=(2, 4, 8, 32),
                act_bits=(4, 8, 32),
                round_to=round_to,
                distill=DistillOptions(),
            ),
        )
        setup = EvalSetup(task=task, teacher=teacher)
        proxy = build_evaluator("accuracy", fidelity="proxy", all_signals=True)
        short = build_evaluator("accuracy", fidelity="short", steps=args.steps)
        full = build_evaluator("accuracy", fidelity="full", steps=args.steps)
        signals, shorts, fulls, walls = [], [], [], []
        for seed in range(args.plans):
            candidate = Candidate(space.sample(seed), id=f"{family}-{seed}")
            signals.append(proxy(candidate, setup).details)
            s = short(candidate, setup)
            shorts.append(s.value)
            walls.append(s.wall_s)
            fulls.append(full(candidate, setup).value)
        rho = spearmanr(shorts, fulls)[0]
        proxies = {
            name: float(spearmanr([d[name] for d in signals], fulls)[0])
            for name in ("agreement", "neg_kl", "saliency")
        }
        figures[family] = {
            "short_vs_full_spearman": float(rho),
            **{f"proxy_{k}_spearman": v for k, v in proxies.items()},
            "short_wall_median_s": statistics.median(walls),
            "short_wall_max_s": max(walls),
            "full_accuracy_min": min(fulls),
            "full_accuracy_max": max(fulls),
        }
        print(f"\ndigits {family}: full accuracy {min(fulls):.3f}..{max(fulls):.3f}")
        print(f"  short vs full Spearman {rho:.3f} (target >= 0.8)")
        for name, r in proxies.items():
            print(f"  proxy {name:<10} vs full Spearman {r:+.3f} (goal >= 0.5 for the best)")
        print(
            f"  short evaluation wall time: median {statistics.median(walls):.2f} s, "
            f"max {max(walls):.2f} s (target <= 3 s)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
