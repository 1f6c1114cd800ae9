"""Check model_cost against torchvision's published num_params and _ops (GMACs).

For every classification model of the resnet, resnext, wide_resnet, mobilenet,
efficientnet, regnet, densenet, vgg, mnasnet and squeezenet families, at the input size
of its weights' transforms, with random weights (nothing is downloaded).
Run: python benchmarks/check_torchvision_costs.py
"""

from __future__ import annotations

import warnings

import torch
import torchvision.models as tvm
from torchvision.models import get_model, get_model_weights, list_models

from frontier.spaces import CompressionPlan, model_cost

FAMILIES = (
    "resnet",
    "resnext",
    "wide_resnet",
    "mobilenet",
    "efficientnet",
    "regnet",
    "densenet",
    "vgg",
    "mnasnet",
    "squeezenet",
)


def main() -> None:
    warnings.simplefilter("ignore")
    worst = 0.0
    failures = []
    print(
        f"{'model':<22} {'size':>4} {'params':>10} {'published':>10} {'GMACs':>8} "
        f"{'published':>9} {'diff':>7}"
    )
    for name in list_models(module=tvm):
        if not name.startswith(FAMILIES):
            continue
        weights = get_model_weights(name).DEFAULT
        size = weights.transforms().crop_size[0]
        model = get_model(name, weights=None).eval()
        cost = model_cost(model, CompressionPlan(), torch.randn(1, 3, size, size))
        published_ops = weights.meta["_ops"]
        rel = cost.macs / 1e9 / published_ops - 1
        worst = max(worst, abs(rel))
        ok = cost.params == weights.meta["num_params"] and abs(rel) <= 0.01
        if not ok:
            failures.append(name)
        print(
            f"{name:<22} {size:>4} {cost.params:>10} {weights.meta['num_params']:>10} "
            f"{cost.macs / 1e9:>8.3f} {published_ops:>9.3f} {rel:>+7.2%}{'' if ok else '  MISS'}"
        )
    print(f"\nworst MAC difference {worst:.2%} (target <= 1%); misses: {failures or 'none'}")


if __name__ == "__main__":
    main()
