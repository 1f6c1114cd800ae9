"""At the end of a search every front member's exported model is timed here, beside the
latency its device table predicted."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from frontier.search import run
from frontier.search.cli import main


@pytest.mark.slow
def test_every_front_member_is_measured_beside_its_prediction(write_config, capsys) -> None:
    path = write_config(
        objectives=[{"name": "accuracy", "options": {"steps": 20}}, "latency_ms@local-cpu"],
        constraints=[],
        search={"trials": 8, "population": 4, "fidelity": {"rungs": ["proxy", "short"]}},
    )
    result = run(path, progress=False)
    client = MlflowClient(
        tracking_uri=f"sqlite:///{Path.cwd() / 'mlflow.db'}"
    )  # absolute: cached by URI
    parent = client.get_run(result.mlflow_run_id)
    runs = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{result.mlflow_run_id}'",
    )
    measured = {
        int(r.data.tags["frontier.trial"]): r.data.metrics
        for r in runs
        if "latency_measured_ms/local-cpu" in r.data.metrics
    }
    assert set(measured) == set(result.pareto.trial)  # the front, and only the front
    for metrics in measured.values():
        ratio = metrics["latency_ms/local-cpu"] / metrics["latency_measured_ms/local-cpu"]
        assert 0.2 < ratio < 5  # a prediction and a measurement of the same model
    assert parent.data.metrics["latency_error/local-cpu"] >= 0
    capsys.readouterr()
    assert main(["pareto", "--experiment", "tiny"]) == 0
    assert "pred/meas@local-cpu" in capsys.readouterr().out
