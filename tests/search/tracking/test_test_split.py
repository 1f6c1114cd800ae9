"""The test split reports and never chooses: every rung scores on validation data, and a
front member's test accuracy is measured once, at the end, on the model it exported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from torch.utils.data import DataLoader, TensorDataset

from frontier.experiments import DigitsTask, Loaders, register_task
from frontier.search import run
from frontier.search.cli import main


@register_task("digits-wrong-test-labels")
class WrongTestLabels(DigitsTask):
    """The digits task with every test label shifted by one class: any choice that read
    the test split would change."""

    def loaders(self, *, batch_size: int = 128) -> Loaders:
        real = super().loaders(batch_size=batch_size)
        x, y = self.splits()["test"]
        wrong = DataLoader(TensorDataset(x, (y + 1) % 10), batch_size=batch_size)
        return Loaders(train=real.train, val=real.val, test=wrong)


def _search(write_config, task: str):
    path = write_config(
        filename=f"{task}.yaml",
        name=task,
        task={"name": task, "options": {"model": "mlp"}},
        objectives=[
            {"name": "accuracy", "options": {"steps": 20, "full_factor": 3}},
            "size_bytes",
        ],
        search={"trials": 8, "population": 4, "fidelity": {"rungs": ["short", "full"]}},
    )
    return run(path, progress=False)


def _logged_test(result) -> dict[int, float]:
    client = MlflowClient(
        tracking_uri=f"sqlite:///{Path.cwd() / 'mlflow.db'}"
    )  # absolute: cached by URI
    runs = client.search_runs(
        [client.get_run(result.mlflow_run_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{result.mlflow_run_id}'",
    )
    return {
        int(r.data.tags["frontier.trial"]): r.data.metrics["accuracy_test"]
        for r in runs
        if "accuracy_test" in r.data.metrics
    }


@pytest.mark.slow
def test_changing_the_test_labels_changes_no_choice(write_config, workdir, capsys) -> None:
    right = _search(write_config, "digits")
    wrong = _search(write_config, "digits-wrong-test-labels")
    # the same trials, values, rungs and front: nothing the search chose read the test split
    assert [t.params for t in right.study.trials] == [t.params for t in wrong.study.trials]
    columns = ["trial", "state", "rung", "feasible", "accuracy", "size_bytes"]
    assert right.trials[columns].equals(wrong.trials[columns])
    assert right.pareto.drop(columns="run_id").equals(wrong.pareto.drop(columns="run_id"))
    assert "full" in set(right.trials.rung)  # promoted members were scored at the full rung
    # each front member's test accuracy is logged at the end, and only the front's
    tested_right, tested_wrong = _logged_test(right), _logged_test(wrong)
    assert set(tested_right) == set(tested_wrong) == set(right.pareto.trial)
    for n, value in tested_right.items():
        assert value > 0.5 and tested_wrong[n] < 0.3  # the labels the test split holds
    # pick reports it beside the validation accuracy it was chosen by; --where cannot use it
    capsys.readouterr()
    assert main(["pick", "--experiment", "digits", "--best", "accuracy", "--no-measure"]) == 0
    picked = json.loads(capsys.readouterr().out)
    assert picked["accuracy_test"] == pytest.approx(tested_right[picked["trial"]])
    assert main(["pareto", "--experiment", "digits", "--where", "accuracy_test >= 0.9"]) == 2
    assert "never chooses a model" in capsys.readouterr().err


def test_test_front_false_scores_no_member_on_the_test_split(write_config, workdir) -> None:
    path = write_config(
        filename="untested.yaml",
        name="untested",
        task={"name": "digits", "options": {"model": "mlp"}},
        objectives=[{"name": "accuracy", "options": {"steps": 5}}, "size_bytes"],
        search={"trials": 4, "population": 4, "fidelity": {"rungs": ["short"]}},
        tracking={"test_front": False},
    )
    result = run(path, progress=False)
    assert len(result.pareto) >= 1 and _logged_test(result) == {}
