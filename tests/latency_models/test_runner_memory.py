"""A bundle whose whole models would not all fit in memory at once is timed in smaller
chunks: a chunk's sessions are open together, beside the uncompressed model's."""

from __future__ import annotations

import csv

from frontier.latency_models import measure_bundle, runner


def _entry(i: int, mb: int) -> dict:
    return {"id": f"m{i}", "kind": "validation", "weights": [["w", "float32", [mb, 262144]]]}


def test_a_chunk_is_cut_where_its_sessions_would_not_fit() -> None:
    chunk = [_entry(i, mb) for i, mb in enumerate([100, 100, 300, 50, 50])]
    reference = _entry(9, 100)
    # room for 400 MB of sessions' weights at 3x, the reference's 100 MB among them
    free = int(400e6 * 1.048576 * runner.SESSION_MEMORY_PER_WEIGHT / 0.8)
    cut = runner._fit_memory(chunk, reference, free)
    assert [[e["id"] for e in c] for c in cut] == [["m0", "m1"], ["m2"], ["m3", "m4"]]
    # a model larger than the room is timed alone, not dropped
    assert runner._fit_memory(chunk, reference, 1) == [[e] for e in chunk]
    assert runner._fit_memory(chunk, reference, None) == [chunk]


def test_a_bundle_timed_a_model_at_a_time_has_every_row(bundle, tmp_path, monkeypatch) -> None:
    path, manifest = bundle
    monkeypatch.setattr(runner, "free_memory_bytes", lambda: 1)
    out = tmp_path / "t.csv"
    kinds = ("validation",)
    measure_bundle(path, out, device="t", rounds=1, round_s=0.001, redo_budget_s=0, kinds=kinds)
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == sum(m["kind"] in (*kinds, "baseline") for m in manifest["models"])
    assert all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]
    # each whole model was timed beside the uncompressed model, in a chunk of its own
    whole = [r for r in rows if r["kind"] == "validation"]
    assert whole and all(r["baseline_ms"] for r in whole)
