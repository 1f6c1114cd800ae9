"""A finished search's report reads in the order a user needs it, and says nothing it
has nothing to say about."""

from __future__ import annotations

from frontier.search import SearchReport


def test_the_report_prints_each_finding_once_in_order() -> None:
    report = SearchReport(
        train_devices={"cuda:0 (NVIDIA H200)": 30, "cpu": 2},
        promotion="promotion: 32 trials, 8 measured at the full rung",
        noise_bands={"local-cpu": "differences under 9.5% on local-cpu are within its noise"},
        closest_miss="no plan met the constraints ['size_bytes <= 10']; closest: ...",
        notes=("the baseline is under-trained",),
        better_teacher="/w/better.pt",
    )
    assert report.lines("digits-mcu") == [
        "trials trained and scored on: cuda:0 (NVIDIA H200) (30 trials), cpu (2 trials)",
        "promotion: 32 trials, 8 measured at the full rung",
        "latency: differences under 9.5% on local-cpu are within its noise",
        "no plan met the constraints ['size_bytes <= 10']; closest: ...",
        "note: the baseline is under-trained",
        "continue with the better model as the teacher: frontier search digits-mcu "
        "--set task.teacher=/w/better.pt",
    ]
    assert SearchReport().lines() == []
