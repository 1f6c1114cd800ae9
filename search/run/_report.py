"""What a finished search says beside its front, as plain data: built once by the
engine (``Search.report``), printed by the CLI, readable from Python."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..tracking._results import noise_bands


@dataclass(frozen=True)
class SearchReport:
    """A finished search, told in lines a user reads after its front.

    Attributes:
        train_devices: accelerator -> trials trained and scored on it.
        promotion: rung 0's trials, the top rung's, and what measuring every trial at
            the top rung would have cost ("" for a single rung).
        ruled_out: plans a constraint ruled out at each rung, and the accuracy each
            lower rung was judged at ("" when none, or a single rung).
        noise_bands: per device, what its table's noise means.
        closest_miss: where no plan met the constraints, the nearest one ("" else).
        notes: what the evaluation noticed (an under-trained baseline...).
        better_teacher: a fine-tuned uncompressed model that beat the baseline, saved
            here ("" when none).
    """

    train_devices: dict[str, int] = field(default_factory=dict)
    promotion: str = ""
    ruled_out: str = ""
    noise_bands: dict[str, str] = field(default_factory=dict)
    closest_miss: str = ""
    notes: tuple[str, ...] = ()
    better_teacher: str = ""

    def lines(self, config_name: str = "CONFIG") -> list[str]:
        """The report as the CLI prints it, after the front (``config_name``: what the
        user searched, for the command that continues with the better teacher)."""
        out = []
        if self.train_devices:
            out.append(
                "trials trained and scored on: "
                + ", ".join(f"{d} ({n} trials)" for d, n in self.train_devices.items())
            )
        if self.promotion:
            out.append(self.promotion)
        if self.ruled_out:
            out.append(self.ruled_out)
        out += [f"latency: {band}" for band in self.noise_bands.values()]
        if self.closest_miss:
            out.append(self.closest_miss)
        out += [f"note: {note}" for note in self.notes]
        if self.better_teacher:
            out.append(
                "continue with the better model as the teacher: frontier search "
                f"{config_name} --set task.teacher={self.better_teacher}"
            )
        return out


def search_report(search: Any) -> SearchReport:
    """The report of ``search`` (a ``Search`` that has run)."""
    devices = Counter(r.train_device for r in search.records.values() if r.train_device)
    rungs = search.evaluation.rungs
    miss = search.front.closest_miss()
    teacher = search.watch.teacher_file
    return SearchReport(
        train_devices=dict(devices.most_common()),
        promotion=_promotion(search.summary, rungs),
        ruled_out=_ruled_out(search.front, rungs),
        noise_bands=noise_bands(search.evaluation),
        closest_miss=(
            f"no plan met the constraints {[str(c) for c in search.constraints]}; {miss}"
            if miss
            else ""
        ),
        notes=tuple(search.evaluation.notes),
        better_teacher=str(teacher) if teacher is not None else "",
    )


def _promotion(saved: dict[str, float], rungs: list[str]) -> str:
    if "promotion_saved_s" not in saved:
        return ""
    # the highest rung reached: the one whose evaluations the summary counts last
    top = max(int(k[4:-12]) for k in saved if k.startswith("rung") and k.endswith("_evaluations"))
    return (
        f"promotion: {saved['rung0_evaluations']:.0f} trials, "
        f"{saved[f'rung{top}_evaluations']:.0f} measured at the {rungs[top]} "
        f"rung; every trial there would have taken about {saved['top_rung_only_s']:.0f} s "
        f"of evaluation, this search's took {saved['evaluation_s']:.0f} s "
        + _saved(saved["promotion_saved_s"])
    )


def _saved(seconds: float) -> str:
    if seconds >= 0.5:
        return f"(saved about {seconds:.0f} s)"
    return (
        f"(about {-seconds:.0f} s more: on a search this small, re-measuring the promoted "
        "plans costs more than the cheap rungs save)"
    )


def _ruled_out(front: Any, rungs: list[str]) -> str:
    ruled = front.ruled_out()
    if not ruled or len(rungs) < 2:
        return ""
    return (
        "ruled out by a constraint: "
        + ", ".join(f"{n} at rung {rungs[r]}" for r, n in ruled.items())
        + " (a plan ruled out below the top rung was not measured there"
        + "".join(
            f"; {kind or 'compressed'} plans at rung {rungs[r]} judged at the accuracy "
            f"learnt to be expected of them at the top rung: {a}"
            for (r, kind), a in front.allowance.items()
        )
        + ")"
    )
