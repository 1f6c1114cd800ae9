"""Every benchmark script imports and answers ``--help`` (a benchmark that fails on
import is found here, not when someone needs its figures)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_imports_and_answers_help(script: Path, monkeypatch, capsys) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # benchmarks import their siblings
    if "argparse" not in script.read_text():  # no options: importing it is the check
        runpy.run_path(str(script), run_name="imported")
        return
    monkeypatch.setattr(sys, "argv", [script.name, "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(script), run_name="__main__")
    assert done.value.code == 0
    assert "usage:" in capsys.readouterr().out
