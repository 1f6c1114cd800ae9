"""Per-layer sensitivity: each per-layer choice alone, scored, cached, shown."""

from __future__ import annotations

import json

import pytest

from frontier.search.cli import main


def test_every_per_layer_choice_is_scored_alone_and_cached(write_config, workdir, capsys) -> None:
    from frontier.search import TrialRunner, load_config, sensitivity
    from frontier.search import sensitivity_choices as choices

    evaluation = TrialRunner(load_config(write_config()))
    wanted = choices(evaluation.space)
    # prune ratios 0.5 and 0.75 per group, weight bits 4 and 8 per layer; no act bits (32)
    groups, layers = len(evaluation.space.groups), len(evaluation.space.layers)
    assert len(wanted) == 2 * groups + 2 * layers
    cache = workdir / "sens.json"
    rows = sensitivity(evaluation, rung=1, cache=cache)
    assert rows[0]["dimension"] == "none" and rows[0]["size_bytes_delta"] == 0
    assert [(r["dimension"], r["choice"]) for r in rows[1:]] == wanted
    for row in rows[1:]:
        # one layer compressed: smaller than the uncompressed model, and scored
        assert row["size_bytes_delta"] < 0 and 0 <= row["accuracy"] <= 1
    # each layer's larger prune ratio saves more than its smaller one
    by_choice = {(r["dimension"], r["choice"]): r["size_bytes"] for r in rows}
    for g in evaluation.space.groups:
        assert by_choice[(f"prune.{g.name}", 0.75)] < by_choice[(f"prune.{g.name}", 0.5)]
    # cached: a second call measures nothing
    evaluation.evaluate = None  # would raise if called
    assert sensitivity(evaluation, rung=1, cache=cache) == json.loads(json.dumps(rows))


def test_any_technique_s_per_layer_choices_are_scored_without_name_rules() -> None:
    """Sparsity and a technique registered here belong to layers
    (``Dimension.layer``): sensitivity scores them with pruning and bit widths."""
    from dataclasses import dataclass

    import torch

    from frontier.search import sensitivity_choices
    from frontier.spaces import Dimension, SpaceOptions, Technique, discover, register_technique

    @register_technique("scale-test")
    @dataclass(frozen=True)
    class Scale(Technique):
        factors: tuple[float, ...] = (1.0, 0.5)

        def layer_dimensions(self, space, layer):
            name = f"scale.{layer.name}"
            return [Dimension(name, "scale", self.factors, uncompressed=1.0, layer=layer.name)]

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    options = SpaceOptions(
        prune_ratios=(0.0,),
        weight_bits=(32,),
        act_bits=(32,),
        sparsity=(0.0, 0.5),
        techniques={"scale-test": {}},
    )
    space = discover(model, torch.randn(1, 4), options)
    assert sensitivity_choices(space) == [
        ("sparse.0", 0.5),
        ("scale.0", 0.5),
        ("sparse.2", 0.5),
        ("scale.2", 0.5),
    ]
    # a plan from the parameters it names, the rest uncompressed
    plan = space.plan_of({"scale.2": 0.5})
    assert plan.sparsity == {} and plan.techniques == {}  # Scale draws nothing itself


def test_cli_writes_the_table_and_plot(write_config, workdir, capsys) -> None:
    path = write_config()
    assert main(["sensitivity", str(path), "--workers", "0"]) == 2
    assert "--workers must be at least 1, got 0" in capsys.readouterr().err
    assert main(["sensitivity", str(path), "--workers", "2", "--out", str(workdir / "s")]) == 0
    out = capsys.readouterr().out
    assert "uncompressed at the short rung: accuracy" in out
    assert (workdir / "s" / "sensitivity.csv").exists()
    assert (workdir / "s" / "sensitivity.png").stat().st_size > 1000
    assert main(["sensitivity", str(path), "--rung", "full"]) == 2
    assert "--rung must be one of the config's rungs ['proxy', 'short']" in capsys.readouterr().err


@pytest.fixture(autouse=True)
def _cache(workdir, monkeypatch) -> None:
    monkeypatch.setenv("FRONTIER_CACHE_DIR", str(workdir / "cache"))


def test_a_search_records_its_sensitivity_and_a_resume_reuses_it(write_config, workdir) -> None:
    from pathlib import Path

    from mlflow.tracking import MlflowClient

    from frontier.search import run

    path = write_config(search={"sensitivity": True, "trials": 4})
    result = run(path, progress=False)
    client = MlflowClient(tracking_uri=f"sqlite:///{Path.cwd() / 'mlflow.db'}")
    names = {a.path for a in client.list_artifacts(result.mlflow_run_id)}
    assert {"sensitivity.json", "sensitivity.png"} <= names
    local = client.download_artifacts(result.mlflow_run_id, "sensitivity.json", str(workdir))
    rows = json.loads(Path(local).read_text())
    assert rows[0]["dimension"] == "none" and len(rows) > 1
    first_s = client.get_run(result.mlflow_run_id).data.metrics["sensitivity_s"]
    cache = workdir / "cache" / "sensitivity-tiny.json"
    stamp = cache.stat().st_mtime_ns
    again = run(
        write_config(search={"sensitivity": True, "trials": 8}), progress=False, resume=True
    )
    assert cache.stat().st_mtime_ns == stamp  # read, not measured again
    assert client.get_run(again.mlflow_run_id).data.metrics["sensitivity_s"] < first_s


def test_the_search_s_workers_score_the_sensitivity_pass(write_config, workdir) -> None:
    """With two local workers the pass runs on them (the driver scores nothing) and
    gives the rows one process gives."""
    from frontier.search import TrialRunner, load_config, sensitivity
    from frontier.search.trials._backends import LocalProcesses

    config = load_config(write_config(backend={"workers": 2}))
    evaluation = TrialRunner(config)
    alone = sensitivity(evaluation, rung="short")
    backend = LocalProcesses(config.model_dump_json(), evaluation.tables, workers=2)
    seen: list[int] = []
    try:
        evaluation.evaluate = None  # would raise if the driver scored a plan
        spread = sensitivity(
            evaluation, rung="short", backend=backend, progress=lambda done, *_: seen.append(done)
        )
    finally:
        backend.close()
    assert seen == list(range(1, len(alone) + 1))
    assert [(r["dimension"], r["choice"]) for r in spread] == [
        (r["dimension"], r["choice"]) for r in alone
    ]
    for a, b in zip(alone, spread, strict=True):
        assert b["size_bytes"] == a["size_bytes"]
        assert b["accuracy"] == pytest.approx(a["accuracy"], abs=1e-6)


def test_cached_sensitivities_are_priced_again_by_the_tables_as_they_are_now(
    write_config, workdir, monkeypatch
) -> None:
    """A table that learnt a front (or any new row) keeps the cache: the accuracies and
    sizes are read, the latencies priced again by the table as it is now."""
    import dataclasses

    from frontier.search import TrialRunner, load_config, sensitivity

    path = write_config(objectives=["accuracy", "latency_ms@local-cpu", "size_bytes"])
    evaluation = TrialRunner(load_config(path))
    cache = workdir / "sens.json"
    first = sensitivity(evaluation, rung=0, cache=cache)
    model = evaluation.setup.latency["local-cpu"]
    predict = model.predict
    monkeypatch.setattr(
        model,
        "predict",
        lambda *a: dataclasses.replace(predict(*a), latency_ms=2 * predict(*a).latency_ms),
    )
    scored: list[list[str]] = []
    evaluate = evaluation.evaluate
    monkeypatch.setattr(
        evaluation, "evaluate", lambda p, r, m=None: scored.append(m) or evaluate(p, r, m)
    )
    again = sensitivity(evaluation, rung=0, cache=cache)
    assert scored and all(m == ["latency_ms@local-cpu"] for m in scored)  # nothing else
    for a, b in zip(first, again, strict=True):
        assert b["accuracy"] == a["accuracy"] and b["size_bytes"] == a["size_bytes"]
        assert b["latency_ms@local-cpu"] == pytest.approx(2 * a["latency_ms@local-cpu"])
        assert b["latency_ms@local-cpu_delta"] == pytest.approx(2 * a["latency_ms@local-cpu_delta"])
