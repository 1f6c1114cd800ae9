"""A sampler that screens many plans on a surrogate before it spends a trial.

Most of a candidate's objectives are nearly free: latency is a table prediction, size and
MACs come from the compressed model without training it. Only accuracy costs a
fine-tune. ``SurrogateSampler`` therefore, for every trial it proposes:

1. fits an additive model of accuracy (and of every other metric too slow to compute for
   hundreds of plans) on the per-layer sensitivities and every finished trial
   (``AdditiveSurrogate``: Bayesian linear regression on which choices a plan makes,
   plus the curvature of the sensitivities' sum, so losses may compound);
2. draws candidate plans: mutations of the current front, greedy plans that take the
   choices with the best saving per accuracy lost first, and uniform ones;
3. scores each candidate's metrics (cheap ones exactly, the rest on the surrogate, the
   accuracy optimistically by one posterior standard deviation), drops those that break
   a constraint, and ranks them by the hypervolume they would add to the front (a
   dominated one by how far it is from the front);
4. computes the expensive costs of the best few exactly, ranks them again and proposes
   the best.

It is an Optuna sampler: without a search to ``bind`` it (a plain Optuna study) it samples
at random. Within a search it needs the per-layer sensitivities (``wants_sensitivity``),
which the engine measures first and caches.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from optuna.samplers import BaseSampler, RandomSampler

from frontier.spaces import plan_kind

from ..front._pareto import MAXIMIZE, REFERENCE, loss_hypervolume, normalise, pareto_mask
from ._trials import ACCURACY, _quiet
from ._view import SearchAware, SearchView


class AdditiveSurrogate:
    """Bayesian linear regression of one metric on the choices a plan makes.

    A plan is encoded as one-hot features, one per (dimension, non-default choice). The
    prior mean of a plan is ``base + s`` with ``s`` the sum of its choices' measured
    effects alone (the sensitivities); the regression fits what that misses: a
    correction per choice, an offset and a curvature ``c1 s + c2 s^2`` (effects compound;
    sensitivities measured at a cheaper fidelity are on another scale). Values are
    modelled relative to the uncompressed model's value.

    Args:
        features: the (dimension, choice) pairs that are features, in order.
        effects: the measured effect of each feature alone (same order), in the
            metric's units; 0 where unknown.
        base: the uncompressed model's value.
        prior_sd: prior standard deviation of a correction, relative to ``scale``.
        noise_sd: observation noise, relative to ``scale``.
    """

    def __init__(
        self,
        features: Sequence[tuple[str, Any]],
        effects: Sequence[float],
        *,
        base: float,
        prior_sd: float = 0.02,
        noise_sd: float = 0.01,
    ) -> None:
        if len(features) != len(effects):
            raise ValueError(f"{len(features)} features but {len(effects)} effects")
        self.index = {f: i for i, f in enumerate(features)}
        self.scale = abs(base) if base else 1.0
        self.base = base / self.scale
        self.effects = np.asarray(effects, dtype=float) / self.scale
        self.prior_sd, self.noise_sd = prior_sd, noise_sd
        self.mean = np.zeros(len(features) + 3)
        self.cov = np.diag(self._prior_var())

    def _prior_var(self) -> np.ndarray:
        n = len(self.index)
        # an offset and the curvature are free to take any sign and size the data says
        # (the sensitivities may come from a cheaper fidelity, on another scale)
        return np.concatenate([np.full(n, self.prior_sd**2), [1.0, 1.0, 1.0]])

    def encode(self, params: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """One-hot rows: which feature choices each parameter set makes."""
        x = np.zeros((len(params), len(self.index)))
        for row, p in enumerate(params):
            for name, value in p.items():
                j = self.index.get((name, value))
                if j is not None:
                    x[row, j] = 1.0
        return x

    def _design(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = x @ self.effects
        return np.column_stack([x, s, s * s, np.ones(len(x))]), s

    def fit(self, params: Sequence[Mapping[str, Any]], values: Sequence[float]) -> None:
        """Condition on observed ``values`` of plans with these ``params``."""
        if not params:
            return
        z, s = self._design(self.encode(params))
        y = np.asarray(values, dtype=float) / self.scale - self.base - s
        precision = np.diag(1.0 / self._prior_var()) + z.T @ z / self.noise_sd**2
        self.cov = np.linalg.inv(precision)
        self.mean = self.cov @ (z.T @ y) / self.noise_sd**2

    def predict(self, params: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the metric for each parameter set,
        in the metric's units."""
        z, s = self._design(self.encode(params))
        mean = self.base + s + z @ self.mean
        sd = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", z, self.cov, z), 0.0))
        return mean * self.scale, sd * self.scale


def improvement(front: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """For each candidate (normalised losses), the hypervolume it adds to ``front``; for a
    candidate that adds none, minus the distance it would have to move on its worst
    axis to stop being dominated."""
    base = loss_hypervolume(front) if len(front) else 0.0
    out = np.empty(len(candidates))
    for i, c in enumerate(candidates):
        gain = loss_hypervolume(np.vstack([front, c[None]])) - base
        if gain > 1e-12:
            out[i] = gain
        elif len(front):
            # to stop being dominated it must beat each front point on some axis
            out[i] = -float(max(np.max(np.min(c[None] - front, axis=1)), 0.0) + 1e-9)
        else:
            out[i] = -float(np.max(c - REFERENCE))
    return out


class SurrogateSampler(BaseSampler, SearchAware):
    """Screens ``candidates`` plans per trial on a surrogate, computes the costs of the
    best ``finalists`` exactly and proposes the best of those (see the module's text).

    Args:
        seed: seeds every random draw (with the trial number).
        candidates: plans screened per trial.
        finalists: plans whose slow costs are computed exactly per trial.
        optimism: posterior standard deviations added to the predicted accuracy.
        cheap_s: a metric that takes at most this long per plan is computed exactly
            for every candidate; slower ones only for the finalists.
    """

    wants_sensitivity = True

    def __init__(
        self,
        *,
        seed: int = 0,
        candidates: int = 256,
        finalists: int = 8,
        optimism: float = 1.0,
        cheap_s: float = 0.005,
    ) -> None:
        if candidates < 1 or not 1 <= finalists <= candidates:
            raise ValueError(f"need candidates >= finalists >= 1, got {candidates=}, {finalists=}")
        self.seed = seed
        self.candidates, self.finalists = candidates, finalists
        self.optimism, self.cheap_s = optimism, cheap_s
        self._random = RandomSampler(seed=seed)
        self._search: Any = None
        #: predicted values of proposals still being evaluated (so two workers do not
        #: get the same idea), by parameter key
        self._pending: dict[str, dict[str, float]] = {}
        self._cheap: dict[str, bool] = {}
        #: seconds spent proposing, in all and each time, for the search's summary
        self.propose_s = 0.0
        self.proposals_s: tuple[float, ...] = ()

    # -- the search binds it -------------------------------------------------------------
    def bind(self, search: SearchView) -> None:
        """Use ``search``'s evaluation, records, objectives, constraints, baseline and
        sensitivity rows (the engine calls this before the first trial)."""
        self._search = search
        ev = search.evaluation
        own = [d for d in ev.space.dimensions() if "/" not in d.name]
        self._dims = {d.name: tuple(d.choices) for d in own}
        self._defaults = {d.name: d.uncompressed for d in own}
        self._features = [
            (n, c) for n, cs in self._dims.items() for c in cs if c != self._defaults[n]
        ]
        rows = [r for r in search.sensitivity if r.get("dimension") != "none"]
        self._alone = {(r["dimension"], r["choice"]): r for r in rows}
        base_row = next((r for r in search.sensitivity if r.get("dimension") == "none"), None)
        self._base_values = dict(base_row) if base_row else dict(search.baseline)
        self._metrics = list(
            dict.fromkeys(
                [o.name for o in search.objectives] + [c.objective for c in search.constraints]
            )
        )

    # -- Optuna's sampler interface ---------------------------------------------------------
    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        from optuna.distributions import CategoricalDistribution

        if self._search is None:
            return {}
        return {n: CategoricalDistribution(list(c)) for n, c in self._dims.items()}

    def sample_relative(
        self, study: Any, trial: Any, search_space: dict[str, Any]
    ) -> dict[str, Any]:
        if not search_space or self._search is None:
            return {}
        start = time.perf_counter()
        try:
            return self._propose(trial.number)
        finally:
            took = time.perf_counter() - start
            self.propose_s += took
            self.proposals_s += (took,)

    def sample_independent(
        self, study: Any, trial: Any, param_name: str, param_distribution: Any
    ) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Any, trial: Any) -> None:
        self._random.before_trial(study, trial)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        if self._search is not None:
            self._pending.pop(_key(self._full(trial.params)), None)

    def reseed_rng(self) -> None:
        self._random.reseed_rng()

    # -- proposing ------------------------------------------------------------------------
    def _observed(self) -> tuple[list[dict[str, Any]], list[dict[str, float]]]:
        """Parameters and first-rung values of the sensitivity plans and finished trials."""
        same = self._search.sensitivity_fidelity == self._search.evaluation.fidelity(0)
        # sensitivities at a cheaper fidelity are the prior of accuracy, not observations
        skip = set() if same else {ACCURACY}
        params: list[dict[str, Any]] = [{}]
        values: list[dict[str, float]] = [_without(self._base_values, skip)]
        for (name, choice), row in self._alone.items():
            params.append({name: choice})
            values.append(_without(row, skip))
        for rec in self._search.records.values():
            if rec.state == "complete" and 0 in rec.rungs:
                params.append(dict(rec.params))
                values.append(rec.rungs[0])
        return params, values

    def _surrogates(
        self, params: list[dict[str, Any]], values: list[dict[str, float]], metrics: list[str]
    ) -> dict[str, AdditiveSurrogate]:
        out = {}
        for m in metrics:
            base = float(self._base_values.get(m, self._search.baseline.get(m, 1.0)))
            effects = [
                float(self._alone[f].get(m, base)) - base if f in self._alone else 0.0
                for f in self._features
            ]
            model = AdditiveSurrogate(self._features, effects, base=base)
            seen = [(p, v[m]) for p, v in zip(params, values, strict=True) if m in v]
            model.fit([p for p, _ in seen], [v for _, v in seen])
            out[m] = model
        return out

    def _is_cheap(self, metric: str) -> bool:
        """Whether ``metric`` is fast enough to compute for every candidate: timed on a
        seeded random plan (an uncompressed one would skip the pruning)."""
        if metric == ACCURACY:
            return False
        if metric not in self._cheap:
            rng = np.random.default_rng(self.seed)
            plan, took = self._plan({n: self._draw(rng, n) for n in self._dims}), []
            for _ in range(2):  # the first call may build caches
                start = time.perf_counter()
                self._search.evaluation.evaluate(plan, 0, [metric])
                took.append(time.perf_counter() - start)
            self._cheap[metric] = min(took) <= self.cheap_s
        return self._cheap[metric]

    def _full(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` on this sampler's dimensions, each missing one at its default."""
        return {n: params.get(n, d) for n, d in self._defaults.items()}

    def _draw(self, rng: np.random.Generator, name: str) -> Any:
        """A uniform choice of dimension ``name``."""
        return self._dims[name][int(rng.integers(len(self._dims[name])))]

    def _plan(self, params: Mapping[str, Any]) -> Any:
        return self._search.evaluation.space.plan_of(params)

    def _exact(self, plan: Any, metrics: list[str]) -> dict[str, float]:
        return dict(self._search.evaluation.evaluate(plan, 0, metrics).values)

    def _propose(self, number: int) -> dict[str, Any]:
        search = self._search
        rng = np.random.default_rng([self.seed, number])
        params, values = self._observed()
        trials = search.study.get_trials(deepcopy=False)
        seen = {_key(self._full(p)) for p in [*params, *(t.params for t in trials)]}
        seen |= set(self._pending)
        slow = [m for m in self._metrics if not self._is_cheap(m)]
        models = self._surrogates(params, values, slow)
        pool = self._candidates(rng, params, values, seen)
        if not pool:
            return {}
        cheap = [m for m in self._metrics if m not in slow]
        with _quiet():  # once, not once a plan
            plans = [self._plan(p) for p in pool]  # once: each is sized, scored and kinded
            rows = [self._exact(p, cheap) if cheap else {} for p in plans]
        predicted = {m: models[m].predict(pool) for m in slow}
        for i, row in enumerate(rows):
            for m in slow:
                mean, sd = predicted[m]
                row[m] = float(mean[i])
                if m == ACCURACY:
                    row[m] += self.optimism * float(sd[i])
        kinds = [plan_kind(p.to_dict()) for p in plans]
        scores = self._scores(rows, kinds)
        order = np.argsort(-scores)[: self.finalists]
        expensive = [m for m in slow if m != ACCURACY]
        if expensive:
            for i in order:
                rows[i].update(self._exact(plans[i], expensive))
            finals = self._scores([rows[i] for i in order], [kinds[i] for i in order])
            best = int(order[int(np.argmax(finals))])
        else:
            best = int(order[0])
        chosen = self._full(pool[best])
        self._pending[_key(chosen)] = rows[best]
        return chosen

    def _scores(self, rows: list[dict[str, float]], kinds: list[str]) -> np.ndarray:
        """Hypervolume improvement over the first-rung front (and what is pending) of
        each row's objectives; a row that breaks a constraint (judged as a plan of its
        ``kinds`` entry, ``plan_kind``) scores below every other."""
        search = self._search
        objectives = search.objectives
        base = [search.baseline[o.name] for o in objectives]
        members = [
            [rec.rungs[0][o.name] for o in objectives]
            for rec in search.records.values()
            if rec.state == "complete" and 0 in rec.rungs and search.front.judge(rec, 0)
        ]
        members += [[v[o.name] for o in objectives] for v in self._pending.values()]
        front = (
            normalise(np.array(members, dtype=float), objectives, base)
            if members
            else (np.empty((0, len(objectives))))
        )
        cand = normalise(
            np.array([[r[o.name] for o in objectives] for r in rows], dtype=float),
            objectives,
            base,
        )
        scores = improvement(front, cand)
        feasible = np.array(
            [search.front.feasible(r, 0, k) for r, k in zip(rows, kinds, strict=True)]
        )
        return np.where(feasible, scores, scores - 1e6)

    def _candidates(
        self,
        rng: np.random.Generator,
        params: list[dict[str, Any]],
        values: list[dict[str, float]],
        seen: set[str],
    ) -> list[dict[str, Any]]:
        """Unseen parameter sets (only their non-default choices): a half mutations of
        front members, a quarter greedy by saving per accuracy lost, a quarter uniform."""
        names = list(self._dims)
        objectives = self._search.objectives
        tried = [
            (p, v)
            for p, v in zip(params, values, strict=True)
            if all(o.name in v for o in objectives)
        ]
        parents: list[dict[str, Any]] = [{}]
        if tried:
            matrix = np.array([[v[o.name] for o in objectives] for _, v in tried])
            mask = pareto_mask(matrix, objectives)
            parents = [tried[i][0] for i in np.flatnonzero(mask)] or parents
        ranked = self._greedy_order()
        out: dict[str, dict[str, Any]] = {}

        def add(p: dict[str, Any]) -> None:
            full = self._full(p)
            key = _key(full)
            if key not in seen and key not in out:
                out[key] = {n: v for n, v in full.items() if v != self._defaults[n]}

        for _ in range(self.candidates * 4):
            if len(out) >= self.candidates:
                break
            kind = rng.random()
            if kind < 0.5:
                child = dict(parents[int(rng.integers(len(parents)))])
                for _ in range(int(rng.integers(1, 4))):
                    n = names[int(rng.integers(len(names)))]
                    child[n] = self._draw(rng, n)
                add(child)
            elif kind < 0.75 and ranked:
                k = int(rng.integers(1, len(ranked) + 1))
                greedy: dict[str, Any] = {}
                for name, choice in ranked[:k]:
                    greedy.setdefault(name, choice)
                # a few random choices on top, so greedy plans are not all on one line
                for _ in range(int(rng.integers(0, 3))):
                    n = names[int(rng.integers(len(names)))]
                    greedy[n] = self._draw(rng, n)
                add(greedy)
            else:
                add({n: self._draw(rng, n) for n in names})
        return list(out.values())

    def _greedy_order(self) -> list[tuple[str, Any]]:
        """Per-layer choices ordered by the cost they save alone (summed over the cost
        objectives, relative to the baseline) per point of accuracy they lose alone."""
        objectives = [o for o in self._search.objectives if o.name != ACCURACY]
        if ACCURACY not in self._base_values or not objectives:
            return []
        ranked = []
        for f, row in self._alone.items():
            saving = sum(
                (self._base_values[o.name] - row[o.name]) / (abs(self._base_values[o.name]) or 1)
                for o in objectives
                if o.name in row and o.direction != MAXIMIZE
            )
            loss = max(self._base_values[ACCURACY] - row.get(ACCURACY, 0.0), 0.0)
            if saving > 0:
                ranked.append((saving / (loss + 1e-3), f))
        return [f for _, f in sorted(ranked, key=lambda t: -t[0])]


def _without(row: Mapping[str, Any], names: set[str]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in names}


def _key(params: Mapping[str, Any]) -> str:
    return repr(sorted(params.items()))
