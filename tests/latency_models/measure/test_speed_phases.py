"""A device that changes speed between rounds and between chunks of a table (a shared
machine's speed phases, a phone that throttles): rows timed beside the uncompressed
model keep their ratios to it, so the speed-ups a table predicts hold."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from frontier.latency_models import read_table, runner

ROUND_SPEEDS = [1.0, 1.3, 1.0, 1.6, 0.9]  # the device's speed in each round of a chunk
CHUNK_SPEEDS = [1.0, 1.45, 0.8, 1.2]  # and from one chunk to the next (minutes apart)


class Run:
    """A model that costs ``cost_ms`` at the device's nominal speed."""

    def __init__(self, key: str, cost_ms: float) -> None:
        self.key, self.cost_ms = key, cost_ms

    def __call__(self) -> None:
        pass


class Clock:
    """A fake timer: a run costs its model's ms times the device's speed now, which
    moves every round (each round times every run ``MIN_ROUND_RUNS`` times)."""

    def __init__(self, runs: int, chunk_speed: float) -> None:
        self.calls, self.runs, self.chunk_speed = 0, runs, chunk_speed

    def __call__(self, run: Run) -> float:
        round_no = self.calls // (runner.MIN_ROUND_RUNS * self.runs) % len(ROUND_SPEEDS)
        self.calls += 1
        return run.cost_ms * ROUND_SPEEDS[round_no] * self.chunk_speed


BASELINE = Run("baseline-x", 2.0)
MODELS = [Run(f"m{i}", 0.3 + 0.17 * i) for i in range(12)]
TIMING = {"rounds": 5, "round_s": 1e-9}


def _table(tmp_path: Path, beside_baseline: bool) -> dict[str, float]:
    """Each model's ms in a table measured in chunks of three under the clock above
    (the baseline a row of the last chunk), as ``read_table`` states them."""
    rows = []
    items = [*MODELS, BASELINE]
    for no, first in enumerate(range(0, len(items), 3)):
        chunk = items[first : first + 3]
        speed = CHUNK_SPEEDS[no % len(CHUNK_SPEEDS)]
        if beside_baseline:
            clock = Clock(len(chunk) + 1, speed)
            _, stats = runner.time_against(BASELINE, chunk, **TIMING, timer=clock)
        else:
            stats = runner.time_models(chunk, **TIMING, timer=Clock(len(chunk), speed))
        for run, st in zip(chunk, stats, strict=True):
            row = {"model_id": run.key, "key": run.key, "status": "ok", "runs": 25}
            row["kind"] = "baseline" if run is BASELINE else "calibration"
            row.update({k: f"{v:.9g}" for k, v in st.items() if k.endswith("_ms")})
            if beside_baseline:
                row.update(baseline_key=BASELINE.key, relative=f"{st['relative']:.9g}")
            rows.append(row)
    path = tmp_path / f"table-{beside_baseline}.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=runner.COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return {r.key: r.median_ms for r in read_table(path).rows}


def _speedup_errors(ms: dict[str, float]) -> list[float]:
    return [(ms[BASELINE.key] / ms[m.key]) / (BASELINE.cost_ms / m.cost_ms) - 1 for m in MODELS]


def test_speedups_hold_when_the_device_changes_speed(tmp_path: Path) -> None:
    errors = _speedup_errors(_table(tmp_path, beside_baseline=True))
    assert max(abs(e) for e in errors) <= 0.02, errors


def test_without_the_baseline_in_its_rounds_they_do_not(tmp_path: Path) -> None:
    """The same clock and chunks, timed as before: speed-ups off by the chunks' speeds."""
    errors = _speedup_errors(_table(tmp_path, beside_baseline=False))
    assert max(abs(e) for e in errors) > 0.2, errors


def test_a_ratio_is_taken_round_by_round() -> None:
    stats = {"median_ms": 2.0, "p10_ms": 1.8, "p90_ms": 3.0, "round_medians": [1.0, 2.0, 4.0]}
    ref = {"median_ms": 10.0, "round_medians": [5.0, 10.0, 20.0]}
    got = runner.relative_to(stats, ref)
    assert got["relative"] == pytest.approx(0.2) and got["baseline_ms"] == 10.0


def test_a_chunk_near_the_table_s_speed_keeps_its_own_medians() -> None:
    """Within PHASE_TOLERANCE the baseline's own noise is not added to the rows."""
    assert runner.state_against(2.0, 0.21, 10.5, anchor_ms=10.0) == 2.0
    assert runner.state_against(2.0, 0.2, 13.0, anchor_ms=10.0) == pytest.approx(2.0)
    assert runner.state_against(2.6, 0.2, 13.0, anchor_ms=10.0) == pytest.approx(2.0)


def test_a_measured_table_states_its_rows_against_the_uncompressed_model(mlp_setup, table) -> None:
    """A real bundle measured by the runner: the uncompressed model is a row of its own,
    every other row was timed beside it, and its price is its measurement, dated."""
    from frontier.latency_models import LatencyModel
    from frontier.spaces import CompressionPlan

    _, model, x, space = mlp_setup
    (base,) = [r for r in table.rows if r.kind == "baseline"]
    timed = [r for r in table.rows if r.status == "ok" and r.kind != "baseline"]
    assert timed and all(r.baseline_key == base.key and r.relative > 0 for r in timed)
    latency = LatencyModel(table)
    latency.bind(model, x, space)
    est = latency.predict(model, CompressionPlan())
    assert est.latency_ms == base.median_ms and est.measured_at == table.meta["date"]
    pruned = next(p for p in (space.sample(s) for s in range(50)) if any(p.prune.values()))
    assert latency.predict(model, pruned).measured_at == ""


class _Retimer:
    """Times a chunk again as a device back at its usual speed would: the baseline at
    1.01 ms, each model at ``ms``."""

    def __init__(self, ms: float) -> None:
        self.ms, self.chunks = ms, 0

    def time(self, chunk, chunk_no, reference, *, profile=True):
        self.chunks += 1
        assert not profile  # a chunk timed again profiles nothing twice
        rows = [
            {"model_id": m["id"], "key": m["id"], "kind": "calibration", "status": "ok",
             "median_ms": self.ms, "baseline_ms": 1.01, "relative": self.ms / 1.01}
            for m in chunk
        ]  # fmt: skip
        return rows, reference


def test_chunks_timed_while_the_device_drifted_are_timed_again(tmp_path: Path, capsys) -> None:
    out = tmp_path / "table.csv"
    ran, rows = [], []
    for no, base in enumerate([1.0, 1.02, 1.5, 0.98, 0.99]):  # chunk 2 ran 50% slow
        chunk = [{"id": f"c{no}m{i}"} for i in range(3)]
        ran.append((base, chunk))
        rows += [
            {"model_id": m["id"], "key": m["id"], "kind": "calibration", "status": "ok",
             "median_ms": 0.5 * base, "baseline_ms": base}
            for m in chunk
        ]  # fmt: skip
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=runner.COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    reference = {"id": "baseline", "key": "baseline"}
    noise = {"noise_pct": 3.0}
    retimer = _Retimer(0.505)
    kept = runner._redo_drifted(retimer, out, ran, reference, noise, budget_s=60)
    assert kept == {"drifted_chunks": 1, "redone_chunks": 1} and retimer.chunks == 1
    assert "drifted while this table was built: 1 of 5 chunks" in capsys.readouterr().err
    after = {r["model_id"]: r for r in csv.DictReader(out.open())}
    assert len(after) == 15
    assert all(float(after[f"c2m{i}"]["baseline_ms"]) == 1.01 for i in range(3))
    assert float(after["c0m0"]["median_ms"]) == 0.5  # the steady chunks are kept
    # no time left: said, not timed again
    retimer = _Retimer(0.505)
    ran[2] = (1.5, ran[2][1])
    kept = runner._redo_drifted(retimer, out, ran, reference, noise, budget_s=0)
    assert kept == {"drifted_chunks": 1, "redone_chunks": 0} and retimer.chunks == 0
