"""Where a search's time went: the loop, the evaluations inside it, the exports, and
what multi-fidelity promotion saved."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Timing:
    """Seconds of a search. ``eval_s`` counts the evaluations it finished (for workers:
    their own time), so ``loop_s - eval_s`` is the engine's overhead."""

    loop_s: float = 0.0
    eval_s: float = 0.0
    #: the jobs exporting their scored models (not in ``eval_s``)
    export_s: float = 0.0
    #: each finished evaluation's seconds, by rung
    rung_s: dict[int, list[float]] = field(default_factory=dict)

    def add(self, rung: int, wall_s: float, export_s: float = 0.0) -> None:
        self.eval_s += wall_s
        self.export_s += export_s
        self.rung_s.setdefault(rung, []).append(wall_s)

    def summary(self) -> dict[str, float]:
        return {
            "search_loop_s": self.loop_s,
            "evaluation_s": self.eval_s,
            "job_export_s": self.export_s,
            **promotion_savings(self.rung_s),
        }


def promotion_savings(rung_s: dict[int, list[float]]) -> dict[str, float]:
    """What multi-fidelity promotion saved, from the seconds of each evaluation by rung:
    ``top_rung_only_s`` estimates scoring every trial at the highest rung reached (the
    trials times that rung's mean evaluation), ``promotion_saved_s`` is that minus what
    all evaluations took. Empty with one rung, or when no trial went up."""
    top = max(rung_s, default=0)
    if top == 0 or not rung_s.get(0) or not rung_s[top]:
        return {}
    trials = len(rung_s[0])
    estimate = trials * sum(rung_s[top]) / len(rung_s[top])
    spent = sum(sum(v) for v in rung_s.values())
    out = {f"rung{r}_evaluations": float(len(v)) for r, v in sorted(rung_s.items())}
    return {**out, "top_rung_only_s": estimate, "promotion_saved_s": estimate - spent}
