"""What the surrogate sampler costs per proposal inside a real search.

Runs a scenario's config at ``--trials`` trials with its short rung alone (two workers as
the config says; the front is neither exported, measured, profiled nor learnt, so the
run is the search loop), then reads each proposal's wall time from the sampler
(``study.sampler.proposals_s``) and the search summary (``sampler_propose_median_s``,
``sensitivity_s``: cached sensitivities cost nothing). Target (issue "Accuracy a user
can trust"): median <= 2 s a proposal on every real scenario.

Run: python benchmarks/bench_sampler.py SCENARIO [--trials 12]
     [--json benchmarks/report-logs/sampler-SCENARIO.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path


def main() -> None:
    from bench_search import _search  # a search in a scratch folder, front left alone

    from frontier.search import load_config

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenario", help="a built-in scenario or a config file")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    config = load_config(args.scenario).override(
        {"search.fidelity.rungs": ["short"], "search.trials": args.trials}
    )
    start = time.perf_counter()
    search, _ = _search(config)
    proposals = [round(p, 3) for p in getattr(search.study.sampler, "proposals_s", [])]
    out = {
        "scenario": config.name,
        "trials": args.trials,
        "cpus": os.cpu_count(),
        "wall_s": round(time.perf_counter() - start, 1),
        "summary": search.summary,
        "proposals_s": proposals,
        "median_s": statistics.median(proposals) if proposals else None,
    }
    if not proposals:
        print(f"the sampler {config.search.sampler!r} times no proposals (not the surrogate)")
    print(json.dumps(out, indent=1, default=float))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
