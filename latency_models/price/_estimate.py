"""What a latency prediction hands back: the whole-model figure and each op's price (shared
by the table's own predictor and a few-shot table's transfer)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpCost:
    """One op of a prediction."""

    key: str
    kind: str
    latency_ms: float
    # "table", "fallback" (predicted from same-type rows), "offload" (unsupported type);
    # "-dense" appended when a sparse op was priced as its dense twin (no sparse row)
    source: str
    transfer_ms: float = 0.0
    energy_mj: float | None = None


@dataclass(frozen=True)
class LatencyEstimate:
    """A predicted latency with its breakdown.

    Attributes:
        latency_ms: the prediction (calibrated sum plus overhead).
        sum_ms: the uncalibrated sum of per-op latencies plus one overhead.
        ops: the per-op breakdown.
        coverage: how many ops came from the table, the fallback and offloading, and how
            many sparse ops were priced as dense for want of a sparse-kernel row.
        energy_mj: energy per inference, when the table can price it.
        measured_at: where the figure is the model as the table measured it (the
            uncompressed model, timed beside every row), when; "" for a prediction.
        bundle_id: with ``measured_at``, the bundle whose measurement it is.
    """

    latency_ms: float
    sum_ms: float
    ops: tuple[OpCost, ...]
    coverage: dict[str, int]
    energy_mj: float | None
    measured_at: str = ""
    bundle_id: str = ""
