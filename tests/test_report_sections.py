"""REPORT's targets: one value gives the text a reader sees and the check, so a figure
over its target reads MISSED beside the same target it was checked against."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_a_target_reads_as_it_is_checked(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop("report_sections", None)
    from report_sections import at_least, at_most, figure_rows

    assert str(at_least(0.95, "95%")) == ">= 95%" and at_least(0.95, "95%").met(0.95)
    assert str(at_most(5, "5 s")) == "<= 5 s" and not at_most(5, "5 s").met(5.01)
    rows = figure_rows({"spaces": {"discover_s": 6.0, "apply_s": 1.5}})
    assert rows == [
        ("discover(resnet50), median", "6.00 s", "<= 5 s", "MISSED"),
        ("apply_plan(resnet50), median", "1.50 s", "<= 2 s", "met"),
    ]
