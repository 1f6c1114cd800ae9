"""A tiny ImageFolder tree, generated, for the tasks and scenarios that read one."""

from __future__ import annotations

from pathlib import Path

import torch


def image_folder(root: Path, classes: tuple[str, ...] = ("cat", "dog"), per_class: int = 3) -> Path:
    """``root/{train,val}/<class>/<i>.png``: random 20x24 RGB images, seeded."""
    from PIL import Image

    gen = torch.Generator().manual_seed(0)
    for split in ("train", "val"):
        for c in classes:
            d = root / split / c
            d.mkdir(parents=True)
            for i in range(per_class):
                pixels = (torch.rand(20, 24, 3, generator=gen) * 255).byte().numpy()
                Image.fromarray(pixels).save(d / f"{i}.png")
    return root
