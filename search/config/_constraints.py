"""Constraints on objectives (``size_bytes <= 32768``, ``macs <= 60%``, ``accuracy >=
baseline - 0.02``): parsed from a config's text, made absolute against the baseline."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: metrics that count whole things: shown as integers
COUNTED = ("size_bytes", "macs", "bops", "params")


def number_text(metric: str, value: float) -> str:
    """``value`` of ``metric`` as people write it: counts (bytes, MACs) as integers, other
    figures to 6 significant digits without an exponent where one is not needed
    (0.0001 to 1e15)."""
    if metric.partition("@")[0].rpartition(".")[2] in COUNTED and math.isfinite(value):
        return str(round(value))
    text = f"{value:.6g}"
    if "e" in text and 1e-4 <= abs(value) < 1e15:
        text = f"{float(text):f}".rstrip("0").rstrip(".")
    return text


_CONSTRAINT = re.compile(r"^\s*(?P<name>[A-Za-z_][\w@.\-]*)\s*(?P<op><=|>=)\s*(?P<bound>\S.*?)\s*$")


@dataclass(frozen=True)
class Constraint:
    """``objective <= bound`` or ``objective >= bound``; feasible when ``violation <= 0``.

    The bound is a number (``size_bytes <= 32768``), a share of the uncompressed
    baseline's value (``macs <= 60%``), or the baseline plus or minus a number
    (``accuracy >= baseline - 0.02``: at most 2 points lost). Relative bounds are made
    absolute with ``resolve(baseline)`` once the baseline is measured.
    """

    objective: str
    op: str
    bound: float
    #: "abs", "share" (bound is a fraction of the baseline) or "offset" (added to it)
    relative: str = "abs"

    @classmethod
    def parse(cls, text: str) -> Constraint:
        """Parse ``"latency_ms@pi4 <= 20"``; raises ValueError naming the text."""
        m = _CONSTRAINT.match(text)
        if m is None:
            raise ValueError(
                f"constraint {text!r} must read 'OBJECTIVE <= BOUND' or 'OBJECTIVE >= BOUND' "
                "(BOUND: a number, N% of the baseline, or baseline +/- N)"
            )
        raw = m["bound"].replace(" ", "")
        relative, number = "abs", raw
        if raw.endswith("%"):
            relative, number = "share", raw[:-1]
        elif raw.startswith("baseline"):
            relative, number = "offset", raw.removeprefix("baseline") or "0"
        try:
            bound = float(number)
        except ValueError:
            raise ValueError(f"constraint {text!r}: bound {m['bound']!r} is not a number") from None
        if not math.isfinite(bound):
            raise ValueError(f"constraint {text!r}: bound must be finite")
        if relative == "share":
            bound /= 100.0
        return cls(m["name"], m["op"], bound, relative)

    def resolve(self, baseline: dict[str, float]) -> Constraint:
        """This constraint with an absolute bound, given the baseline's values."""
        if self.relative == "abs":
            return self
        if self.objective not in baseline:
            raise ValueError(f"constraint {self}: no baseline value of {self.objective!r}")
        base = baseline[self.objective]
        bound = base * self.bound if self.relative == "share" else base + self.bound
        return Constraint(self.objective, self.op, bound)

    def violation(self, value: float) -> float:
        """How far ``value`` is past the bound (<= 0 when satisfied)."""
        if self.relative != "abs":
            raise ValueError(f"constraint {self}: resolve(baseline) it first")
        return value - self.bound if self.op == "<=" else self.bound - value

    def holds(self, value: float) -> bool:
        return self.violation(value) <= 0

    def __str__(self) -> str:
        if self.relative == "share":
            return f"{self.objective} {self.op} {self.bound * 100:g}%"
        if self.relative == "offset":
            sign = "-" if self.bound < 0 else "+"
            return (
                f"{self.objective} {self.op} baseline {sign} "
                f"{number_text(self.objective, abs(self.bound))}"
            )
        return f"{self.objective} {self.op} {number_text(self.objective, self.bound)}"
