"""How far one driver goes: sustained trials per second with instant trials.

Each trial scores two instant objectives (``benchmarks/driver/instant_objectives.py``,
a plugin drawing numbers from a hash of the plan), so the search loop's own work is all
that is timed: ask (NSGA-II), the plan drawn from the digits-mcu space, submit, tell,
the study's storage write, MLflow logging (parameters, metrics, tags, front tags every
generation; no front model exports). Set-ups, each ``--trials`` trials:

- ``local``: trials in the driver, the Optuna journal file, MLflow in SQLite;
- ``local, tracking server``: the same against an MLflow tracking server on loopback;
- ``local, PostgreSQL ...``: the study in PostgreSQL and the tracking server's runs in
  PostgreSQL too (a throwaway server on loopback, ``tests/services.py``);
- ``ray``: trials as Ray tasks on a local Ray pinned to 127.0.0.2 (``--ray-slots`` at
  once), journal and SQLite.

From each throughput: how many workers one driver keeps busy with trials of 1 s, 10 s
and 60 s (throughput x trial seconds). Writes ``benchmarks/report-logs/cluster.json``.

Run: python benchmarks/bench_driver.py [--trials 300] [--skip-ray] [--skip-server]
    [--skip-postgres] [--compare-lanes]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the throwaway servers of the tests
from tests import services  # noqa: E402

TRIAL_SECONDS = (1, 10, 60)


def _config(work: Path, trials: int, **over: Any) -> Any:
    from frontier.search import load_config, parse_config

    space = load_config("digits-mcu").space
    data: dict[str, Any] = {
        "name": "driver-bench",
        "plugins": ["instant_objectives"],
        "task": {"name": "digits", "options": {"model": "mlp"}},
        "space": {
            "techniques": {
                "prune": {"ratios": list(space.prune_ratios)},
                "quantize": {
                    "weight_bits": list(space.weight_bits),
                    "act_bits": list(space.act_bits),
                },
            },
            "round_to": space.round_to,
        },
        "objectives": ["instant_a", "instant_b"],
        "search": {"trials": trials, "population": 20, "anchors": False},
        "storage": str(work / "study.journal"),
        "tracking": {"uri": f"sqlite:///{work / 'mlflow.db'}", "export_front": False},
    }
    for key, value in over.items():
        section, _, field = key.partition(".")
        if field:
            data.setdefault(section, {})[field] = value
        else:
            data[section] = value
    return parse_config(data, source="bench_driver")


def measure(label: str, trials: int, **over: Any) -> dict[str, Any]:
    """One search; sustained throughput counts from the first trial until every MLflow
    write has landed (the tracking callback drains its queue before the clock stops)."""
    from frontier.search import Callback, Search

    class Clock(Callback):  # after the default callbacks: MLflow has drained on finish
        def on_start(self, search: Any) -> None:
            self.start = time.perf_counter()

        def on_finish(self, search: Any, status: str) -> None:
            self.end = time.perf_counter()

    clock = Clock()
    with tempfile.TemporaryDirectory(prefix="frontier-driver-") as tmp:
        search = Search(_config(Path(tmp), trials, **over), progress=False, callbacks=[clock])
        result = search.run()
    done = int((result.trials.state == "complete").sum())
    sustained_s = clock.end - clock.start
    per_s = done / sustained_s
    row = {
        "setup": label,
        "trials": done,
        "loop_s": round(search.timing.loop_s, 2),
        "sustained_s": round(sustained_s, 2),
        "trials_per_s": round(per_s, 2),
        "ms_per_trial": round(1000 / per_s, 2),
        "workers_kept_busy": {f"{s}s_trials": round(per_s * s) for s in TRIAL_SECONDS},
    }
    print(
        f"{label}: {done} trials in {sustained_s:.1f} s (loop {search.timing.loop_s:.1f} s, "
        f"the rest MLflow catching up), {per_s:.1f} trials/s; workers kept busy at "
        "1/10/60 s a trial: " + "/".join(str(v) for v in row["workers_kept_busy"].values()),
        flush=True,
    )
    return row


def tracking_server(trials: int) -> dict[str, Any]:
    """The local set-up against an MLflow tracking server (SQLite behind it) on loopback."""
    with (
        tempfile.TemporaryDirectory(prefix="frontier-mlflow-") as tmp,
        services.mlflow_server(Path(tmp)) as url,
    ):
        return measure("local, tracking server", trials, **{"tracking.uri": url})


def postgres(trials: int) -> dict[str, Any]:
    """A team's set-up: the study in PostgreSQL, the runs in a tracking server whose
    backend store is PostgreSQL too (one throwaway server on loopback, fsync on)."""
    with services.postgres(fsync=True) as server, tempfile.TemporaryDirectory() as tmp:
        backend = services.create_database(server, "mlflow")
        storage = services.create_database(server, "optuna")
        with services.mlflow_server(Path(tmp), backend) as url:
            return measure(
                "local, PostgreSQL storage, tracking server on PostgreSQL",
                trials,
                storage=storage,
                **{"tracking.uri": url},
            )


def compare_lanes(trials: int, runs: int = 3) -> dict[str, list[float]]:
    """MLflow's write lanes (``tracking.write_lanes``), 1 against 4, alternating against
    one tracking server (PostgreSQL behind it; the study in a journal)."""
    out: dict[str, list[float]] = {"1": [], "4": []}
    with services.postgres(fsync=True) as server, tempfile.TemporaryDirectory() as tmp:
        backend = services.create_database(server, "mlflow")
        with services.mlflow_server(Path(tmp), backend) as url:
            for lanes in [1, 4] * runs:
                over = {"tracking.uri": url, "tracking.write_lanes": lanes}
                row = measure(f"{lanes} MLflow lanes", trials, **over)
                out[str(lanes)].append(row["trials_per_s"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--ray-slots", type=int, default=4, help="Ray tasks at once")
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument(
        "--compare-lanes", action="store_true", help="also time 1 against 4 MLflow lanes"
    )
    parser.add_argument("--json", default=str(HERE / "report-logs" / "cluster.json"))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    # the plugin must be importable here and in every worker (Ray's inherit PYTHONPATH)
    plugin_dir = str(HERE / "driver")
    sys.path.insert(0, plugin_dir)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [plugin_dir, *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    import torch

    rows, not_measured = [measure("local", args.trials)], []
    if not args.skip_server:
        rows.append(tracking_server(args.trials))
    if not args.skip_postgres:
        if services.postgres_bindir() is None:
            not_measured.append("PostgreSQL (initdb not found: apt-get install postgresql)")
        else:
            rows.append(postgres(args.trials))
    if not args.skip_ray:
        cpus = max(0.01, (os.cpu_count() or 1) / args.ray_slots)
        rows.append(
            measure(
                f"ray, {args.ray_slots} tasks at once",
                args.trials,
                **{"backend.kind": "ray", "backend.cpus_per_trial": cpus},
            )
        )
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()} CPUs, torch {torch.__version__}",
        "trial_seconds": list(TRIAL_SECONDS),
        "not_measured": not_measured,
        "rows": rows,
    }
    if args.compare_lanes:
        out["mlflow_lanes_trials_per_s"] = compare_lanes(args.trials)
    Path(args.json).write_text(json.dumps(out, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
