"""A search says when its local table's uncompressed model is off a fresh timing of it:
the machine's speed has changed since the table was built."""

from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from frontier.latency_models import DeviceMeta, measure_local, resolve_device, whole_model_bytes
from frontier.search.run._setup import speed_check
from frontier.spaces import CompressionPlan


class _Stated:
    """A table that states the uncompressed model at ``ms``, measured on ``when``."""

    def __init__(self, ms: float, when: str = "2026-11-28T12:00:00") -> None:
        self.ms, self.when = ms, when

    def predict(self, model, plan):
        return SimpleNamespace(latency_ms=self.ms, measured_at=self.when, bundle_id="b1")


def _evaluation(tables: dict[str, tuple[_Stated, float]]) -> SimpleNamespace:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 8 * 8, 10)).eval()  # fmt: skip
    return SimpleNamespace(
        config=SimpleNamespace(typed=SimpleNamespace(device=resolve_device)),
        teacher=model,
        example=torch.randn(1, 1, 8, 8),
        setup=SimpleNamespace(latency={name: stated for name, (stated, _) in tables.items()}),
        tables={
            name: SimpleNamespace(
                bundle_meta={"b1": DeviceMeta(noise_pct=noise)}.get,
                path=Path("/store/local-cpu/table.csv"),
            )
            for name, (_, noise) in tables.items()
        },
    )


def test_a_table_built_at_another_speed_is_named_with_both_timings() -> None:
    ev = _evaluation({"local-cpu": (_Stated(50.0), 3.0)})
    lines = speed_check(ev)  # type: ignore[arg-type]
    assert len(lines) == 1
    assert lines[0].startswith("local-cpu: the uncompressed model runs in ")
    assert "its table, measured 2026-11-28T12:00, says 50 ms, " in lines[0]
    assert "% more (beyond its 15% noise band)" in lines[0]
    assert lines[0].endswith("remove /store/local-cpu and run again to measure it anew")


def test_a_table_that_matches_this_machine_or_is_not_here_says_nothing() -> None:
    ev = _evaluation({})
    now = measure_local(whole_model_bytes(ev.teacher, CompressionPlan(), ev.example))
    ev = _evaluation(
        {
            "local-cpu": (_Stated(now), 60.0),  # within a (wide) noise band
            "pi4": (_Stated(50.0), 3.0),  # a device elsewhere: its runner times it
            "local-cpu-2t": (_Stated(50.0, when=""), 3.0),  # states no measurement
        }
    )
    assert speed_check(ev) == []  # type: ignore[arg-type]
