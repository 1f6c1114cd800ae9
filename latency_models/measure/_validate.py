"""Checking a table's predictions against measured whole-model latency (``validate``)."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from frontier.spaces import CompressionPlan, SearchSpace

from ..bundle._bundle import VALIDATION_SEED0
from ..price._model import LatencyModel
from ._local import measure_plans


@dataclass(frozen=True)
class ValidationReport:
    """Predicted against measured whole-model latency over seeded plans."""

    device: str
    samples: int
    mape: float
    within_10pct: float
    kendall_tau: float
    worst: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    csv_path: Path | None = None
    plot_path: Path | None = None
    #: how the table's sum was calibrated: method, blend weights, each candidate's CV MAPE
    calibration: dict[str, Any] = field(default_factory=dict)
    #: where the whole models were measured: "table" (on the device) or "local"
    measured: str = ""
    #: each plan's speed-up over the uncompressed model, predicted against measured
    #: (the uncompressed model timed in the same rounds): MAPE and share within 10%
    speedup_mape: float = float("nan")
    speedup_within_10pct: float = float("nan")
    #: the table's price of the uncompressed model against its measurement beside them
    baseline_error: float = float("nan")

    def summary(self) -> dict[str, Any]:
        """The figures a table keeps of its last validation (``validation`` in its
        metadata), dated."""
        import datetime as dt

        return {
            "samples": self.samples,
            "within_10pct": round(self.within_10pct, 4),
            "mape": round(self.mape, 4),
            "kendall_tau": round(self.kendall_tau, 4),
            "speedup_within_10pct": round(self.speedup_within_10pct, 4),
            "speedup_mape": round(self.speedup_mape, 4),
            "baseline_error": round(self.baseline_error, 4),
            "measured": self.measured,
            "calibration": self.calibration.get("method"),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "samples": self.samples,
            "measured": self.measured,
            "calibration": self.calibration,
            "mape": self.mape,
            "within_10pct": self.within_10pct,
            "kendall_tau": self.kendall_tau,
            "speedup_mape": self.speedup_mape,
            "speedup_within_10pct": self.speedup_within_10pct,
            "baseline_error": self.baseline_error,
            "worst": self.worst,
            "csv": str(self.csv_path) if self.csv_path else None,
            "plot": str(self.plot_path) if self.plot_path else None,
        }


def validate(
    latency: LatencyModel,
    *,
    model: nn.Module,
    example_inputs: Any,
    space: SearchSpace,
    samples: int = 50,
    out_dir: str | Path | None = None,
    measure: str = "auto",
    calibration_data: Any = None,
) -> ValidationReport:
    """Compare predictions with measurements for ``samples`` seeded plans.

    Args:
        latency: the latency model of the device (bound to ``model`` here).
        model, example_inputs, space: what the plans compress.
        samples: how many seeded plans (seeds from 20000, disjoint from calibration).
        out_dir: where to write ``validation.csv`` and ``validation.png``.
        measure: "local" measures each exported model on this machine; "table" reads the
            validation models the device measured from its bundle; "auto" uses the table's
            when it holds enough of them, else measures here if the table was measured
            on this machine's CPU. A table of another machine is never compared with
            models measured here: that raises a ValueError saying what to do.
    """
    latency.bind(model, example_inputs, space)
    table = latency.table
    stored = {
        e["seed"]: row
        for k, e in table.models.items()
        if e.get("kind") == "validation" and (row := table.get(k)) is not None
    }
    use_table = measure == "table" or (measure == "auto" and len(stored) >= samples)
    _check_comparable(table, len(stored), samples, use_table)
    seeds = [VALIDATION_SEED0 + i for i in range(samples)]
    plans = [space.sample(seed) for seed in seeds]
    predicted = [latency.predict(model, plan) for plan in plans]
    base_predicted = latency.predict(model, CompressionPlan()).latency_ms
    base_measured = None
    if use_table:
        measured = [stored[seed].median_ms for seed in seeds]
        base_row = next((r for r in table.rows if r.kind == "baseline" and r.status == "ok"), None)
        base_measured = base_row.median_ms if base_row is not None else None
    else:  # the uncompressed model in the same rounds: the speed-ups a user measures
        base_measured, *measured = measure_plans(
            model,
            [CompressionPlan(), *plans],
            example_inputs,
            table,
            calibration_data=calibration_data,
            against_first=True,
        )
    rows = [
        {
            "seed": seed,
            "predicted_ms": p.latency_ms,
            "sum_ms": p.sum_ms,
            "measured_ms": m,
            "error": p.latency_ms / m - 1,
            "speedup_error": (
                (base_predicted / p.latency_ms) / (base_measured / m) - 1
                if base_measured
                else float("nan")
            ),
            "fallback_ops": p.coverage["fallback"],
        }
        for seed, p, m in zip(seeds, predicted, measured, strict=True)
    ]
    baseline_error = base_predicted / base_measured - 1 if base_measured else float("nan")
    report = _report(latency, rows, baseline_error, "table" if use_table else "local")
    return report if out_dir is None else _written(report, Path(out_dir))


def _check_comparable(table: Any, stored: int, samples: int, use_table: bool) -> None:
    """Refuse to compare a table with models measured on another machine, or with more
    stored validation models than it holds, saying what to do instead."""
    from ..runner import cpu_model

    here, there = cpu_model(), table.device_meta.cpu
    if not use_table and there != here:
        where = f"on {there!r}" if there else "on an unknown CPU (no metadata)"
        raise ValueError(
            f"table {table.name!r} was measured {where}, and this machine is {here!r}: "
            "its predictions can only be checked against models measured on that device. "
            + (
                f"It holds {stored} measured validation models: use --samples {stored}."
                if stored
                else f"Write its bundle with --validation {samples} and measure it there."
            )
        )
    if use_table and stored < samples:
        raise ValueError(
            f"table {table.name!r} holds {stored} measured validation models; "
            f"asked for {samples} (write the bundle with --validation {samples})"
        )


def _report(
    latency: LatencyModel, rows: list[dict[str, Any]], baseline_error: float, measured: str
) -> ValidationReport:
    """The figures of ``rows`` (``validate``'s, one per plan) and the calibration in use."""
    from scipy.stats import kendalltau

    pred = np.array([r["predicted_ms"] for r in rows])
    meas = np.array([r["measured_ms"] for r in rows])
    err = pred / meas - 1
    order = np.argsort(-np.abs(err))
    speed = np.array([r["speedup_error"] for r in rows])
    correction = latency.correction
    return ValidationReport(
        device=latency.table.name,
        samples=len(rows),
        mape=float(np.abs(err).mean()),
        within_10pct=float((np.abs(err) <= 0.10).mean()),
        speedup_mape=float(np.abs(speed).mean()),
        speedup_within_10pct=float((np.abs(speed) <= 0.10).mean()),
        baseline_error=baseline_error,
        kendall_tau=float(kendalltau(pred, meas)[0]) if len(rows) > 1 else float("nan"),
        worst=[rows[int(j)] for j in order[:5]],
        rows=rows,
        measured=measured,
        calibration={
            "method": latency.calibration_method,
            "weights": dict(latency.weights),
            "cv_mape": {k: round(v, 4) for k, v in latency.method_cv.items()},
            "correction": (
                {"alpha": correction.alpha, "features": len(correction.coef_ms)}
                if correction
                else None
            ),
        },
    )


def _written(report: ValidationReport, out: Path) -> ValidationReport:
    """``report`` with its rows written to ``out/validation.csv`` and its scatter plot to
    ``out/validation.png``."""
    out.mkdir(parents=True, exist_ok=True)
    csv_path, plot_path = out / "validation.csv", out / "validation.png"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(report.rows[0]))
        writer.writeheader()
        writer.writerows(report.rows)
    _scatter(
        np.array([r["predicted_ms"] for r in report.rows]),
        np.array([r["measured_ms"] for r in report.rows]),
        plot_path,
        title=f"{report.device}: {report.within_10pct:.0%} within "
        f"+/-10%, MAPE {report.mape:.1%}, tau {report.kendall_tau:.2f}",
    )
    return ValidationReport(**{**report.__dict__, "csv_path": csv_path, "plot_path": plot_path})


def _scatter(pred: np.ndarray, meas: np.ndarray, path: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    lo, hi = float(min(pred.min(), meas.min())) * 0.9, float(max(pred.max(), meas.max())) * 1.1
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="exact")
    ax.fill_between(
        [lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], alpha=0.15, label="+/-10%"
    )
    ax.scatter(meas, pred, s=14)
    ax.set_xlabel("measured latency (ms)")
    ax.set_ylabel("predicted latency (ms)")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
