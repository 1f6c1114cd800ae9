"""One joint search over a pipeline: a made-up two-stage pipeline whose best placement and
budget split are worked out by hand from its stages' scores is found; a stage's plan is
scored once however many trials share it; the CLI runs it, refuses to overwrite a stored
study and resumes one."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from frontier.search import PipelineSearch, load_config
from frontier.search.cli import main

MLP = {"name": "digits", "options": {"model": "mlp", "epochs": 2}}
SPACE = {"prune_ratios": [0.0, 0.5], "weight_bits": [32], "act_bits": [32]}
GBPS = 1.0


def _write(tmp_path: Path, **over: Any) -> Path:
    data: dict[str, Any] = {
        "name": "two-mlps",
        "devices": [
            "local-cpu",
            {"name": "npu", "like": "local-cpu", "transfer_gbps": GBPS},
        ],
        "local_table": {"calibration": 0, "round_s": 0.01},
        "device_store": str(tmp_path / "store"),
        # a keeps more of its own accuracy than b: their best plans differ
        "constraints": ["a.accuracy >= baseline - 0.17", "b.accuracy >= baseline - 0.25"],
        "search": {"sampler": "grid", "trials": 64, "seed": 0, "fidelity": {"rungs": ["proxy"]}},
        "pipeline": {
            "stages": [
                {"name": "a", "task": MLP, "space": SPACE},
                {"name": "b", "task": MLP, "space": SPACE},
            ],
            "stage_context": False,  # the tables alone: the known best is worked out from them
        },
        **over,
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _by_hand(search: PipelineSearch) -> float:
    """The fastest feasible frame over every plan and placement, worked out from the
    stages' scores: stages on one device add up, on two they overlap, and the one on the
    npu starts after the frame's copy over the link."""
    base = {s: search.baseline_values[f"{s}.accuracy"] for s in ("a", "b")}
    copy_ms = search.frame_bytes / (GBPS * 1e9) * 1e3
    best = float("inf")
    scores = {s: list(search.scores[s].values()) for s in ("a", "b")}
    for va, vb in itertools.product(scores["a"], scores["b"]):
        if va["accuracy"] < base["a"] - 0.17 or vb["accuracy"] < base["b"] - 0.25:
            continue
        for da, db in itertools.product(["local-cpu", "npu"], repeat=2):
            la, lb = va[f"latency_ms@{da}"], vb[f"latency_ms@{db}"]
            if da == db:
                frame = la + lb + (copy_ms if da == "npu" else 0.0)
            else:
                on_cpu, on_npu = (la, lb) if da == "local-cpu" else (lb, la)
                frame = max(on_cpu, copy_ms + on_npu)
            best = min(best, frame)
    return best


@pytest.mark.slow
def test_the_joint_search_finds_the_known_best_pipeline_and_scores_each_plan_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    search = PipelineSearch(load_config(_write(tmp_path)))
    result = search.run()
    assert len(result.trials) == 64 and all(t.state == "complete" for t in result.trials)
    # 64 trials, but each stage has 4 plans: each scored once, then reused
    assert result.evaluations == {"a": 4, "b": 4}
    fastest = min(result.front, key=lambda t: t.values["latency_ms@frame"])
    assert fastest.values["latency_ms@frame"] == pytest.approx(_by_hand(search))
    # the two stages overlap on two devices rather than share one
    assert len(set(fastest.placement.values())) == 2
    # (whether a compressed plan beats the uncompressed stages is the tables' to say: on a
    # table timed while the machine was busy they tie, and _by_hand agrees either way)
    for t in result.front:
        assert t.feasible
        assert t.values["a.accuracy_drop"] <= 0.17 + 1e-9
        assert t.values["b.accuracy_drop"] <= 0.25 + 1e-9
        for s in ("a", "b"):
            assert t.values[f"{s}.latency_ms"] == pytest.approx(
                search.scores[s][json.dumps(t.plans[s], sort_keys=True)][
                    f"latency_ms@{t.placement[s]}"
                ]
            )


def test_the_frame_budget_binds_the_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["pipeline"]["budget_ms"] = 1e-6  # no pipeline of two models runs in a nanosecond
    data["search"]["trials"] = 4
    path.write_text(yaml.safe_dump(data))
    result = PipelineSearch(load_config(path)).run()
    assert [str(c) for c in result.constraints][-1] == "latency_ms@frame <= 1e-06"
    assert result.front == [] and not any(t.feasible for t in result.trials)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            {"objectives": ["latency_ms@frame", "c.accuracy"]},
            "objectives: 'c.accuracy' is no pipeline metric",
        ),
        (
            {"constraints": ["a.map50 >= baseline - 0.01"]},
            "constraints: 'a.map50' is no pipeline metric",
        ),
    ],
    ids=["unknown-stage", "unknown-metric"],
)
def test_a_pipeline_metric_that_names_nothing_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], over: dict[str, Any], message: str
) -> None:
    assert main(["search", str(_write(tmp_path, **over))]) == 2
    assert message in capsys.readouterr().err


def test_a_pipeline_metric_in_a_single_model_config_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump({"task": MLP, "objectives": ["latency_ms@frame"]}))
    with pytest.raises(
        ValueError, match="'latency_ms@frame' is a pipeline's metric; this config has no pipeline"
    ):
        load_config(path)


@pytest.mark.slow
def test_the_front_is_run_here_frame_by_frame_beside_the_uncompressed_pipeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(_write(tmp_path, devices=["local-cpu", "local-cpu-2t"]))
    search = PipelineSearch(config)
    result = search.run(trials=12)
    measured = result.measured
    # the uncompressed pipeline first, then every front member, each run here
    assert [m.number for m in measured] == [-1] + [t.number for t in result.front]
    assert measured[0].speedup_measured == 1.0 and measured[0].speedup_predicted == 1.0
    for m, t in zip(measured[1:], result.front, strict=True):
        assert m.measured_ms > 0
        assert m.predicted_ms == t.values["latency_ms@frame"]
        assert m.speedup_measured == pytest.approx(measured[0].measured_ms / m.measured_ms)


def test_a_frame_runs_its_stages_in_order_and_overlaps_devices() -> None:
    from frontier.search.pipeline._measure import frame_runner

    log: list[str] = []

    def stage(name: str, seconds: float):
        def run() -> None:
            log.append(f"{name}+")
            time.sleep(seconds)
            log.append(f"{name}-")

        return run

    runs = {"a": stage("a", 0.05), "b": stage("b", 0.05), "c": stage("c", 0.0)}
    reads = {"a": [], "b": [], "c": ["a", "b"]}
    split = frame_runner(runs, {"a": "x", "b": "y", "c": "x"}, reads, ["a", "b", "c"])
    threads = threading.active_count()
    try:
        ms = split()
        assert 50 <= ms < 95  # a and b overlap on two devices
        assert log.index("c+") > max(log.index("a-"), log.index("b-"))  # c waits for both
        split.record = True
        split()
        # the workers are started once, as a deployment's: a frame starts no thread
        assert threading.active_count() == threads
        assert split.stage_ms["a"][0] >= 50 and split.stage_ms["c"][0] < 50
    finally:
        split.close()
    assert threading.active_count() == threads - 1
    log.clear()
    one = frame_runner(runs, {"a": "x", "b": "x", "c": "x"}, reads, ["a", "b", "c"])
    assert one() >= 100  # one device: one after another
    assert log == ["a+", "a-", "b+", "b-", "c+", "c-"]
    one.close()


def test_a_failing_stage_fails_its_frame_and_stops_no_worker() -> None:
    from frontier.search.pipeline._measure import frame_runner

    def boom() -> None:
        raise RuntimeError("stage b broke")

    frame = frame_runner(
        {"a": lambda: None, "b": boom}, {"a": "x", "b": "y"}, {"a": [], "b": []}, ["a", "b"]
    )
    try:
        for _ in range(2):
            with pytest.raises(RuntimeError, match="stage b broke"):
                frame()
    finally:
        frame.close()


@pytest.mark.slow
def test_each_stage_is_priced_as_it_runs_inside_a_frame_and_kept_for_a_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, devices=["local-cpu", "local-cpu-2t"])
    data = yaml.safe_load(path.read_text())
    data["pipeline"]["stage_context"] = True
    data["search"] |= {"sampler": "random", "trials": 4}
    path.write_text(yaml.safe_dump(data))
    search = PipelineSearch(load_config(path))
    first = search.run()
    context = search.context_ms
    assert set(context) == {"a", "b"} and set(context["a"]) == {"local-cpu", "local-cpu-2t"}
    assert all(ms >= 0 for d in context.values() for ms in d.values())
    kept = json.loads(search.context_path.read_text())
    assert kept["context_ms"] == context
    for t in first.trials:
        for s, other in (("a", "b"), ("b", "a")):
            device = t.placement[s]
            table = search.scores[s][json.dumps(t.plans[s], sort_keys=True)][f"latency_ms@{device}"]
            shared = t.placement[other] == device
            # a stage sharing its device pays what the frame costs it there; alone, none
            assert t.values[f"{s}.latency_ms"] == pytest.approx(
                table + (context[s][device] if shared else 0.0)
            )
    # a resumed search measures nothing again and scores no plan it scored before
    import frontier.search.pipeline._measure as measure
    from frontier.search.trials._trials import TrialRunner

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("measured or scored again")

    monkeypatch.setattr(measure, "stage_context_ms", refuse)
    monkeypatch.setattr(TrialRunner, "run_job", refuse)
    again = PipelineSearch(load_config(path))
    resumed = again.run(trials=4)
    assert again.context_ms == context
    assert [t.values for t in resumed.trials] == [t.values for t in first.trials]


@pytest.mark.slow
def test_the_cli_searches_a_pipeline_refuses_to_start_over_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path)
    assert main(["search", str(path), "--trials", "3"]) == 0
    out = capsys.readouterr().out
    assert "front:" in out and "3 trials (0 failed)" in out and "base" in out
    assert main(["search", str(path), "--trials", "5"]) == 2
    assert "--resume continues it" in capsys.readouterr().err
    assert main(["search", str(path), "--trials", "5", "--resume"]) == 0
    out = capsys.readouterr().out
    assert "5 trials (0 failed)" in out
    members = int(out.split("front: ")[1].split(" pipelines")[0])
    # the pipeline's front, in MLflow: every member with its frame and stage metrics
    assert main(["pareto", "--experiment", "two-mlps", "--format", "json", "--params", "*"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == members
    for row in rows:
        assert row["latency_ms@frame"] > 0 and "a.accuracy" in row and "b.latency_ms" in row
        assert row["a.placement"] in ("local-cpu", "npu")
    # a member picked: each stage's model and plan, pipeline.json, and an example that runs it
    best = ["pick", "--experiment", "two-mlps", "--best", "latency_ms@frame", "--export", "picked"]
    assert main(best) == 0
    report = json.loads(capsys.readouterr().out)
    spec = json.loads((tmp_path / "picked" / "pipeline.json").read_text())
    assert spec["trial"] == report["trial"] and spec["order"] == ["a", "b"]
    for stage in spec["stages"]:
        assert (tmp_path / "picked" / stage["model"]).stat().st_size > 0
        assert stage["device"] in ("local-cpu", "npu")
    ran = subprocess.run(
        [sys.executable, str(tmp_path / "picked" / "run_pipeline.py")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"trial {spec['trial']}: median" in ran.stdout
    # five trials, each logged once (the resumed search logged only its own)
    assert main(["pareto", "--experiment", "two-mlps", "--all", "--format", "json"]) == 0
    assert sorted(r["trial"] for r in json.loads(capsys.readouterr().out)) == [0, 1, 2, 3, 4]
