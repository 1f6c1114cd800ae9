"""Bad input on the command line: exit 2, one line that names the file, field or option,
no traceback, and no long work done before the check."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from frontier.search.cli import main


def _fails(capsys, args: list[str], says: str, within_s: float = 20.0) -> None:
    start = time.monotonic()
    assert main(args) == 2
    assert time.monotonic() - start < within_s  # refused before long work
    err = capsys.readouterr().err
    assert says in err, err
    assert "Traceback" not in err
    # the refusal is one line, the last (a progress line may come before it)
    lines = err.strip().splitlines()
    refusals = [i for i, line in enumerate(lines) if line.startswith("frontier: error:")]
    assert refusals == [len(lines) - 1], err
    assert all(line.startswith(("frontier", "warning: ")) for line in lines), err


def test_an_empty_config_is_an_error(workdir: Path, capsys) -> None:
    (workdir / "empty.yaml").write_text("")
    _fails(capsys, ["search", "empty.yaml"], "empty.yaml: the file is empty")


def test_a_tracking_uri_mlflow_cannot_use(write_config, capsys) -> None:
    path = write_config()
    _fails(capsys, ["search", str(path), "--tracking-uri", "foo://bar"], "'foo://bar'")
    _fails(capsys, ["pareto", "--tracking-uri", "foo://bar"], "MLflow cannot store runs there")


@pytest.fixture
def blocked(workdir: Path) -> Path:
    """A folder nothing can be written in, for root too: a path below a file."""
    (workdir / "afile").write_text("x")
    return workdir / "afile" / "sub"


def test_unwritable_folders_fail_before_any_work(write_config, blocked: Path, capsys) -> None:
    path = write_config()
    _fails(capsys, ["search", str(path), "--storage", str(blocked / "j")], "the study journal")
    sqlite = f"sqlite:///{blocked / 's.db'}"  # SQLite alone says "unable to open database file"
    _fails(capsys, ["search", str(path), "--storage", sqlite], "afile is a file, not a folder")
    uri = f"sqlite:///{blocked / 'mlflow.db'}"
    _fails(capsys, ["search", str(path), "--tracking-uri", uri], f"in {blocked}")
    _fails(
        capsys,
        ["sensitivity", str(path), "--rung", "proxy", "--out", str(blocked)],
        "the sensitivity table (--out)",
    )
    _fails(
        capsys,
        ["plan", str(path), "--export", str(blocked / "m.onnx")],
        "the exported model (--export)",
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_read_only_working_directory(write_config, workdir: Path, capsys) -> None:
    path = write_config()
    workdir.chmod(0o555)
    try:
        _fails(capsys, ["search", str(path)], "cannot write")
    finally:
        workdir.chmod(0o755)


def test_pick_best_names_the_metrics(write_config, capsys) -> None:
    path = write_config(search={"trials": 2, "population": 2, "anchors": False})
    assert main(["search", str(path), "--no-progress"]) == 0
    capsys.readouterr()
    _fails(capsys, ["pick", "--best", "nosuch"], "--best: 'nosuch' is not a metric")


def test_a_binary_file_or_a_folder_as_the_config(workdir: Path, capsys) -> None:
    (workdir / "model.yaml").write_bytes(bytes(range(256)) * 4)
    _fails(capsys, ["search", "model.yaml"], "model.yaml: not a text file")
    (workdir / "configs").mkdir()
    _fails(capsys, ["space", "configs"], "configs: is a folder")


def test_a_key_given_twice_is_refused_with_its_line(workdir: Path, capsys) -> None:
    (workdir / "dup.yaml").write_text(
        "name: dup\ntask: {name: digits}\nsearch:\n  trials: 3\n  seed: 1\n  trials: 50\n"
    )
    _fails(capsys, ["space", "dup.yaml"], "line 6: key 'trials' is given twice (first on line 4)")


def test_a_config_without_a_task_is_refused(workdir: Path, capsys) -> None:
    (workdir / "notask.yaml").write_text("name: x\nobjectives: [size_bytes]\n")
    _fails(capsys, ["search", "notask.yaml"], "notask.yaml: no task")


@pytest.mark.parametrize(
    "args",
    [
        ["lut", "measure", "ops.zip", "--device", "d", "--out", "t.csv", "--threads", "0"],
        ["lut", "measure", "ops.zip", "--device", "d", "--out", "t.csv", "--rounds", "-1"],
        ["search", "digits-mcu", "--trials", "-3"],
        ["search", "digits-mcu", "--workers", "0"],
        ["profile", "m.onnx", "--runs", "0"],
        ["lut", "ops", "digits-mcu", "--out", "o.zip", "--validation", "-1"],
    ],
    ids=[
        "threads-0",
        "rounds-negative",
        "trials-negative",
        "workers-0",
        "runs-0",
        "validation-negative",
    ],
)
def test_numbers_out_of_range_are_refused(workdir: Path, capsys, args: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "must be >= " in err and "Traceback" not in err
    # one line, pointing at the help (not argparse's usage block)
    assert len(err.strip().splitlines()) == 1 and err.strip().endswith("--help)"), err


def test_a_file_where_a_folder_is_expected_and_the_reverse(
    write_config, workdir: Path, capsys
) -> None:
    path = write_config()
    (workdir / "afile").write_text("x")
    (workdir / "adir").mkdir()
    (workdir / "store.yaml").write_text(path.read_text() + "device_store: afile\n")
    _fails(capsys, ["search", "store.yaml"], "the device store afile: afile is a file")
    _fails(capsys, ["lut", "list", "--store", "afile/sub"], "afile is a file, not a folder")
    _fails(capsys, ["search", str(path), "--storage", "adir"], "study journal (--storage) adir")
    _fails(capsys, ["lut", "ops", str(path), "--out", "adir"], "to adir: it is a folder")
    _fails(capsys, ["plan", str(path), "--export", "adir"], "to adir: it is a folder")


def test_a_binary_journal_or_model_is_named(write_config, workdir: Path, capsys) -> None:
    path = write_config()
    (workdir / "journal").write_bytes(bytes(range(256)) * 4)
    _fails(capsys, ["search", str(path), "--storage", "journal"], "journal: not an Optuna journal")
    (workdir / "m.onnx").write_bytes(bytes(range(256)) * 4)
    _fails(capsys, ["profile", "m.onnx", "--runs", "10"], "m.onnx: not an ONNX model")
    (workdir / "empty.onnx").write_bytes(b"")
    _fails(capsys, ["profile", "empty.onnx", "--runs", "10"], "empty.onnx: an ONNX file with no")
    (workdir / "models").mkdir()
    _fails(capsys, ["profile", "models", "--runs", "10"], "models: is a folder")
    _fails(capsys, ["lut", "import", "models", "--name", "x"], "models: is a folder")


def test_pick_export_paths_that_cannot_hold_the_model(write_config, workdir: Path, capsys) -> None:
    path = write_config(search={"trials": 2, "population": 2, "anchors": False})
    assert main(["search", str(path), "--no-progress"]) == 0
    capsys.readouterr()
    (workdir / "afile").write_text("x")
    (workdir / "out" / "model.onnx").mkdir(parents=True)
    pick = ["pick", "--best", "accuracy", "--no-measure", "--export"]
    _fails(capsys, [*pick, "afile"], "--export afile: is a file")
    _fails(capsys, [*pick, "afile/sub"], "afile is a file, not a folder")
    _fails(capsys, [*pick, "out"], "out/model.onnx is a folder")
    assert (workdir / "afile").read_text() == "x"  # nothing of the user's is lost


USER_TASKS = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from frontier.experiments import Loaders, Task


def _data(n, seed):
    x = torch.randn(n, 64, generator=torch.Generator().manual_seed(seed))
    return TensorDataset(x, (x[:, 0] > 0).long())


class Small(Task):
    def __init__(self, model="mlp", example_width=64, train_empty=False):  # model: BASE's
        self.width, self.train_empty, self._model = example_width, train_empty, None
        self.kind = model

    def loaders(self, *, batch_size=32):
        val, test = (DataLoader(_data(128, s), batch_size=batch_size) for s in (1, 2))
        train = DataLoader(_data(0 if self.train_empty else 256, 0), batch_size=batch_size)
        return Loaders(train=train, val=val, test=test)

    def example_inputs(self):
        return torch.randn(1, self.width)

    def baseline(self):
        if self._model is None:
            torch.manual_seed(0)
            self._model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 2)).eval()
            if self.kind == "pool-up":  # a 2x2 map max-pooled up to 3x3: no ONNX form
                self._model = nn.Sequential(
                    nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 4, 3, stride=4),
                    nn.AdaptiveMaxPool2d(3), nn.Flatten(), nn.Linear(36, 2),
                ).eval()
        return self._model
"""


@pytest.fixture
def small_task(workdir: Path, monkeypatch: pytest.MonkeyPatch):
    (workdir / "user_tasks_bad.py").write_text(USER_TASKS)
    monkeypatch.syspath_prepend(str(workdir))

    def config(write_config, **options) -> Path:
        return write_config(
            task={"name": "user_tasks_bad:Small", "options": options, "check_baseline": False},
            space={"prune_ratios": [0.0, 0.25, 0.5], "weight_bits": [8, 32]},
            search={"trials": 12, "population": 4, "anchors": False},
            constraints=[],
        )

    return config


def test_a_model_pytorch_cannot_export_to_onnx_is_one_line(
    write_config, small_task, capsys
) -> None:
    """Its table needs the model as ONNX: the refusal names PyTorch's reason and the
    example inputs, before any trial."""
    path = small_task(write_config, model="pool-up")
    config = yaml.safe_load(path.read_text())
    config["objectives"] = ["accuracy", "latency_ms@local-cpu"]
    path.write_text(yaml.safe_dump(config))
    _fails(
        capsys,
        ["search", str(path), "--no-progress"],
        "cannot be exported to ONNX, which Frontier times and deploys it as (example inputs "
        "(1, 64)): PyTorch says: Unsupported: ONNX export of operator adaptive_max_pool2d",
    )


def test_a_model_and_example_that_disagree_name_both_shapes(
    write_config, small_task, capsys
) -> None:
    path = small_task(write_config, example_width=100)
    _fails(capsys, ["search", str(path)], "example inputs (1, 100)")
    _fails(capsys, ["space", str(path)], "(1x100 and 64x32) (its validation batches are (32, 64))")


@pytest.mark.parametrize(
    ("rungs", "says"),
    [(["short"], "the first 3 trials all"), (["proxy", "short"], "3 promotions to the short rung")],
)
def test_a_search_whose_first_trials_fail_alike_stops_and_resumes(
    write_config, small_task, capsys, rungs: list[str], says: str
) -> None:
    path = small_task(write_config, train_empty=True)
    args = ["search", str(path), "--no-progress", "--set", f"search.fidelity.rungs={rungs}"]
    _fails(capsys, args, says, 120)
    capsys.readouterr()
    assert main([*args, "--resume", "--set", "task.options.train_empty=false"]) == 0
    err = capsys.readouterr().err
    assert "front: 0 models" not in err, err
    if rungs == ["short"]:
        assert "(3 failed)" in err, err


def test_a_config_that_is_not_yaml_is_named_by_line_and_column(workdir: Path, capsys) -> None:
    (workdir / "bad.yaml").write_text("name: x\n  task: [\n")
    _fails(capsys, ["search", "bad.yaml"], "bad.yaml:2:7: not valid YAML: mapping values")


def _table(path: Path, medians: list[str]) -> Path:
    header = "model_id,kind,key,op_type,precision,status,median_ms,p10_ms,p90_ms,runs\n"
    rows = [f"m{i},op,Conv|k{i}|fp32,Conv,fp32,ok,{m},1,1,10\n" for i, m in enumerate(medians)]
    path.write_text(header + "".join(rows))
    return path


def test_a_table_with_bad_rows_is_one_line_and_lists_them_all_in_a_file(
    workdir: Path, capsys
) -> None:
    path = _table(workdir / "t.csv", ["abc", "0.5", *["-1"] * 30])
    _fails(capsys, ["lut", "import", str(path), "--name", "x"],
           "31 bad rows, the first row 2: median_ms must be a number, got 'abc'")  # fmt: skip
    listed = (workdir / "t.csv.rejected").read_text().splitlines()
    assert len(listed) == 31 and listed[-1].startswith("row 33: median_ms must be finite")


def test_a_table_without_its_sidecar_files_is_one_line(workdir: Path, capsys) -> None:
    path = _table(workdir / "t.csv", ["0.5", "0.6"])
    _fails(capsys, ["lut", "import", str(path), "--name", "x"], "no t.csv.meta.json")
