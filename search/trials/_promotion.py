"""Multi-fidelity promotion: which trials are measured again at a higher rung.

Over 500 lines: the promotion rule, the allowance learnt from promoted plans and the
state a resume restores are one strategy (``SpreadPromotion``) behind the ``Promotion``
interface.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from frontier.spaces import PLAN_KINDS

from ..config._constraints import Constraint
from ..front._front import ACCURACY, Front, Recovery, TrialRecord
from ..front._pareto import pareto_mask

#: a rung whose probed plans gain more accuracy than this a rung up (75th percentile)
#: is promoted from by that shortfall (below it: noise)
MIN_SHORTFALL = 0.02
#: plans measured at a rung and a rung up whose accuracies at the cheap rung span at
#: least this much (and at least 3 of them) say how recovery depends on where a plan
#: starts (``Recovery.curve``); fewer, or closer together, only how much it recovers
MIN_SPREAD = 0.05


class Promotion(ABC):
    """Decides, after each generation, which trials go up a rung."""

    def take_notes(self) -> list[str]:
        """What the strategy decided on its own since the last call, and why (a
        strategy appends such lines to ``self.notes``); the search prints them."""
        notes = list(getattr(self, "notes", []))
        self.__dict__["notes"] = []
        return notes

    def start(self, baseline: Mapping[str, float]) -> None:  # noqa: B027 - optional hook
        """The uncompressed model's values, before the first ``select``."""

    def state(self) -> dict[str, Any]:
        """What the strategy has learnt, as JSON data the study keeps (a resumed search
        hands it back to ``restore``)."""
        return {}

    def restore(self, state: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Take back what ``state`` returned before an interruption."""

    def owed(self, front: Front) -> list[tuple[int, int]]:
        """Promotions the strategy decided on and kept in ``state`` whose results never
        came back (the search stopped while they were queued or running); a resumed
        search runs them first. None by default."""
        return []

    def between(self, front: Front, rungs: int) -> list[tuple[int, int]]:
        """Promotions that should not wait for the generation's end, asked after every
        finished evaluation; none by default."""
        return []

    def allowance(self, rungs: int) -> dict[tuple[int, str], Recovery]:
        """(rung, kind of plan) -> the accuracy a plan of that kind (``plan_kind``; "":
        every kind) measured there is judged at (what the strategy learnt that rung
        falls short of the top rung by; ``Front.allow``); none by default: every rung
        is judged as measured."""
        return {}

    @abstractmethod
    def select(self, front: Front, rungs: int) -> list[tuple[int, int]]:
        """``(trial number, rung to reach)`` pairs; ``rungs`` is how many rungs exist.
        Trials already at or past that rung must not be returned."""


class SpreadPromotion(Promotion):
    """At each rung, a ``share`` of that rung's front goes up, spread evenly along the
    first objective (so the cheap and the accurate ends both get re-measured).

    A cheap rung underestimates accuracy (a small student distilled for a few steps has
    not recovered yet), so a plan that misses an accuracy constraint there by at most
    ``slack`` of the bound still counts for promotion; the front itself keeps the
    constraint, measured at the plan's highest rung.

    A question that asks for one end of the front (the fastest student keeping 95%)
    needs only that end re-measured: ``toward`` names the objective whose best members
    take the quota, and the rest stay at the cheap rung.

    A rung tuned for another model can sit far below what the next rung gives the same
    plans: few or no compressed plans meet the accuracy bound there, and the front holds
    the uncompressed model and little else. And it may do so for one kind of plan only
    (``plan_kind``: a pruned plan needs more recovery than a quantized one), so each
    kind is learnt apart. With ``adapt``, where ``probes`` compressed plans of a kind
    are measured at a rung and fewer than ``probes`` of them are feasible there, that
    rung is probed once for that kind: its most accurate compressed plans of the kind
    that miss only the accuracy bound go up a rung. If they gain more than
    ``MIN_SHORTFALL`` accuracy there (75th percentile), every member of that rung's
    front of that kind within that shortfall of the bound is promoted (the rung's own
    ranking is known to be off, so a share of it cannot choose), and so are plans of
    the kind off that front which, at their accuracy plus the shortfall, would join the
    front of the rung above (a plan a probe outscores at the cheap rung may still be
    what the top rung lacks): up to ``probes`` a generation and ``share`` of the rung's
    plans in all. A rung where enough plans of a kind are feasible is probed the same
    way once the plans of that kind promoted from it by the quota gained more than
    ``MIN_SHORTFALL`` a rung up and near misses would, with that gain, meet the bound
    and join the rung's front (``_probe_hopeful``): the rung's verdict on them is not
    known to hold. Where no such plan is left to send (with ``slack`` every plan may
    pass as a candidate), ``probes`` or more plans the quota promoted that gained more
    than ``MIN_SHORTFALL`` stand for the probes (``_learn_promoted``). ``notes`` says
    what was done and why.

    The search need not wait a generation for this: once ``2 * probes`` compressed plans
    of a kind are measured at a rung and none of them is feasible there, the probes go
    up at once (``between``). Once a shortfall is learnt, plans of that kind measured at
    that rung are judged at the accuracy they are expected to reach a rung up
    (``allowance``, a ``Recovery``): a non-decreasing (isotonic) curve through the
    plans of the kind measured at both rungs (the probes and any other), where their
    cheap accuracies span ``MIN_SPREAD`` or more, else their gain (75th percentile)
    added; at most the best accuracy known a rung up. It is fitted again as more plans
    come back. Where the shortfall is larger
    than the accuracy bound's margin (baseline minus bound), the rung cannot tell
    feasible plans of the kind from infeasible ones: from then on each that, with the
    shortfall added, would join the front a rung up is promoted as soon as it is
    measured, not at the generation's end (within the same ``share`` of the rung's
    plans).

    Args:
        share: the fraction of each rung's front to promote, in (0, 1].
        slack: how far below (or above, for ``<=``) an accuracy bound a plan may be at a
            rung below the top and still be promoted, as a share of the bound, in [0, 1).
        toward: an objective's name: promote its best members first; None spreads the
            quota evenly along the first objective.
        adapt: learn a rung's shortfall where no compressed plan is feasible at it.
        probes: plans measured a rung up to learn the shortfall.
    """

    def __init__(
        self,
        *,
        share: float,
        slack: float = 0.0,
        toward: str | None = None,
        adapt: bool = True,
        probes: int = 3,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share=}")
        if not 0 <= slack < 1:
            raise ValueError(f"slack must be in [0, 1), got {slack=}")
        if probes < 1:
            raise ValueError(f"probes must be >= 1, got {probes=}")
        self.share = share
        self.slack = slack
        self.toward = toward
        self.adapt = adapt
        self.probes = probes
        self.notes: list[str] = []
        #: (rung, kind) -> the accuracy that rung is learnt to fall short of the next
        #: rung by for plans of that kind (kind "": every kind, a study from before kinds)
        self.shortfall: dict[tuple[int, str], float] = {}
        self._baseline: dict[str, float] = {}
        #: (rung, kind) -> the trials measured a rung up to learn its shortfall
        self._probes: dict[tuple[int, str], list[int]] = {}
        #: rung -> the trials promoted off its front because they would join the next
        self._hoped: dict[int, list[int]] = {}
        #: (rung, kind)s whose shortfall is larger than the accuracy bound's margin
        self._blind: set[tuple[int, str]] = set()
        #: (rung, kind) -> what a plan of that kind there is expected to score a rung up
        self.recovery: dict[tuple[int, str], Recovery] = {}

    def start(self, baseline: Mapping[str, float]) -> None:
        self._baseline = dict(baseline)

    def state(self) -> dict[str, Any]:
        return {
            "shortfall": {_text(k): g for k, g in self.shortfall.items()},
            "probes": {_text(k): list(p) for k, p in self._probes.items()},
            "hoped": {str(r): list(p) for r, p in self._hoped.items()},
            "blind": sorted(map(_text, self._blind)),
            "recovery": {
                _text(k): {"gain": m.gain, "curve": list(map(list, m.curve)), "ceiling": m.ceiling}
                for k, m in self.recovery.items()
            },
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        shortfall, probes = state.get("shortfall", {}), state.get("probes", {})
        self.shortfall = {_key(k): float(g) for k, g in shortfall.items()}
        self._probes = {_key(k): [int(n) for n in p] for k, p in probes.items()}
        self._hoped = {int(r): [int(n) for n in p] for r, p in state.get("hoped", {}).items()}
        self._blind = {_key(k) for k in state.get("blind", [])}
        self.recovery = {
            _key(k): Recovery(
                float(m["gain"]),
                tuple((float(a), float(b)) for a, b in m["curve"]),
                float(m["ceiling"]),
            )
            for k, m in state.get("recovery", {}).items()
            if isinstance(m, Mapping)  # else a form before the curve: fitted again
        }

    def owed(self, front: Front) -> list[tuple[int, int]]:
        """The probes and the plans sent up on hope that have no result a rung up (a
        failed one has an empty one): without them, a rung probed when the search
        stopped would never learn its shortfall, and a hope would be spent unmeasured."""
        decided = [(n, rung) for (rung, _), numbers in self._probes.items() for n in numbers]
        decided += [(n, rung) for rung, numbers in self._hoped.items() for n in numbers]
        owed = [
            (number, rung + 1)
            for number, rung in decided
            if (rec := front.records.get(number)) is not None
            and rec.state == "complete"
            and rung + 1 not in rec.rungs
        ]
        return list(dict.fromkeys(owed))  # a probe may have been hoped for too

    def gap(self, rung: int, kind: str) -> float:
        """What ``rung`` is learnt to fall short of the next rung by for plans of
        ``kind`` (0 where nothing is learnt)."""
        return self.shortfall.get((rung, kind), self.shortfall.get((rung, ""), 0.0))

    def model(self, rung: int, kind: str) -> Recovery | None:
        """What a plan of ``kind`` measured at ``rung`` is expected to score a rung up
        (None where nothing is learnt, or the rung was learnt to agree)."""
        for key in ((rung, kind), (rung, "")):
            if self.shortfall.get(key, 0.0) > 0:
                # a study from before the fitted recovery kept the shortfall alone
                return self.recovery.get(key, Recovery(self.shortfall[key]))
        return None

    def allowance(self, rungs: int) -> dict[tuple[int, str], Recovery]:
        out = {}
        for rung, kind in self.shortfall:
            allowed = None  # each rung's recovery up to the top, chained from the top down
            for r in reversed(range(rung, rungs - 1)):
                if (step := self.model(r, kind)) is not None:
                    allowed = replace(step, then=allowed)
            if allowed is not None:
                out[rung, kind] = allowed
        return out

    def _fit(self, front: Front, rung: int, kind: str) -> None:
        """Fit what ``rung`` is expected to recover a rung up for plans of ``kind``
        from those measured at both (see the class)."""
        if not kind or self.shortfall.get((rung, kind), 0.0) <= 0:
            return
        pairs = np.array(_pairs(rung, self._of_kind(front, rung, kind))).reshape(-1, 2)
        if not len(pairs):
            return
        cheap, up = pairs[:, 0], pairs[:, 1]
        done = front.complete()
        above = [r.rungs[rung + 1][ACCURACY] for r in done if ACCURACY in r.rungs.get(rung + 1, {})]
        ceiling = max([self._baseline.get(ACCURACY, -math.inf), *above])
        if len(pairs) < 3 or np.ptp(cheap) < MIN_SPREAD:
            gain = round(float(np.percentile(up - cheap, 75)), 4)
            self.recovery[rung, kind] = Recovery(gain, ceiling=ceiling)
            return
        from sklearn.isotonic import IsotonicRegression  # slow to import; rarely needed

        knots = np.unique(cheap)
        fitted = IsotonicRegression(increasing=True).fit(cheap, up).predict(knots)
        curve = tuple(
            (round(float(a), 4), round(float(b), 4)) for a, b in zip(knots, fitted, strict=True)
        )
        self.recovery[rung, kind] = Recovery(curve=curve, ceiling=ceiling)

    def _candidates(self, front: Front) -> Front:
        """The front with its accuracy constraints loosened by ``slack`` (the shortfall
        learnt for a rung is the front's own ``allowance``)."""
        if not self.slack:
            return front
        cs = front.constraints
        loose = [_loosen(c, self.slack) if c.objective == ACCURACY else c for c in cs]
        return _judged(front, loose)

    def _compressed(self, front: Front, number: int, rung: int) -> bool:
        """Whether a trial improves some objective other than accuracy on the baseline
        by more than 1% (the uncompressed plan does not)."""
        values = front.records[number].values(rung)
        for o in front.objectives:
            base = self._baseline.get(o.name)
            if o.name == ACCURACY or base is None or o.name not in values:
                continue
            better = base - values[o.name] if o.direction == "minimize" else values[o.name] - base
            if better > 0.01 * abs(base):
                return True
        return False

    def _of_kind(self, front: Front, rung: int, kind: str) -> list[TrialRecord]:
        """The completed plans of ``kind`` that are compressed (judged at ``rung``)."""
        return [
            r
            for r in front.complete()
            if r.kind == kind and self._compressed(front, r.number, rung)
        ]

    def _bounds(self, front: Front) -> list[Constraint]:
        """The accuracy lower bounds, where adapting applies (else none)."""
        if not (self.adapt and self._baseline and ACCURACY in self._baseline):
            return []
        return [c for c in front.constraints if c.objective == ACCURACY and c.op == ">="]

    def _kinds(self, front: Front, rung: int) -> dict[str, list[TrialRecord]]:
        """The compressed plans measured at ``rung`` (or higher), by kind."""
        out: dict[str, list[TrialRecord]] = {}
        for r in front.complete():
            if r.rung >= rung and self._compressed(front, r.number, rung):
                out.setdefault(r.kind, []).append(r)
        return dict(sorted(out.items()))

    def _learn(self, front: Front, rung: int, early: bool = False) -> list[tuple[int, int]]:
        """For each kind of plan, probe ``rung`` once where ``probes`` compressed plans
        of that kind are measured there and fewer than ``probes`` of them are feasible
        (``early``: only once ``2 * probes`` are measured there and none is); once
        probes come back, learn the rung's shortfall for that kind."""
        accuracy = self._bounds(front)
        if not accuracy:
            return []
        out = []
        for kind, plans in self._kinds(front, rung).items():
            if (rung, kind) in self._probes:
                self._gap(front, rung, kind, accuracy)
            elif (rung, kind) in self.shortfall:
                continue  # learnt from the plans the quota promoted (_learn_promoted)
            elif len(plans) >= self.probes and (not early or self._hopeless(front, rung, plans)):
                probes = self._probe(front, rung, kind, plans, accuracy)
                if not probes and not early:
                    probes = self._probe_hopeful(front, rung, kind, plans, accuracy)
                if not probes and not early:
                    self._learn_promoted(front, rung, kind, accuracy)
                out += probes
        return out

    def _learn_promoted(
        self, front: Front, rung: int, kind: str, accuracy: list[Constraint]
    ) -> None:
        """Where ``rung`` needed no probe for ``kind`` (enough of its plans feasible
        there, ``slack`` counted, and none near enough to send up on hope) but ``probes``
        or more of those the quota promoted are back from a rung up and gained more than
        ``MIN_SHORTFALL`` there: they are the probes. Without this the front, and the
        sampler with it, judged such plans at the rung's own accuracy for the whole
        search, though the rung was known to underrate them (text-student, 2026-12-06:
        8 promoted students gained 0.05-0.07 against a margin of 0.041, and the sampler
        never proposed a student cheaper than the one it picked)."""
        gain, seen = self._promoted_gap(front, rung, kind)
        if seen < self.probes or gain <= MIN_SHORTFALL:
            return
        promoted = [r.number for r in self._of_kind(front, rung, kind) if _pairs(rung, [r])]
        self.notes.append(
            f"{_plural(kind)} promoted from rung {rung} gained {gain:.3f} accuracy at rung "
            f"{rung + 1} (75th percentile of {seen}): learning rung {rung}'s shortfall for "
            "them from those plans (search.fidelity.adapt)"
        )
        self._gap(front, rung, kind, accuracy, promoted)

    def _promoted_gap(self, front: Front, rung: int, kind: str) -> tuple[float, int]:
        """What the compressed plans of ``kind`` already measured at ``rung`` and a rung
        up (promoted by the rung's quota) gained there: the 75th percentile of their
        gains in accuracy, and how many there are (0.0, 0 where none is)."""
        gains = _gains(rung, self._of_kind(front, rung, kind))
        return (float(np.percentile(gains, 75)), len(gains)) if gains else (0.0, 0)

    def _probe_hopeful(
        self,
        front: Front,
        rung: int,
        kind: str,
        plans: list[TrialRecord],
        accuracy: list[Constraint],
    ) -> list[tuple[int, int]]:
        """Where enough compressed ``plans`` of ``kind`` are feasible at ``rung`` but the
        ones promoted from it gained more than ``MIN_SHORTFALL`` a rung up: the most
        accurate plans that miss only the accuracy bound there and, with that gain
        added, would meet it and join the rung's front, to measure a rung up. A rung is
        not known to judge such plans right until probed, and they may be the fast or
        small end the front lacks."""
        seen, pairs = self._promoted_gap(front, rung, kind)
        if seen <= MIN_SHORTFALL:
            return []
        candidates = self._candidates(front)
        members = [front.records[n] for n in candidates.numbers(rung)]
        rows = front.matrix(members, rung)
        hopeful = []
        for r in _near_misses(front, candidates, rung, plans):
            values = r.values(rung)
            hope = {**values, ACCURACY: values[ACCURACY] + seen}
            if not candidates.feasible(hope, rung, r.kind):
                continue
            if _joins(front, rows, hope):
                hopeful.append(r.number)
        if not hopeful:
            return []
        chosen = hopeful[: self.probes]
        self._probes[rung, kind] = chosen
        self.notes.append(
            f"{_plural(kind)} promoted from rung {rung} gained {seen:.3f} accuracy at rung "
            f"{rung + 1} (75th percentile of {pairs}), and {len(hopeful)} that miss "
            f"{' and '.join(map(str, accuracy))} at rung {rung} would join its front with "
            f"that gain: measuring {len(chosen)} of those at rung {rung + 1} to learn how far "
            f"rung {rung} falls short for them (search.fidelity.adapt)"
        )
        return [(n, rung + 1) for n in chosen]

    def _hopeless(self, front: Front, rung: int, plans: list[TrialRecord]) -> bool:
        """Whether ``2 * probes`` compressed ``plans`` (of one kind) are measured at
        ``rung`` and none of them is feasible there: no need to wait for the
        generation's end to probe it."""
        if len(plans) < 2 * self.probes:
            return False
        loose = self._candidates(front)
        return not any(loose.judge(r, rung) for r in plans)

    def _gap(
        self,
        front: Front,
        rung: int,
        kind: str,
        accuracy: list[Constraint],
        promoted: list[int] | None = None,
    ) -> None:
        """Once the probes of ``rung`` for ``kind`` (or the ``promoted`` plans that stand
        for them) are back: the shortfall they show (75th percentile of their gains a
        rung up), and whether it blinds the rung."""
        if (rung, kind) in self.shortfall:
            return  # learnt already
        probes = self._probes[rung, kind] if promoted is None else promoted
        if any(rung + 1 not in front.records[n].rungs for n in probes):
            return  # some are still being measured (a failed one counts as back)
        gains = _gains(rung, [front.records[n] for n in probes])
        if not gains:
            return
        gap = float(np.percentile(gains, 75))
        how = "probed" if promoted is None else "promoted"
        plans = f"{len(gains)} {how} {_plural(kind)}"
        if gap <= MIN_SHORTFALL:
            self.notes.append(
                f"rung {rung} agrees with rung {rung + 1} within {MIN_SHORTFALL} accuracy on "
                f"{plans}: it is not what keeps {_plural(kind)} off the front"
            )
            self.shortfall[rung, kind] = 0.0
            return
        self.shortfall[rung, kind] = gap
        self._fit(front, rung, kind)
        judged = f"judged at {self.model(rung, kind)} at rung {rung + 1}"
        margin = min(self._baseline[ACCURACY] - c.bound for c in accuracy)
        if gap > margin:
            self._blind.add((rung, kind))
            self.notes.append(
                f"rung {rung} falls short of rung {rung + 1} by {gap:.3f} accuracy (75th "
                f"percentile of {plans}), more than the accuracy bound's margin of "
                f"{margin:.3f}, so it cannot tell feasible {_plural(kind)} from infeasible "
                f"ones: from now on such a plan measured there is {judged}, and each "
                f"that would then join rung {rung + 1}'s front goes up as soon as it is "
                "measured"
            )
            return
        self.notes.append(
            f"rung {rung} falls short of rung {rung + 1} by {gap:.3f} accuracy (75th "
            f"percentile of {plans}): such plans measured there are {judged}, and every "
            "one of them on the rung's front is promoted"
        )

    def _probe(
        self,
        front: Front,
        rung: int,
        kind: str,
        plans: list[TrialRecord],
        accuracy: list[Constraint],
    ) -> list[tuple[int, int]]:
        """Where fewer than ``probes`` of the compressed ``plans`` (of ``kind``) are
        feasible at ``rung``: the most accurate of them that miss only the accuracy
        bound there, to measure a rung up."""
        candidates = self._candidates(front)
        feasible = sum(1 for r in plans if candidates.judge(r, rung))
        if feasible >= self.probes:
            return []
        near = [r.number for r in _near_misses(front, candidates, rung, plans)]
        if not near:
            return []
        chosen = near[: self.probes]
        self._probes[rung, kind] = chosen
        best = front.records[chosen[0]].values(rung)[ACCURACY]
        self.notes.append(
            f"{feasible} of {len(plans)} {_plural(kind)} "
            f"{'meets' if feasible == 1 else 'meet'} {' and '.join(map(str, accuracy))} at "
            f"rung {rung} (the best that miss: {best:.4f}): measuring {len(chosen)} of those "
            f"at rung {rung + 1} to learn how far rung {rung} falls short for them "
            "(search.fidelity.adapt)"
        )
        return [(n, rung + 1) for n in chosen]

    def _underrated(self, record: TrialRecord, rung: int) -> bool:
        """Whether ``rung`` is learnt to underrate ``record`` by more than noise: the
        accuracy expected of it a rung up is more than ``MIN_SHORTFALL`` above what it
        scored there. A plan the rung already scores near the best known a rung up is
        not: its rung's own ranking stands for it, and the usual share promotes it."""
        model = self.model(rung, record.kind)
        accuracy = record.values(rung).get(ACCURACY)
        return (
            model is not None
            and accuracy is not None
            and (model.top(accuracy) - accuracy > MIN_SHORTFALL)
        )

    def _hopefuls(self, front: Front, rung: int, kind: str, chosen: set[int]) -> list[int]:
        """Up to ``probes`` compressed plans of ``kind`` waiting at ``rung`` (not in
        ``chosen``) that the rung underrates (``_underrated``) and that, at the accuracy
        the rung's recovery for them expects a rung up, meet every constraint and are
        dominated by no member of the front at ``rung + 1``; the most accurate first.
        At most ``share`` of the rung's plans are promoted this way in all."""
        model = self.model(rung, kind)
        if model is None:
            return []
        hoped = self._hoped.setdefault(rung, [])
        done = front.complete()
        plans = len({r.key for r in done if r.rung >= rung})
        room = min(self.probes, math.ceil(self.share * plans) - len(hoped))
        if room <= 0:
            return []
        loose = self._candidates(front)
        above = front.matrix([front.records[n] for n in front.numbers(rung + 1)], rung + 1)
        measured = {r.key for r in done if r.rung > rung}
        hopes: dict[str, tuple[float, int]] = {}
        for rec in done:
            if rec.rung != rung or rec.number in chosen or rec.number in hoped:
                continue
            if kind and rec.kind != kind:
                continue
            values = rec.values(rung)
            if rec.key in measured or rec.key in hopes or not loose.judge(rec, rung):
                continue
            if not self._compressed(front, rec.number, rung) or not self._underrated(rec, rung):
                continue
            hope = {**values, ACCURACY: model.top(values[ACCURACY])}
            if _joins(front, above, hope):
                hopes[rec.key] = (values[ACCURACY], rec.number)
        best = sorted(hopes.values(), reverse=True)[:room]
        hoped += [n for _, n in best]
        if best:
            self.notes.append(
                f"promoting {len(best)} {_plural(kind)[:-1]}{'s' if len(best) > 1 else ''} "
                f"off rung {rung}'s "
                f"front (trial{'s' if len(best) > 1 else ''} "
                f"{', '.join(str(n) for _, n in best)}): at the accuracy expected of "
                f"{'them' if len(best) > 1 else 'it'} a rung up ({model}), "
                f"{'they' if len(best) > 1 else 'it'} would join rung {rung + 1}'s front"
            )
        return [n for _, n in best]

    def _learn_all(self, front: Front, rungs: int, early: bool) -> dict[int, list[tuple[int, int]]]:
        """Probe or learn every rung below the top (see ``_learn``); the front is then
        judged with what was learnt (``allowance``). Returns the probes, by rung."""
        probes = {rung: self._learn(front, rung, early) for rung in range(rungs - 1)}
        for rung, kind in list(self.shortfall):
            if rung < rungs - 1:  # more plans of the kind may be back from both rungs
                self._fit(front, rung, kind)
        front.allow(self.allowance(rungs))
        return {rung: p for rung, p in probes.items() if p}

    def between(self, front: Front, rungs: int) -> list[tuple[int, int]]:
        probes = self._learn_all(front, rungs, early=True)
        out = [p for ps in probes.values() for p in ps]
        sent = {n for n, _ in out}
        for rung, kind in sorted(self._blind):
            if rung < rungs - 1:
                out += [(n, rung + 1) for n in self._hopefuls(front, rung, kind, sent)]
        return out

    def select(self, front: Front, rungs: int) -> list[tuple[int, int]]:
        out = []
        first = front.objectives[0].name
        by = {o.name: o for o in front.objectives}
        if self.toward is not None and self.toward not in by:
            raise ValueError(f"toward: {self.toward!r} is not an objective; one of {list(by)}")
        probes = self._learn_all(front, rungs, early=False)
        for rung in range(rungs - 1):
            if rung in probes:
                out += probes[rung]
                continue
            candidates = self._candidates(front)
            members = candidates.numbers(rung)
            # where the rung's accuracies are known to be off for a kind of plan, its
            # own ranking cannot choose among them: every front member the rung
            # underrates goes up, and so do the kind's hopefuls
            gapped = [k for k in PLAN_KINDS if self.gap(rung, k) > 0]
            off = [n for n in members if self._underrated(front.records[n], rung)]
            waiting = [n for n in off if front.records[n].rung == rung]
            out += [(n, rung + 1) for n in waiting]
            for kind in gapped:
                out += [(n, rung + 1) for n in self._hopefuls(front, rung, kind, set(waiting))]
            members = [n for n in members if n not in off]
            quota = math.ceil(self.share * len(members))
            # probes were extra: they do not use up the rung's quota
            probed = {n for (r, _), ns in self._probes.items() if r == rung for n in ns}
            quota -= sum(1 for n in members if front.records[n].rung > rung and n not in probed)
            waiting = [n for n in members if front.records[n].rung == rung]
            if quota <= 0 or not waiting:
                continue
            if self.toward is not None:  # the quota from the objective's best end
                name = self.toward
                sign = -1.0 if by[name].direction == "maximize" else 1.0
                waiting.sort(key=lambda n: sign * front.records[n].values(rung)[name])
                chosen = waiting[:quota]
            else:  # spread evenly along the first objective
                waiting.sort(key=lambda n: front.records[n].values(rung)[first])
                spread = np.linspace(0, len(waiting) - 1, min(quota, len(waiting))).round()
                chosen = [waiting[int(i)] for i in np.unique(spread)]
            out += [(n, rung + 1) for n in chosen]
        return out


def finishing(
    front: Front, rung_names: Sequence[str], finish: bool
) -> tuple[list[tuple[int, int]], str]:
    """The front members below the top rung, to be measured there before the search
    returns (``search.fidelity.finish``; each goes up once: a failed promotion counts as
    tried), and what to say of them ("" for nothing). None where there is one rung, or
    where ``finish`` is off (then the note names them)."""
    top = len(rung_names) - 1
    below = [n for n in front.numbers() if top not in front.records[n].rungs] if top else []
    if not below:
        return [], ""
    if not finish:
        return [], (
            f"{len(below)} front member(s) stopped below rung {rung_names[top]!r} "
            "(search.fidelity.finish is off): their accuracy is a cheaper rung's; "
            "`--resume --set search.fidelity.finish=true` measures them there"
        )
    note = f"finishing the front: {len(below)} member(s) below rung {rung_names[top]!r}"
    return [(n, top) for n in below], f"{note} are measured there"


def _near_misses(
    front: Front, candidates: Front, rung: int, plans: list[TrialRecord]
) -> list[TrialRecord]:
    """The ``plans`` waiting at ``rung`` that meet every constraint there but accuracy
    (as ``candidates`` judges it), the most accurate first."""
    others = _judged(front, [c for c in front.constraints if c.objective != ACCURACY])
    near = [
        r
        for r in plans
        if r.rung == rung and others.judge(r, rung) and not candidates.judge(r, rung)
    ]
    return sorted(near, key=lambda r: -r.values(rung)[ACCURACY])


def _joins(front: Front, members: np.ndarray, values: Mapping[str, float]) -> bool:
    """Whether a plan with ``values`` is dominated by no row of ``members`` (objective
    values, ``Front.matrix``)."""
    row = [[values[o.name] for o in front.objectives]]
    return bool(pareto_mask(np.vstack([members, row]), front.objectives)[-1])


def _pairs(rung: int, records: Sequence[TrialRecord]) -> list[tuple[float, float]]:
    """(accuracy at ``rung``, accuracy a rung up) of each of ``records`` measured at both."""
    return [
        (r.rungs[rung][ACCURACY], r.rungs[rung + 1][ACCURACY])
        for r in records
        if ACCURACY in r.rungs.get(rung, {}) and ACCURACY in r.rungs.get(rung + 1, {})
    ]


def _gains(rung: int, records: Sequence[TrialRecord]) -> list[float]:
    """The accuracy each of ``records`` measured at ``rung`` and a rung up gained there."""
    return [up - cheap for cheap, up in _pairs(rung, records)]


def _text(key: tuple[int, str]) -> str:
    """A (rung, kind) key as the study keeps it: ``"0/pruned"``."""
    return f"{key[0]}/{key[1]}"


def _key(text: str | int) -> tuple[int, str]:
    """``_text``'s key back; a bare rung (a study from before kinds) stands for every
    kind ("")."""
    rung, _, kind = str(text).partition("/")
    return int(rung), kind


def _plural(kind: str) -> str:
    """``pruned`` -> "pruned plans"; "" and "other" -> "compressed plans"."""
    return f"{kind if kind not in ('', 'other') else 'compressed'} plans"


def _loosen(constraint: Constraint, slack: float) -> Constraint:
    """``constraint`` (absolute) with its bound moved ``slack`` of itself towards looser."""
    factor = 1 - slack if constraint.op == ">=" else 1 + slack
    bound = constraint.bound * factor if constraint.bound >= 0 else constraint.bound / factor
    return Constraint(constraint.objective, constraint.op, bound)


def _judged(front: Front, constraints: list[Constraint]) -> Front:
    """``front``'s records under other constraints, with the same allowances."""
    other = Front(front.records, front.objectives, constraints)
    other.allow(front.allowance)
    return other
