"""Per-layer sensitivity: each layer's (or group's) compression choices one at a time.

Every per-layer choice of the space (a prune ratio of one group, the weight or
activation bits of one layer) is applied alone, every other layer left uncompressed,
and the plan is scored at the cheap rung on every metric of the config. The drop in
accuracy beside the saving in size, MACs and latency says which layers can be squeezed
and which cannot. Results are cached by what determines them (task, space, rung
settings, seed, device tables), so a second call, or a resumed search, measures nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from frontier.evaluators import FIDELITIES

from .._log import logger


def choices(space: Any) -> list[tuple[str, Any]]:
    """``(dimension, choice)`` of every per-layer compression choice of ``space``: each
    choice of each dimension that belongs to a layer (``Dimension.layer``) but its
    uncompressed one."""
    out = []
    for dim in space.dimensions():
        if not dim.layer or "/" in dim.name:
            continue  # a whole-model choice, or a student's own layers: not the model's
        out += [(dim.name, c) for c in dim.choices if c != dim.uncompressed]
    return out


#: a search's sensitivity pass scores each choice at the first rung while there are at
#: most this share of its trial budget's choices, else at the proxy fidelity
SEARCH_SHARE = 0.2


def for_search(
    evaluation: Any, name: str, trials: int, backend: Any = None
) -> tuple[list[dict[str, Any]], str]:
    """A search's per-layer sensitivity: ``(rows, fidelity)``, cached by config ``name``
    (a resumed search reads it). Each choice alone at the first rung while that is at
    most ``SEARCH_SHARE`` of ``trials``; else without fine-tuning (a large model has
    hundreds of choices). Scored on the search's ``backend``'s workers where it has more
    than one."""
    from frontier.experiments import cache_dir

    def progress(done: int, total: int, seconds: float) -> None:
        if done == total or done % 20 == 0:
            logger.info("sensitivity %d/%d (%.0f s)", done, total, seconds)

    count = len(choices(evaluation.space)) + 1
    rung: int | str = 0
    if evaluation.rungs[0] != "proxy" and count > SEARCH_SHARE * trials:
        rung = "proxy"
        logger.info(
            "sensitivity of %d choices at the proxy fidelity (more than %.0f%% of %d trials)",
            count,
            SEARCH_SHARE * 100,
            trials,
        )
    cache = cache_dir() / f"sensitivity-{name}.json"
    rows = sensitivity(evaluation, rung=rung, cache=cache, progress=progress, backend=backend)
    return rows, evaluation.fidelity(rung)


def cache_key(evaluation: Any, rung: int | str) -> str:
    """What the sensitivities depend on, hashed. Not the device tables: what they price
    is priced again from the cache (``_repriced``), so a table that learnt a front or
    gained another model's ops keeps the accuracies measured before."""
    config = json.loads(evaluation.config.model_dump_json())
    data = {
        **{k: config.get(k) for k in ("task", "space", "objectives")},
        "metrics": list(evaluation.metrics),
        "rung": evaluation.fidelity(rung),
        "seed": evaluation.config.search.seed,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def sensitivity(
    evaluation: Any,
    *,
    rung: int | str = 0,
    cache: Path | None = None,
    progress: Callable[[int, int, float], None] | None = None,
    backend: Any = None,
) -> list[dict[str, Any]]:
    """Score every per-layer choice alone (``choices``) at ``rung``.

    Args:
        evaluation: the search's ``TrialRunner`` (task, space, evaluators, tables).
        rung: the rung to score at (0: the cheapest), or a fidelity name such as
            ``"proxy"`` (no fine-tuning) that the config need not list.
        cache: a JSON file holding results by ``cache_key``; read, and written.
        progress: called with (done, total, seconds) after each plan.
        backend: a search ``Backend`` whose workers score the plans, as many at once
            as it has slots, at rung 0 or a named fidelity (None, one slot or a later
            rung: one after another in this process).

    Returns:
        One row per choice: ``dimension``, ``layer``, ``choice``, every metric's value,
        and ``<metric>_delta`` (value minus the uncompressed model's at the same rung);
        the first row is the uncompressed model (``dimension`` "none").
    """
    key = cache_key(evaluation, rung)
    stored = _read(cache)
    if key in stored:
        return _repriced(evaluation, list(stored[key]["rows"]), rung)
    space = evaluation.space
    todo = [("none", None), *choices(space)]
    layers = {d.name: d.layer for d in space.dimensions()}
    plans = [space.plan_of({} if value is None else {name: value}) for name, value in todo]
    scored = _scored(evaluation, plans, rung, backend, progress)
    rows = [
        {"dimension": name, "layer": layers.get(name, ""), "choice": value, **values}
        for (name, value), values in zip(todo, scored, strict=True)
    ]
    _deltas(rows, evaluation.metrics)
    if cache is not None:
        stored[key] = {"rung": evaluation.fidelity(rung), "rows": rows}
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(stored, indent=1))
    return rows


def _deltas(rows: list[dict[str, Any]], metrics: list[str]) -> None:
    """Each row's ``<metric>_delta``: its value minus the first (uncompressed) row's."""
    for row in rows:
        for metric in metrics:
            row[f"{metric}_delta"] = row[metric] - rows[0][metric]


def _repriced(evaluation: Any, rows: list[dict[str, Any]], rung: int | str) -> list[dict[str, Any]]:
    """Cached ``rows`` with every metric a device table prices (latency, energy,
    carbon) priced again by the tables as they are now: milliseconds a plan."""
    priced = [m for m in evaluation.metrics if evaluation.evaluator(m, rung).priced_by_tables]
    if not priced:
        return rows
    space = evaluation.space
    for row in rows:
        params = {} if row["dimension"] == "none" else {row["dimension"]: row["choice"]}
        row.update(evaluation.evaluate(space.plan_of(params), rung, priced).values)
    _deltas(rows, priced)
    return rows


def _scored(
    evaluation: Any,
    plans: list[Any],
    rung: int | str,
    backend: Any,
    progress: Callable[[int, int, float], None] | None,
) -> list[dict[str, float]]:
    """Every metric of each of ``plans`` at ``rung``, in order: in this process, or on
    ``backend``'s workers, as many at once as it has slots. A plan that fails ends the
    pass with its error (a sensitivity row cannot be left out)."""
    from ..trials._backends import Job

    start = time.perf_counter()
    out: dict[int, dict[str, float]] = {}

    def keep(i: int, values: dict[str, float]) -> None:
        out[i] = values
        if progress is not None:
            progress(len(out), len(plans), time.perf_counter() - start)

    # a job at a later rung is a promotion, which scores accuracy alone
    if backend is None or backend.slots < 2 or rung not in (0, *FIDELITIES):
        for i, plan in enumerate(plans):
            keep(i, evaluation.evaluate(plan, rung).values)
        return [out[i] for i in range(len(plans))]
    todo = list(enumerate(plans))
    pending: dict[Any, int] = {}
    while todo or pending:
        while todo and len(pending) < backend.slots:
            i, plan = todo.pop(0)
            pending[backend.submit(Job(plan.to_dict(), rung))] = i
        for handle, outcome in backend.wait(list(pending)):
            i = pending.pop(handle)
            if isinstance(outcome, BaseException):
                raise outcome
            keep(i, outcome.values)
    return [out[i] for i in range(len(plans))]


def _read(cache: Path | None) -> dict[str, Any]:
    if cache is None or not cache.exists():
        return {}
    try:
        data = json.loads(cache.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        logger.info("%s is not valid JSON; measuring again", cache)
        return {}
    return data if isinstance(data, dict) else {}


def plot(rows: list[dict[str, Any]], path: Path, *, metric: str = "accuracy") -> Path:
    """A bar per choice: the change of ``metric`` it brings alone, grouped by layer, so
    a reader sees which layers take which compression without loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows[1:] if f"{metric}_delta" in r]
    labels = [f"{r['dimension']}={r['choice']}" for r in shown]
    deltas = [r[f"{metric}_delta"] for r in shown]
    fig, ax = plt.subplots(figsize=(7, max(2.5, 0.22 * len(shown) + 1)))
    ax.barh(range(len(shown)), deltas, color=["C3" if d < 0 else "C2" for d in deltas])
    ax.set_yticks(range(len(shown)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel(f"change of {metric} with this choice alone")
    ax.set_title("per-layer sensitivity (every other layer uncompressed)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
