"""Does a device table calibrate one space's plans better on its own models alone?

A device's table holds the rows of every space measured on it (the scenarios', a user's
own models', the quick start's). For each space the table measured with at least
``--min-models`` calibration models, its calibration models are split in ``--folds``
seeded folds; each fold is held out and predicted by the table's calibration fitted on
the other folds, twice:

- ``every``: with every other space's calibration models as well (how tables calibrated
  before 2026-12-03);
- ``own``: on the space's own models alone (``OpPricer.space_rows``, what a model bound to
  the table now gets).

Reported per space: MAPE, the share within 10%, the median error, and the median error
of the faster and the slower half of its models, halved by the prediction, and of the half
with fewer multiply-accumulates (the more pruned plans). Halving by the measured times
instead shows the table's noise as a bias: a row that measured fast lands in the fast half
because of its own error (on a table measured at a 26% noise band, the measured halves
read +7% and -7% where the predicted halves read +1% and -1%); those figures are kept in
the JSON (``*_by_measured``). No timing: it reads a stored table.

Run: python benchmarks/bench_own_calibration.py [--device local-cpu] [--store DIR]
     [--folds 5] [--label BUNDLE=NAME ...] [--json benchmarks/report-logs/own-calibration.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from report_sections import own_calibration_section

from frontier.latency_models import DeviceStore, DeviceTable, LatencyModel, Row

HERE = Path(__file__).resolve().parent


def _errors(
    table: DeviceTable, bundle: str, folds: int, own: bool
) -> list[tuple[float, float, float]]:
    """(predicted ms, measured ms, MACs) of each of ``bundle``'s calibration models, held
    out."""
    tag = f"baseline-{bundle}"
    mine = [r for r in table.rows if r.kind == "calibration" and r.baseline_key == tag]
    random.Random(0).shuffle(mine)
    pairs = []
    for k in range(folds):
        held = {r.key for r in mine[k::folds]}
        rows: list[Row] = [r for r in table.rows if r.key not in held]
        sub = DeviceTable(
            name=table.name, meta=table.meta, rows=rows, path=table.path,
            models=table.models, profiles=table.profiles,
        )  # fmt: skip
        lm = LatencyModel(sub)
        lm.pricer.space = bundle if own else ""
        lm.choose_calibration()
        for r in mine[k::folds]:
            specs = [lm.spec_of(key) for key in table.models[r.key]["op_keys"]]
            if any(s is None for s in specs):
                continue
            ops = [s for s in specs if s is not None]
            predicted = lm.predict_ops(ops, as_measured=False)
            pairs.append((predicted.latency_ms, r.median_ms, float(sum(s.macs for s in ops))))
        print(f"  {bundle} fold {k} {'own' if own else 'every'}: {lm.method}", file=sys.stderr)
    return pairs


def _summary(pairs: list[tuple[float, float, float]]) -> dict[str, float]:
    predicted, measured, macs = np.array(pairs).T
    error = predicted / measured - 1

    def median(where: np.ndarray) -> float:
        return round(float(np.median(error[where])), 4)

    fast = predicted < np.median(predicted)
    fast_measured = measured < np.median(measured)
    return {
        "mape": round(float(np.mean(abs(error))), 4),
        "within_10pct": round(float(np.mean(abs(error) <= 0.10)), 3),
        "median_error": round(float(np.median(error)), 4),
        "fast_half_median_error": median(fast),
        "slow_half_median_error": median(~fast),
        "fewer_macs_half_median_error": median(macs < np.median(macs)),
        "fast_half_median_error_by_measured": median(fast_measured),
        "slow_half_median_error_by_measured": median(~fast_measured),
    }


def run(table: DeviceTable, folds: int, min_models: int) -> dict[str, Any]:
    spaces: dict[str, Any] = {}
    keys = sorted({r.baseline_key for r in table.rows if r.kind == "baseline"})
    for tag in keys:
        bundle = tag.removeprefix("baseline-")
        count = sum(r.kind == "calibration" and r.baseline_key == tag for r in table.rows)
        if count < min_models:
            print(f"{bundle}: {count} calibration models, skipped", file=sys.stderr)
            continue
        start = time.perf_counter()
        baseline = next(r.median_ms for r in table.rows if r.key == tag)
        spaces[bundle] = {
            "models": count,
            "other_models": sum(r.kind == "calibration" for r in table.rows) - count,
            "baseline_ms": baseline,
            "every": _summary(_errors(table, bundle, folds, own=False)),
            "own": _summary(_errors(table, bundle, folds, own=True)),
        }
        print(f"{bundle}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return {
        "device": table.name,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "folds": folds,
        "spaces": spaces,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="local-cpu")
    parser.add_argument("--store", default=None, help="device store (default: Frontier's)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--min-models", type=int, default=20)
    parser.add_argument(
        "--label", action="append", default=[], metavar="BUNDLE=NAME",
        help="name a space in the report (its bundle id is all the table knows)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, default=HERE / "report-logs" / "own-calibration.json")
    args = parser.parse_args()
    result = run(DeviceStore(args.store).load(args.device), args.folds, args.min_models)
    for item in args.label:
        bundle, _, name = item.partition("=")
        if bundle in result["spaces"]:
            result["spaces"][bundle]["label"] = name
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(own_calibration_section(result)))


if __name__ == "__main__":
    main()
