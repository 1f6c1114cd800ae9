"""The surrogate sampler: an additive model of accuracy that ranks plans it has not
seen, and a sampler that screens plans on it without ever proposing one twice."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from frontier.search.trials._surrogate import AdditiveSurrogate, improvement

DIMS = [f"prune.layer{i}" for i in range(30)]
CHOICES = (0.0, 0.25, 0.5)


def _problem(seed: int, curvature: float):
    """Accuracy 0.95 minus each layer's (seeded) loss at its ratio, compounded by
    ``curvature``; the sensitivity rows are each choice alone, measured with noise."""
    rng = np.random.default_rng(seed)
    loss = {(d, c): rng.uniform(0, 0.01) * c * 4 for d in DIMS for c in CHOICES[1:]}

    def truth(params: dict) -> float:
        s = sum(loss[(d, v)] for d, v in params.items() if v)
        return 0.95 - s - curvature * s * s

    def draw(n: int) -> list[dict]:
        return [{d: CHOICES[int(rng.integers(3))] for d in DIMS} for _ in range(n)]

    features = list(loss)
    alone = [truth({f[0]: f[1]}) - 0.95 + rng.normal(0, 0.002) for f in features]
    return features, alone, truth, draw


@pytest.mark.parametrize("curvature", [0.0, 3.0], ids=["additive", "compounding"])
def test_the_surrogate_ranks_held_out_plans(curvature: float) -> None:
    features, alone, truth, draw = _problem(0, curvature)
    model = AdditiveSurrogate(features, alone, base=0.95)
    seen = draw(20)
    model.fit(seen, [truth(p) + np.random.default_rng(1).normal(0, 0.003) for p in seen])
    held_out = draw(200)
    mean, sd = model.predict(held_out)
    rho = spearmanr(mean, [truth(p) for p in held_out]).statistic
    assert rho >= 0.9
    assert np.all(sd > 0)
    # what it has seen, it knows better than what it has not
    assert model.predict(seen)[1].mean() < sd.mean()


def test_trials_correct_sensitivities_that_are_wrong() -> None:
    """Half the sensitivities are missing (0): the finished trials teach the model."""
    features, alone, truth, draw = _problem(2, 0.0)
    wrong = [a if i % 2 else 0.0 for i, a in enumerate(alone)]
    held_out = draw(200)
    actual = [truth(p) for p in held_out]
    model = AdditiveSurrogate(features, wrong, base=0.95)
    before = spearmanr(model.predict(held_out)[0], actual).statistic
    seen = draw(80)
    model.fit(seen, [truth(p) for p in seen])
    after = spearmanr(model.predict(held_out)[0], actual).statistic
    assert after >= 0.9 and after > before + 0.05


def test_hypervolume_improvement_prefers_what_extends_the_front() -> None:
    front = np.array([[0.2, 0.8], [0.5, 0.4]])  # normalised losses
    cands = np.array([[0.1, 0.9], [0.3, 0.3], [0.6, 0.9], [0.55, 0.85]])
    gain = improvement(front, cands)
    assert gain[1] > gain[0] > 0  # both extend it; the second by more
    assert gain[2] < gain[3] < 0  # dominated: the one nearer the front scores higher
    assert improvement(np.empty((0, 2)), cands[:1])[0] > 0


def test_a_surrogate_search_proposes_each_plan_once_and_resumes(write_config, workdir) -> None:
    """The sampler screens plans on the sensitivities (measured once, cached) and the
    finished trials; a resumed search reads the cache and keeps proposing new plans."""
    from frontier.experiments import cache_dir
    from frontier.search import Search
    from frontier.search.trials._samplers import DUPLICATE_ATTR

    first = Search(write_config(search={"sampler": "surrogate", "trials": 10}), progress=False)
    first.run()
    cache = cache_dir() / "sensitivity-tiny.json"
    stamp = cache.stat().st_mtime_ns
    assert first.summary["sampler_propose_s"] > 0 and len(first.sensitivity) > 1
    assert 0 < first.summary["sampler_propose_median_s"] <= first.summary["sampler_propose_s"]
    again = Search(
        write_config(search={"sampler": "surrogate", "trials": 16}), progress=False, resume=True
    )
    again.run()
    assert cache.stat().st_mtime_ns == stamp  # read, not measured again
    assert again.sensitivity == first.sensitivity
    done = [r for r in again.records.values() if r.state == "complete"]
    assert len(done) == 16
    assert len({r.key for r in done}) == 16
    assert not [t for t in again.study.trials if DUPLICATE_ATTR in t.user_attrs]


def test_the_surrogate_is_a_plain_optuna_sampler_without_a_search() -> None:
    """Outside Frontier's engine it samples at random (it has nothing to screen on)."""
    import optuna

    from frontier.search import build_sampler

    sampler = build_sampler("surrogate", population=4, seed=0)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: t.suggest_categorical("x", [1, 2, 3]), n_trials=5)
    assert len(study.trials) == 5
    with pytest.raises(ValueError, match="candidates >= finalists"):
        type(sampler)(candidates=4, finalists=8)
