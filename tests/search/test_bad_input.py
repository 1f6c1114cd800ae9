"""Bad input on the command line: exit 2, one line that names the file, field or option,
no traceback, and no long work done before the check."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from frontier.search.cli import main


def _fails(capsys, args: list[str], says: str, within_s: float = 20.0) -> None:
    start = time.monotonic()
    assert main(args) == 2
    assert time.monotonic() - start < within_s  # refused before long work
    err = capsys.readouterr().err
    assert says in err, err
    assert "Traceback" not in err


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
