"""Per-op corrections of a calibrated prediction, learnt from whole models.

A calibrated prediction prices each op from the table (isolated, or in context) and
scales or fits the sum. What is left is op-specific: a kernel that runs faster or slower
inside a graph than alone, in a way no group scale captures, and the glue a precision
change between two neighbouring ops brings. The correction learns both from the
calibration models' residuals::

    measured - calibrated ~ ridge(counts of op keys, counts of precision edges)

(in ms: an op that runs slower inside a graph, or an edge's glue, costs time, not a
share of the model).

An op or edge no calibration model ran has no coefficient and is left as calibrated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from ..ops._ops import OpSpec

#: Ridge strengths tried, by cross-validation, for the correction.
ALPHAS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


def features(specs: Sequence[OpSpec]) -> Counter[str]:
    """Counts of the op keys of a model and of the precision edges between ops next to
    each other (``position:from>to``; position-wise so that each layer boundary is its
    own feature)."""
    out: Counter[str] = Counter(f"op:{s.key}" for s in specs)
    out.update(f"edge:{i}:{a.precision}>{b.precision}" for i, (a, b) in enumerate(pairwise(specs)))
    return out


@dataclass(frozen=True)
class Correction:
    """A fitted correction: the ms a calibrated prediction is off by."""

    alpha: float
    intercept_ms: float
    coef_ms: dict[str, float]

    def delta_ms(self, specs: Sequence[OpSpec]) -> float:
        return self.intercept_ms + sum(
            self.coef_ms.get(f, 0.0) * n for f, n in features(specs).items()
        )


def fit_correction(
    specs: Sequence[Sequence[OpSpec]],
    calibrated_ms: np.ndarray,
    measured_ms: np.ndarray,
    alpha: float,
) -> Correction:
    """Ridge of ``measured - calibrated`` on the models' ``features``."""
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import Ridge

    vec = DictVectorizer()
    x = vec.fit_transform([features(s) for s in specs])
    ridge = Ridge(alpha=alpha).fit(x, measured_ms - calibrated_ms)
    names = vec.get_feature_names_out()
    coef = {str(n): float(c) for n, c in zip(names, ridge.coef_, strict=True) if c != 0.0}
    return Correction(alpha, float(ridge.intercept_), coef)
