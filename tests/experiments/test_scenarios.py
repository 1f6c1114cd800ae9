"""The built-in scenarios, end to end on tiny budgets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frontier.latency_models import local_threads
from frontier.search import load_config, run
from frontier.search.cli import main


@pytest.mark.parametrize(
    ("name", "threads"),
    [
        ("local-cpu", 1),
        ("local-cpu-2t", 2),
        ("local-cpu-12t", 12),
        ("pi4", None),
        ("local-cpu-0t", None),
    ],
    ids=["default", "two", "twelve", "other", "zero"],
)
def test_local_device_names(name: str, threads: int | None) -> None:
    assert local_threads(name) == threads


@pytest.mark.slow
def test_multi_device_one_search_a_front_per_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FRONTIER_DATA_DIR", str(tmp_path / "data"))
    config = load_config("multi-device").override(
        {
            "search.trials": 8,
            "search.population": 4,
            "search.fidelity.rungs": ["proxy", "short"],
            "constraints": [],
        }
    )
    result = run(config, progress=False)
    trials = result.trials[result.trials.state == "complete"]
    assert len(trials) == 8
    one, two = trials["latency_ms@local-cpu"], trials["latency_ms@local-cpu-2t"]
    # the worst-case objective is the slower device, trial by trial
    assert (trials["latency_ms@worst"] == one.combine(two, max)).all()
    assert sorted(p.name for p in (tmp_path / "data" / "devices").iterdir()) == [
        "local-cpu",
        "local-cpu-2t",
    ]
    capsys.readouterr()
    for device in ("local-cpu", "local-cpu-2t"):
        metric = f"latency_ms@{device}"
        args = ["pareto", "--objectives", f"accuracy,{metric}", "--format", "json"]
        assert main(args) == 0
        front = json.loads(capsys.readouterr().out)
        assert front
        # nothing recorded beats a member of this device's front on both of its axes
        for row in front:
            others = trials[trials.trial != row["trial"]]  # JSON floats have 15 digits
            better = others[(others.accuracy > row["accuracy"]) & (others[metric] < row[metric])]
            assert better.empty, (row, better.to_dict("records"))
