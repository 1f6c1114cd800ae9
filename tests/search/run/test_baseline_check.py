"""The teacher is checked before any trial: its scores are printed, and a broken or
chance-level baseline stops the search with a message instead of a meaningless front."""

from __future__ import annotations

import importlib
import os
import re
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from frontier.evaluators import EvaluationError, measure_accuracy
from frontier.search import run
from frontier.search.cli import main

MODULE = textwrap.dedent(
    """
    from torch import nn
    from frontier.experiments import DigitsTask


    class NaNOut(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x) * float("nan")


    class Untrained(DigitsTask):
        def baseline(self):
            return self.new_model().eval()


    class NaNTeacher(DigitsTask):
        def baseline(self):
            return NaNOut(super().baseline()).eval()


    class Raising(DigitsTask):
        def baseline(self):
            raise RuntimeError("weights file is corrupt")


    THREADS_SEEN = []


    class ThreadsSeen(DigitsTask):
        def baseline(self):
            import torch

            THREADS_SEEN.append(torch.get_num_threads())
            return super().baseline()
    """
)


@pytest.fixture
def user_tasks(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (workdir / "user_tasks_baseline.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(workdir))
    return "user_tasks_baseline"


def _search(write_config, task: str, *extra: str) -> int:
    path = write_config(
        task={"name": task, "options": {"model": "mlp"}},
        search={"trials": 2, "population": 2, "anchors": False},
    )
    return main(["search", str(path), "--no-progress", *extra])


def test_the_baseline_and_resolved_constraints_are_printed(write_config, capsys) -> None:
    path = write_config(
        constraints=["accuracy >= baseline - 0.05"],
        search={"trials": 2, "population": 2, "anchors": False},
    )
    assert main(["search", str(path), "--no-progress"]) == 0
    err = capsys.readouterr().err
    line = next(s for s in err.splitlines() if "baseline (the uncompressed model)" in s)
    accuracy = float(line.split("accuracy ")[1].split(",")[0])
    assert accuracy > 0.9
    line = next(s for s in err.splitlines() if "constraint accuracy >= baseline - 0.05 ->" in s)
    assert float(line.split(">= ")[-1]) == pytest.approx(accuracy - 0.05, abs=1e-5)


def test_a_chance_level_teacher_stops_the_search(write_config, user_tasks, capsys) -> None:
    assert _search(write_config, f"{user_tasks}:Untrained") == 2
    err = capsys.readouterr().err
    assert "about what always class" in err and "check_baseline" in err
    assert "Traceback" not in err
    # the user can insist
    assert (
        _search(write_config, f"{user_tasks}:Untrained", "--set", "task.check_baseline=false") == 0
    )
    assert "warning: the task's baseline model scores" in capsys.readouterr().err


def test_a_teacher_with_nan_outputs_stops_the_search(write_config, user_tasks, capsys) -> None:
    assert _search(write_config, f"{user_tasks}:NaNTeacher") == 2
    err = capsys.readouterr().err
    assert "not finite" in err and "Traceback" not in err


def test_a_baseline_that_raises_is_exit_2_naming_the_method(
    write_config, user_tasks, capsys
) -> None:
    assert _search(write_config, f"{user_tasks}:Raising") == 2
    err = capsys.readouterr().err
    assert "baseline() raised RuntimeError: weights file is corrupt" in err
    assert "Traceback" not in err


def test_nan_logits_fail_the_measurement() -> None:
    class NaNModel(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.full((len(x), 3), float("nan"))

    batches = [(torch.zeros(4, 2), torch.tensor([0, 1, 2, 0]))]
    with pytest.raises(EvaluationError, match="not finite"):
        measure_accuracy(NaNModel(), batches)


def test_an_under_trained_baseline_is_named_once(write_config, capsys) -> None:
    """One epoch leaves the MLP near 0.82; the uncompressed plan fine-tuned at the short
    rung reaches about 0.94: the search says so once, and the summary repeats it."""
    path = write_config(
        task={"name": "digits", "options": {"model": "mlp", "epochs": 1}},
        space={"prune_ratios": [0.0, 0.5], "weight_bits": [8, 32]},
        constraints=[],
        search={"trials": 6, "population": 3, "anchors": True},
    )
    assert main(["search", str(path), "--no-progress"]) == 0
    err, out = capsys.readouterr()[::-1]
    said = "the baseline is under-trained"
    assert err.count(said) == 1 and "Train it longer" in err, err
    assert said in out  # the summary's note
    # one command continues with that trial's fine-tuned model as the teacher
    line = next(s for s in out.splitlines() if s.startswith("continue with the better model"))
    command = line.split(": ", 1)[1].split()
    assert command[:3] == ["frontier", "search", str(path)] and command[3] == "--set"
    teacher = Path(command[4].removeprefix("task.teacher="))
    assert teacher.is_file()
    assert main([*command[1:], "--trials", "2", "--no-progress"]) == 0
    err = capsys.readouterr().err
    before = float(re.search(r"accuracy (0\.\d+) against the baseline's (0\.\d+)", out)[2])
    after = float(re.search(r"baseline \(the uncompressed model\): .*accuracy (0\.\d+)", err)[1])
    assert after > before + 0.05  # the better model is now the baseline and the teacher
    assert said not in err
    # a teacher file that is not there is one line naming it
    assert main([*command[1:4], "task.teacher=gone.pt", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "gone.pt does not exist" in err and "Traceback" not in err


def test_a_trained_baseline_gets_no_hint(write_config, capsys) -> None:
    path = write_config(
        space={"prune_ratios": [0.0, 0.5], "weight_bits": [8, 32]},
        constraints=[],
        search={"trials": 6, "population": 3, "anchors": True},
    )
    assert main(["search", str(path), "--no-progress"]) == 0
    assert "under-trained" not in "".join(capsys.readouterr())


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_the_driver_trains_a_baseline_on_the_cores_its_trials_will_share(
    write_config, user_tasks
) -> None:
    """A search with two local workers of one thread each trains its baseline in the
    driver on two threads, not one: on one, ResNet-50's would take about 44 minutes
    on this 2-core machine, where two took 26 (benchmarks/bench_baseline_threads.py).
    The driver's own threads are given back, and the trials complete."""
    before = torch.get_num_threads()
    path = write_config(
        task={"name": f"{user_tasks}:ThreadsSeen", "options": {"model": "mlp"}},
        search={"trials": 2, "population": 2},
        backend={"workers": 2, "threads_per_trial": 1},
    )
    result = run(path, progress=False)
    assert importlib.import_module(user_tasks).THREADS_SEEN == [2]  # the driver's call
    assert torch.get_num_threads() == before  # the driver's own threads given back
    assert list(result.trials["state"]) == ["complete"] * 2
