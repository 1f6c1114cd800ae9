"""The local backend end to end: fronts, failures, resume, MLflow, pick."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from mlflow.tracking import MlflowClient

from frontier.evaluators import MINIMIZE, Evaluator, Measurement, register_evaluator
from frontier.search import (
    Callback,
    Search,
    journal_completions,
    load_config,
    open_storage,
    pareto_mask,
    run,
)
from frontier.search.cli import main


def _client() -> MlflowClient:
    # absolute: MLflow caches stores by URI, and each test has its own directory
    return MlflowClient(tracking_uri=f"sqlite:///{Path.cwd() / 'mlflow.db'}")


@register_evaluator("flaky_test")
class FlakyEvaluator(Evaluator):
    """Fails like real evaluators do: an exception, running out of memory, a NaN."""

    name, unit, direction = "flaky_test", "units", MINIMIZE

    def evaluate(self, candidate, context) -> Measurement:
        ratio = candidate.plan.prune.get("features.1", 0.0)
        if ratio == 0.75:
            raise RuntimeError("boom")
        if ratio == 0.5 and candidate.plan.weight_bits.get("features.1") == 4:
            raise MemoryError("out of memory")
        if candidate.plan.weight_bits.get("classifier") == 4:
            return Measurement(float("nan"), "units", "exact", 0.0)
        return Measurement(1.0, "units", "exact", 0.0)


@register_evaluator("ctrl_c_test")
class CtrlCEvaluator(Evaluator):
    """Presses Ctrl-C (SIGINT to this process) in the middle of its 4th evaluation."""

    name, unit, direction = "ctrl_c_test", "units", MINIMIZE
    calls = 0

    def evaluate(self, candidate, context) -> Measurement:
        type(self).calls += 1
        if type(self).calls == 4:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the handler runs here, mid-trial
        return Measurement(1.0, "units", "exact", 0.0)


def test_front_is_feasible_nondominated_and_tracked(write_config) -> None:
    path = write_config(constraints=["size_bytes <= 30000"])
    result = run(path, progress=False)
    trials = result.trials
    assert len(trials) == 12 and (trials.state == "complete").all()
    front = result.pareto
    assert not front.empty and (front.size_bytes <= 30000).all()
    # every feasible trial is dominated by or equal to a front member
    objectives = Search(path).config.objectives
    assert [o.name for o in objectives] == ["accuracy", "size_bytes"]
    feasible = trials[trials.feasible]
    values = feasible[["accuracy", "size_bytes"]].to_numpy()
    from frontier.search import Objective

    objs = [Objective("accuracy", "maximize"), Objective("size_bytes", "minimize")]
    mask = pareto_mask(values, objs)
    assert sorted(feasible.trial[mask]) == sorted(front.trial)
    # the search ended by measuring every front member at the top rung, and the runs say so
    assert set(front.rung) == {"short"}
    client = _client()
    parent = client.get_run(result.mlflow_run_id)
    assert parent.data.metrics["hypervolume"] == pytest.approx(result.hypervolume)
    assert json.loads(parent.data.tags["frontier.reference_point"]) == {
        "accuracy": 1.1,
        "size_bytes": 1.1,
    }
    artifacts = {a.path for a in client.list_artifacts(result.mlflow_run_id)}
    assert {"pareto.csv", "config.json", "space.txt", "front"} <= artifacts
    for _, row in front.iterrows():
        run_ = client.get_run(row.run_id)
        assert run_.data.tags["frontier.pareto"] == "true"
        assert run_.data.tags["frontier.rung"] == row.rung
        names = {a.path for a in client.list_artifacts(row.run_id)}
        assert {"model.onnx", "plan.json"} <= names


def test_front_models_come_from_the_jobs_not_a_second_fine_tune(
    write_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    # at training rungs the job that scored a plan exports its model; the driver never
    # fine-tunes a front member again (that doubled a trial's cost)
    from frontier.search import TrialRunner

    def refit(*_: object) -> None:
        raise AssertionError("the driver fine-tuned a front member again")

    monkeypatch.setattr(TrialRunner, "scored_model", refit)
    path = write_config(search={"fidelity": {"rungs": ["short", "full"], "promote": 0.5}})
    search = Search(path, progress=False)
    assert math.isnan(search.hypervolume)  # no front before run, and no AttributeError
    result = search.run()
    assert search.hypervolume > 0
    assert search.summary["job_export_s"] > 0
    client = _client()
    for _, row in result.pareto.iterrows():
        tags = client.get_run(row.run_id).data.tags
        assert "frontier.export_error" not in tags, tags.get("frontier.export_error")
        names = {a.path for a in client.list_artifacts(row.run_id)}
        assert {"model.onnx", "plan.json"} <= names
    # the driver keeps no model of a trial off the front
    front = set(result.pareto.trial)
    assert all(not r.exports for n, r in search.records.items() if n not in front)


def test_failed_trials_are_recorded_and_the_search_goes_on(write_config) -> None:
    path = write_config(objectives=["size_bytes", "flaky_test"], constraints=[])
    result = run(path, trials=16, progress=False)
    trials = result.trials
    assert len(trials) == 16
    failed = trials[trials.state == "failed"]
    assert not failed.empty and (trials.state == "complete").any()
    errors = " ".join(failed.error)
    assert "boom" in errors and "not finite" in errors
    from optuna.trial import TrialState

    states = [t.state for t in result.study.trials]
    assert states.count(TrialState.FAIL) == len(failed)
    client = _client()
    logged = client.search_runs(
        [client.get_run(result.mlflow_run_id).info.experiment_id],
        filter_string="tags.`frontier.state` = 'failed'",
    )
    assert len(logged) == len(failed)
    assert all("frontier.error" in r.data.tags for r in logged)


def test_same_seed_same_search(write_config) -> None:
    path = write_config()
    a = run(path, trials=6, progress=False)
    b = run(path, trials=6, progress=False)
    assert a.study_name != b.study_name  # a second run starts a new study
    assert [t.params for t in a.study.trials] == [t.params for t in b.study.trials]
    assert a.trials.accuracy.tolist() == pytest.approx(b.trials.accuracy.tolist())


def _complete(storage_path: Path) -> list[tuple[int, dict]]:
    import optuna
    from optuna.trial import TrialState

    storage = open_storage(str(storage_path))
    names = optuna.get_all_study_names(storage)
    if not names:
        return []
    study = optuna.load_study(study_name=names[0], storage=storage)
    return [(t.number, t.params) for t in study.get_trials(states=(TrialState.COMPLETE,))]


@pytest.mark.usefixtures("sigint_as_at_a_terminal")
def test_ctrl_c_saves_the_running_trial_and_starts_no_other(write_config, capfd) -> None:
    CtrlCEvaluator.calls = 0
    path = write_config(objectives=["size_bytes", "ctrl_c_test"], constraints=[])
    with pytest.raises(KeyboardInterrupt):
        run(path, progress=False)
    assert CtrlCEvaluator.calls == 4  # no trial started after the Ctrl-C
    assert "stopping once the running trials finish" in capfd.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    before = _complete(Path("frontier-optuna.journal"))
    # the trial Ctrl-C landed in was saved, complete (the baseline took the 1st call)
    assert len(before) == CtrlCEvaluator.calls - 1
    result = run(path, resume=True, progress=False)
    after = [(t.number, t.params) for t in result.study.trials if t.state.name == "COMPLETE"]
    assert len(after) == 12 and after[: len(before)] == before


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "population", "kill_after", "steps"),
    [
        (signal.SIGKILL, 10, 4, 150),
        (signal.SIGINT, 4, 6, 150),
    ],
    ids=["sigkill-first-generation", "sigint-after-promotions"],
)
def test_resume_after_an_interruption_loses_nothing(
    write_config, workdir: Path, capsys, sig: int, population: int, kill_after: int, steps: int
) -> None:
    # SIGKILL inside the first generation (NSGA-II samples it at random from its seed);
    # SIGINT after a generation has promoted trials and tagged a front: the trial it
    # lands in finishes and is saved, and no other starts
    path = write_config(
        objectives=[{"name": "accuracy", "options": {"steps": steps}}, "size_bytes"],
        search={"anchors": False, "population": population},
    )
    journal = workdir / "frontier-optuna.journal"
    # faulthandler: SIGABRT dumps every thread's stack, should the driver not stop
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    cmd = [sys.executable, "-m", "frontier.search.cli", "search", str(path), "--no-progress"]
    # its stderr goes to a file: a pipe nobody reads fills up and blocks the driver
    log = workdir / "driver.log"
    # a shell's background job starts with SIGINT ignored, and Python then never turns
    # it into KeyboardInterrupt: the driver gets SIGINT's default, as at a terminal
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and journal_completions(journal) < kill_after:
        time.sleep(0.02)
        assert proc.poll() is None, log.read_text()[-3000:]
    proc.send_signal(sig)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=30)
        pytest.fail(f"the driver did not stop within 120 s of {sig!r}:\n{log.read_text()[-6000:]}")
    before = _complete(journal)
    assert kill_after <= len(before) <= (kill_after + 1 if sig == signal.SIGINT else 11)
    # run again without --resume: refused, naming the stopped study, not a new one begun
    capsys.readouterr()
    assert main(["search", str(path), "--no-progress"]) == 2
    said = capsys.readouterr().err
    assert "study 'tiny' of config 'tiny'" in said and "--resume continues it" in said
    assert _complete(journal) == before
    # the stopped search has a front, of the trials it completed, marked unfinished
    assert main(["pareto", "--experiment", "tiny"]) == 0
    shown = capsys.readouterr().out
    assert "unfinished (" in shown and "(no model matches)" not in shown
    assert main(["pareto", "--experiment", "tiny", "--format", "json"]) == 0
    stopped_front = {r["trial"] for r in json.loads(capsys.readouterr().out)}
    assert stopped_front and stopped_front <= {n for n, _ in before}
    result = run(path, resume=True, progress=False)
    after = [(t.number, t.params) for t in result.study.trials if t.state.name == "COMPLETE"]
    assert len(after) == 12  # the budget, no more
    assert before == after[: len(before)]  # nothing completed was lost or re-run
    plans = [
        json.dumps(t.user_attrs["plan"], sort_keys=True)
        for t in result.study.trials
        if t.state.name == "COMPLETE"
    ]
    assert len(set(plans)) == 12  # the resumed sampler did not replay the plans already run
    # one finished MLflow trial run per completed trial, none twice, none left RUNNING
    client = _client()
    runs = client.search_runs(
        [client.get_run(result.mlflow_run_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{result.mlflow_run_id}'",
    )
    numbers = [int(r.data.tags["frontier.trial"]) for r in runs]
    assert len(numbers) == len(set(numbers))
    assert {n for n, _ in after} <= set(numbers)
    assert {r.info.status for r in runs} <= {"FINISHED", "FAILED"}
    # MLflow's front is the front the search printed, at the same rungs and values
    capsys.readouterr()
    assert main(["pareto", "--experiment", "tiny", "--format", "json"]) == 0
    logged = {r["trial"]: r for r in json.loads(capsys.readouterr().out)}
    printed = result.pareto.set_index("trial")
    assert set(logged) == set(printed.index)
    for n, row in logged.items():
        assert row["accuracy"] == pytest.approx(printed.loc[n, "accuracy"])
        assert row["rung"] == printed.loc[n, "rung"]
    # and pick returns the member the search would
    assert main(["pick", "--best", "accuracy", "--no-measure"]) == 0
    picked = json.loads(capsys.readouterr().out)
    assert picked["metrics"]["accuracy"] == pytest.approx(printed["accuracy"].max())


def test_a_promotion_a_stopped_search_never_measured_runs_on_resume(write_config, capsys) -> None:
    """A kill while a plan sent up on hope is at the next rung leaves the study saying it
    went up and no result for it there: the resumed search measures it first."""
    import optuna

    path = write_config(constraints=[])
    first = run(path, progress=False)
    study = optuna.load_study(study_name="tiny", storage=open_storage("frontier-optuna.journal"))
    promoted = {
        int(k.rsplit(".", 1)[1]) for k in study.user_attrs if k.startswith("frontier.rungs.")
    }
    waiting = [
        t.number
        for t in study.trials
        if t.state.name == "COMPLETE" and t.number not in promoted | set(first.pareto.trial)
    ]
    assert waiting  # a plan off the front, measured at rung 0 only
    state = {**study.user_attrs["frontier.promotion"], "hoped": {"0": waiting[:1]}}
    study.set_user_attr("frontier.promotion", state)  # what the killed driver had saved
    capsys.readouterr()
    again = run(path, resume=True, progress="lines")
    assert f"never got back: trial {waiting[0]} at rung 1" in capsys.readouterr().err
    assert "1" in again.study.user_attrs[f"frontier.rungs.{waiting[0]}"]


def test_resume_repairs_what_a_killed_driver_left_in_mlflow(write_config) -> None:
    # what a SIGKILL can leave: a trial run half written (RUNNING, no metrics), a front
    # member whose tag was never set, a trial never logged at all
    path = write_config()
    first = run(path, progress=False)
    client = _client()
    exp = client.get_run(first.mlflow_run_id).info.experiment_id
    flt = f"tags.mlflow.parentRunId = '{first.mlflow_run_id}'"
    runs = {int(r.data.tags["frontier.trial"]): r for r in client.search_runs([exp], flt)}
    members = sorted(first.pareto["trial"])
    client.set_tag(runs[members[0]].info.run_id, "frontier.pareto", "false")
    client.update_run(runs[members[-1]].info.run_id, status="RUNNING")
    gone = next(n for n in runs if n not in members)
    client.delete_run(runs[gone].info.run_id)
    again = run(path, resume=True, progress=False)
    runs_after = client.search_runs([exp], flt)
    by_trial = {int(r.data.tags["frontier.trial"]): r for r in runs_after}
    assert len(by_trial) == len(runs_after) == len(runs)  # each trial once
    assert {r.info.status for r in runs_after} <= {"FINISHED", "FAILED"}
    tagged = {n for n, r in by_trial.items() if r.data.tags["frontier.pareto"] == "true"}
    assert tagged == set(again.pareto["trial"]) == set(members)
    assert "size_bytes" in by_trial[members[-1]].data.metrics  # logged again, whole


def test_cli_search_pareto_pick_round_trip(write_config, workdir: Path, capsys) -> None:
    path = write_config(
        constraints=["size_bytes <= 30000"],
        search={"fidelity": {"rungs": ["short", "full"], "promote": 0.5, "finish": False}},
    )
    assert main(["search", str(path), "--no-progress"]) == 0
    # what promotion saved: 12 trials at the short rung, a few measured at the full one
    out = capsys.readouterr().out.splitlines()
    line = next(s for s in out if s.startswith("promotion:"))
    assert line.startswith("promotion: 12 trials, ") and "at the full rung" in line
    # size_bytes <= 30000 rules plans out at the rung that scored them, said per rung
    ruled = next(s for s in out if s.startswith("ruled out by a constraint: "))
    assert " at rung short" in ruled
    assert main(["pareto", "--experiment", "tiny", "--format", "json"]) == 0
    front = json.loads(capsys.readouterr().out)
    assert front and all(row["size_bytes"] <= 30000 for row in front)
    assert main(["pareto", "--where", "size_bytes <= 1", "--format", "csv"]) == 0
    assert capsys.readouterr().out.strip().count("\n") == 0  # the header, no rows
    assert main(["pick", "--best", "accuracy", "--export", "picked", "--register", "tiny"]) == 0
    picked = capsys.readouterr()
    report = json.loads(picked.out)
    # the most accurate member measured at the top rung: a cheap rung's accuracy is not
    # comparable with it (the search left members at the short rung: finish is off)
    finished = [r for r in front if r["rung"] == "full"]
    assert finished and len(finished) < len(front)
    best = max(finished, key=lambda r: r["accuracy"])
    assert report["run_id"] == best["run_id"] and "warning" not in picked.err
    unfinished = next(r for r in front if r["rung"] == "short")
    assert main(["pick", unfinished["run_id"], "--export", "unfinished", "--no-measure"]) == 0
    err = capsys.readouterr().err
    assert f"warning: trial {unfinished['trial']} was measured at rung 'short' only" in err
    assert report["registered"]["alias"] == "champion"
    plan = json.loads((workdir / "picked" / "plan.json").read_text())
    assert "prune" in plan
    # the exported model reproduces its logged accuracy on the split it was measured on
    from frontier.experiments import build_task

    task = build_task("digits", model="mlp")
    split = "val"  # every rung scores the validation split
    x, y = task.splits()[split]
    session = ort.InferenceSession(str(workdir / "picked" / "model.onnx"))
    name = session.get_inputs()[0].name
    preds = [
        int(np.argmax(session.run(None, {name: x[i : i + 1].numpy()})[0])) for i in range(len(x))
    ]
    onnx_acc = float(np.mean(np.array(preds) == y.numpy()))
    assert abs(onnx_acc - report["metrics"]["accuracy"]) <= 0.005
    # resumed with finish on, the search measures the members it left at the top rung
    args = [
        "search",
        str(path),
        "--resume",
        "--no-progress",
        "--set",
        "search.fidelity.finish=true",
    ]
    assert main(args) == 0
    assert "finishing the front" in capsys.readouterr().err
    assert main(["pareto", "--experiment", "tiny", "--format", "json"]) == 0
    assert {row["rung"] for row in json.loads(capsys.readouterr().out)} == {"full"}


def test_malformed_config_names_the_field(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("objectives: [accuracy, latency_ms]\nsearch: {sampler: cmaes}\n")
    assert main(["search", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: objectives.1.name: latency_ms needs a device" in err
    assert (
        f"{path}: search.sampler: unknown sampler 'cmaes'; known: gp, grid, nsga2, random, surrogate, tpe"
        in err
    )
    path.write_text("constraints: ['size_bytes < 3']\n")
    assert main(["search", str(path)]) == 2
    assert "constraints: constraint 'size_bytes < 3' must read" in capsys.readouterr().err


def test_resume_without_a_search_says_so(write_config, capsys) -> None:
    path = write_config()
    assert main(["search", str(path), "--resume", "--no-progress"]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_builtin_digits_mcu_config() -> None:
    config = load_config("digits-mcu")
    assert config.metric_names() == ["accuracy", "size_bytes", "latency_ms@local-cpu"]
    assert config.device_names() == ["local-cpu"]
    assert [str(c) for c in config.parsed_constraints()] == ["size_bytes <= 32768"]


def _kill_a_pool_worker(stop, killed: list[int]) -> None:
    import psutil

    me = psutil.Process()
    while not stop.is_set() and not killed:
        workers = [p for p in me.children() if "spawn_main" in " ".join(p.cmdline())]
        if workers:
            time.sleep(4.0)  # importing torch, building the task, or mid-trial
            workers[0].send_signal(signal.SIGKILL)
            killed.append(workers[0].pid)
            return
        time.sleep(0.05)


@pytest.mark.slow
def test_local_worker_processes_survive_a_killed_worker(write_config) -> None:
    import threading

    path = write_config(constraints=["size_bytes <= 30000"])
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_a_pool_worker, args=(stop, killed), daemon=True)
    killer.start()
    try:
        result = run(path, trials=8, workers=2, progress=False)
    finally:
        stop.set()
        killer.join(timeout=10)
    assert killed
    assert len(result.trials) == 8 and (result.trials.state == "complete").all()
    assert not result.pareto.empty


def test_uniform_anchors_are_tried_first(write_config) -> None:
    path = write_config(constraints=[])
    result = run(path, trials=9, progress=False)
    seen = set()
    for t in result.study.trials:
        ratios = {v for k, v in t.params.items() if k.startswith("prune.")}
        wbits = {v for k, v in t.params.items() if k.startswith("wbits.")}
        assert len(ratios) == 1 and len(wbits) == 1  # every layer the same
        seen.add((ratios.pop(), wbits.pop()))
    assert seen == {(r, b) for r in (0.0, 0.5, 0.75) for b in (4, 8, 32)}


def test_buffered_journal_is_durable_at_flush(tmp_path: Path) -> None:
    import optuna

    path = str(tmp_path / "j.journal")
    writer = open_storage(path, single_writer=True)
    study = optuna.create_study(study_name="s", storage=writer)
    for x in (1.0, 2.0):
        trial = study.ask()
        study.tell(trial, trial.suggest_float("x", 0, 3) + x)
    assert optuna.get_all_study_names(open_storage(path)) == []  # not on disk yet
    writer.flush()
    reader = optuna.load_study(study_name="s", storage=open_storage(path))
    assert [t.state.name for t in reader.trials] == ["COMPLETE", "COMPLETE"]
    assert [t.params for t in reader.trials] == [t.params for t in study.trials]
    trial = study.ask()  # the writer goes on from where the file ends
    study.tell(trial, 0.5)
    writer.flush()
    assert len(optuna.load_study(study_name="s", storage=open_storage(path)).trials) == 3


def test_relative_constraints_hold_on_the_front(write_config) -> None:
    path = write_config(constraints=["size_bytes <= 15%", "accuracy >= baseline - 0.5"])
    result = run(path, trials=8, progress=False)
    baseline = result.study.user_attrs["frontier.baseline"]
    assert not result.pareto.empty
    assert (result.pareto.size_bytes <= 0.15 * baseline["size_bytes"]).all()
    assert (result.pareto.accuracy >= baseline["accuracy"] - 0.5).all()


def test_a_second_driver_on_the_same_journal_is_refused(write_config, workdir: Path) -> None:
    from frontier.search import SearchError, driver_lock

    journal = str(workdir / "frontier-optuna.journal")
    held = driver_lock(journal)  # as a running search holds it
    try:
        with pytest.raises(SearchError, match="another frontier search"):
            run(write_config(), trials=2, progress=False)
    finally:
        held.release()
    assert len(run(write_config(), trials=2, progress=False).trials) == 2  # free again


def test_pareto_and_pick_without_a_search_create_nothing(workdir: Path, capsys) -> None:
    for argv in (["pareto"], ["pick", "--best", "accuracy"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"no MLflow database at {workdir / 'mlflow.db'}" in err
    assert not (workdir / "mlflow.db").exists()


def test_a_search_with_no_feasible_plan_finishes_and_says_so(write_config, capsys) -> None:
    path = write_config(constraints=["size_bytes <= 10", "accuracy >= 0.2"])
    argv = ["search", str(path), "--no-progress", "--trials", "8", "--set", "search.population=4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "no plan met the constraints" in out
    assert "closest: size_bytes <= 10" in out  # accuracy >= 0.2 holds somewhere; size never
    trials = _complete(path.parent / "frontier-optuna.journal")
    assert len(trials) == 8  # every trial recorded


class _Seen(Callback):
    """A user's callback: remembers what the search told it."""

    def __init__(self) -> None:
        self.trials: list[int] = []
        self.generations: list[int] = []
        self.finished = ""

    def on_trial(self, search, record) -> None:
        self.trials.append(record.number)

    def on_generation(self, search, final) -> None:
        self.generations.append(search.generation)

    def on_finish(self, search, status) -> None:
        self.finished = status


def test_user_sampler_object_and_callback(write_config) -> None:
    import optuna

    seen = _Seen()
    sampler = optuna.samplers.RandomSampler(seed=3)
    result = run(
        write_config(search={"anchors": False}), sampler=sampler, callbacks=[seen], progress=False
    )
    assert result.study.sampler is sampler
    assert sorted(seen.trials) == sorted(result.trials.trial) and len(seen.trials) == 12
    assert seen.generations == sorted(seen.generations) and len(seen.generations) >= 3
    assert seen.finished == "FINISHED"
    client = _client()
    assert client.get_run(result.mlflow_run_id).data.params["sampler"] == "RandomSampler"


def test_a_sampler_that_repeats_itself_runs_no_plan_twice(write_config) -> None:
    import optuna

    class Stuck(optuna.samplers.RandomSampler):
        """Proposes the same plan over and over (a converged sampler, a replay)."""

        def sample_independent(self, study, trial, name, distribution):
            return distribution.choices[0]

    result = run(write_config(search={"anchors": False}), sampler=Stuck(seed=0), progress=False)
    plans = [
        json.dumps(t.user_attrs["plan"], sort_keys=True)
        for t in result.study.trials
        if t.state.name == "COMPLETE"
    ]
    assert len(plans) == 12 and len(set(plans)) == 12
    refused = [t for t in result.study.trials if t.state.name == "PRUNED"]
    assert refused and all("frontier.duplicate_of" in t.user_attrs for t in refused)


def test_without_a_terminal_a_line_per_generation(write_config, capsys) -> None:
    assert main(["search", str(write_config()), "--no-progress"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("frontier: generation ")]
    assert len(lines) >= 3 and "12/12 trials" in lines[-1] and "HV" in lines[-1]


def test_promotion_savings_estimate_the_top_rung_for_every_trial() -> None:
    from frontier.search import promotion_savings

    # 10 trials at 1 s on the cheap rung, 2 promoted at 20 s each to the top rung
    saved = promotion_savings({0: [1.0] * 10, 1: [20.0, 20.0]})
    assert saved["top_rung_only_s"] == 200.0  # every trial at the top rung
    assert saved["promotion_saved_s"] == 200.0 - 50.0
    assert saved["rung0_evaluations"] == 10 and saved["rung1_evaluations"] == 2
    assert promotion_savings({0: [1.0] * 10}) == {}  # nothing went up: nothing to say


def test_a_rung_that_underestimates_is_adapted_to_and_the_front_fills(write_config, capsys) -> None:
    # a short rung of one step scores pruned plans far below what fine-tuning gives them:
    # as configured, the front holds one compressed plan; adapting finds several
    over = {
        "objectives": [{"name": "accuracy", "options": {"steps": 1, "full_factor": 200}}, "size_bytes"],
        "space": {"prune_ratios": [0.5, 0.75], "weight_bits": [4, 8], "act_bits": [32], "round_to": 8},
        "constraints": ["accuracy >= baseline - 0.05"],
    }  # fmt: skip
    search = {"trials": 16, "population": 8, "anchors": False}
    fixed = write_config(
        "fixed.yaml", name="fixed", search={**search, "fidelity": {"rungs": ["short", "full"], "adapt": False}}, **over
    )  # fmt: skip
    adapted = write_config(
        "adapted.yaml", name="adapted", search={**search, "fidelity": {"rungs": ["short", "full"]}}, **over
    )  # fmt: skip
    before = run(fixed, progress="lines").pareto
    capsys.readouterr()
    result = run(adapted, progress="lines")
    after = result.pareto
    err = capsys.readouterr().err
    assert "to learn how far rung 0 falls short" in err and "falls short of rung 1 by" in err
    # one step against a margin of 0.05: the rung cannot separate, and the search says so
    assert "so it cannot tell feasible pruned plans from infeasible ones" in err
    bound = load_config(adapted).parsed_constraints()[0]
    assert (after.rung == "full").sum() >= 3  # measured where they are feasible
    assert len(after) >= 3 > len(before)
    base = result.study.user_attrs["frontier.baseline"]
    assert (after.accuracy >= bound.resolve(base).bound).all()


def test_the_summary_counts_repeats_the_study_holds(write_config, capsys) -> None:
    """A space of 2 plans and a budget of 6: the refused repeats are recorded as PRUNED
    (so trial numbers run past the budget), and the summary says how many."""
    import optuna

    path = write_config(
        space={"prune_ratios": [0.0, 0.5], "weight_bits": [32]},
        constraints=[],
        search={"trials": 6, "population": 3, "anchors": False},
    )
    assert main(["search", str(path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    storage = open_storage("frontier-optuna.journal")
    study = optuna.load_study(study_name="tiny", storage=storage)
    pruned = len(study.get_trials(states=(optuna.trial.TrialState.PRUNED,)))
    assert pruned > 0
    assert f"; {pruned} repeated plans skipped, recorded as PRUNED in the study" in out, out


def test_the_terminal_holds_only_frontiers_own_lines(write_config, workdir: Path) -> None:
    """MLflow's "Creating initial MLflow database tables..." and CodeCarbon's lines go to
    third-party.log in the data dir, not the terminal, under the ``frontier`` command."""
    path = write_config(search={"trials": 4, "population": 2})
    cmd = [sys.executable, "-m", "frontier.search.cli", "search", str(path), "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    # other libraries' log lines: MLflow's "2026/11/28 09:12:08 INFO mlflow.store...",
    # CodeCarbon's "[codecarbon WARNING @ ...]", Python logging's "INFO:alembic..."
    foreign = re.compile(r"^(\d{4}/\d\d/\d\d [\d:]+ [A-Z]+ |\[codecarbon|[A-Z]+:[a-z])")
    assert lines and not [line for line in lines if foreign.match(line)], lines
    log = Path(os.environ["FRONTIER_DATA_DIR"]) / "third-party.log"
    assert "mlflow" in log.read_text()  # kept, not lost


def test_a_search_is_cheap_to_build_and_prepares_when_asked(
    write_config, tmp_path, monkeypatch, capsys
) -> None:
    """``Search(config)`` reads the config and nothing more: no baseline is trained and no
    table measured until ``prepare()`` (which ``run()`` calls); the CLI prints what it
    says after the front from the search's public report."""
    monkeypatch.setenv("FRONTIER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FRONTIER_CACHE_DIR", str(tmp_path / "cache"))
    path = write_config(
        objectives=[{"name": "accuracy", "options": {"steps": 20}}, "latency_ms@local-cpu"],
        constraints=[],
        search={"trials": 4, "population": 4, "fidelity": {"rungs": ["proxy", "short"]}},
    )
    start = time.monotonic()
    search = Search(path, progress=False)
    assert time.monotonic() - start < 5
    assert not (tmp_path / "cache").exists() and not (tmp_path / "data").exists()
    with pytest.raises(RuntimeError, match=r"call prepare\(\)"):
        search.evaluation  # noqa: B018
    assert search.prepare() is search
    assert list((tmp_path / "cache").glob("digits-mlp-*.pt"))  # the baseline, trained
    assert (tmp_path / "data" / "devices" / "local-cpu" / "table.csv").exists()
    assert [o.name for o in search.objectives] == ["accuracy", "latency_ms@local-cpu"]
    search.prepare()  # a second call does nothing
    search.run()
    report = search.report()
    assert report.train_devices == {"cpu": 4}
    assert "local-cpu" in report.noise_bands
    capsys.readouterr()
    assert main(["search", str(path), "--new", "--trials", "4", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "trials trained and scored on: cpu (4 trials)" in printed
    assert f"latency: {report.noise_bands['local-cpu']}" in printed
