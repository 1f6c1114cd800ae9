"""The text task's cached teacher logits move with the module to a trial's device."""

from __future__ import annotations

import torch


def test_cached_teacher_logits_move_with_the_module() -> None:
    from torch import nn

    from frontier.experiments._text import CachedLogits

    ids = torch.tensor([[5, 6, 0], [7, 0, 0]])
    logits = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    cache = CachedLogits(nn.Linear(3, 2), ids, logits)
    assert cache.to("meta").logits.device.type == "meta"
    cache = CachedLogits(nn.Linear(3, 2), ids, logits)
    assert torch.equal(cache(torch.tensor([[7, 0], [5, 6]])), logits[[1, 0]])
