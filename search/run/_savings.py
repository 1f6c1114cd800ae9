"""What a finished front is worth, member by member: a year of serving (what each saves
over the config's deployment, ``carbon``: inferences a day, days, grid, PUE, prices,
against its baseline, and the day that pays back the search's own energy and carbon,
CodeCarbon's measurement), and where its time goes layer by layer beside the
baseline's (``frontier profile``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from frontier.evaluators import MetricKey

from .._log import logger
from ..trials._view import SearchView


def report_savings(search: SearchView, log: Callable[[int, dict[str, float]], None]) -> None:
    """``front_savings`` handed to ``log`` (trial number, metrics) and printed one line
    per member and device; a failure is a warning, never the search's."""
    try:
        savings = front_savings(search)
    except Exception as err:
        logger.warning("serving savings not computed (%s)", err)
        return
    days = search.config.carbon.days
    for n, figures in savings.items():
        log(n, figures)
        for name, co2e in figures.items():
            if not name.startswith("serving_co2e_saved_g@"):
                continue
            device = MetricKey.parse(name).device
            day = figures.get(MetricKey.name("serving_breakeven_day_co2e", device))
            kwh = figures[MetricKey.name("serving_energy_saved_kwh", device)]
            pays = f", pays back the search's carbon on day {day:.0f}" if day else ""
            logger.info(
                "trial %d on %s: %.4g kWh and %.4g gCO2e saved over %g days%s",
                n, device, kwh, co2e, days, pays,
            )  # fmt: skip


def front_savings(search: SearchView) -> dict[int, dict[str, float]]:
    """Trial number -> ``serving_*@DEVICE`` figures for each final front member, on each
    device whose latency the search recorded. Energy per inference is the recorded
    ``energy_mj@DEVICE`` where there is one, else latency x the device table's
    ``active_power_w``; a device with neither is left out. Latencies are the table's
    predictions for model and baseline alike (the same pricing on both sides)."""
    from frontier.evaluators import serving_savings

    carbon = search.config.carbon
    scenario = carbon.scenario()
    base = search.baseline
    out: dict[int, dict[str, float]] = {}
    for n in sorted(search.front.numbers()):
        values = search.records[n].values()
        figures: dict[str, float] = {}
        for device in _devices(search, values):
            energy = _energy(search, device, values, base)
            if energy is None:
                continue
            saved = serving_savings(
                scenario,
                baseline_ms=base[MetricKey.name("latency_ms", device)],
                model_ms=values[MetricKey.name("latency_ms", device)],
                baseline_mj=energy[0],
                model_mj=energy[1],
                search_energy_kwh=search.summary.get("search_energy_kwh"),
                search_co2e_g=search.summary.get("search_co2e_g"),
                price_per_kwh=carbon.price_per_kwh,
                price_per_instance_hour=carbon.price_per_instance_hour,
            )
            figures.update(saved.metrics(device))
        if figures:
            out[n] = figures
    return out


def _devices(search: SearchView, values: dict[str, float]) -> list[str]:
    found = []
    for name in values:
        key = MetricKey.parse(name)
        if key.metric == "latency_ms" and key.device and name in search.baseline:
            found.append(key.device)
    return sorted(found)


def _energy(
    search: SearchView, device: str, values: dict[str, float], base: dict[str, float]
) -> tuple[float, float] | None:
    """(baseline, model) mJ per inference on ``device``."""
    key = MetricKey.name("energy_mj", device)
    if key in values and key in base:
        return base[key], values[key]
    table: Any = search.evaluation.tables.get(device)
    power = getattr(table, "active_power_w", None) if table is not None else None
    if not power:
        return None
    # ms x W = mJ
    latency = MetricKey.name("latency_ms", device)
    return base[latency] * power, values[latency] * power


#: profiled runs per model at the end of a search (``frontier profile`` uses 200)
PROFILE_RUNS = 100


def profile_front(
    search: SearchView, members: dict[int, tuple[Path, str]], folder: Path, tracker: Any
) -> None:
    """Each front member's ONNX model (``members``: trial number -> its model file and
    run id) profiled layer by layer beside the baseline's (exported here, uncompressed):
    ``profile/profile.csv`` and ``profile.png`` on its run. A failure is a warning,
    never the search's."""
    import pandas as pd

    from frontier.latency_models import CPU_1T, compare_layers, plot_layers, profile_layers

    if not members:
        return
    # on the first device the search prices that the profiler runs on, else one CPU thread
    devices = [d.local for d in search.config.typed.devices if d.local is not None]
    here = next((d for d in devices if d.runtime.profiles_layers), CPU_1T)
    try:
        base_path = folder / "baseline.onnx"
        search.evaluation.export_baseline(base_path)
        base = profile_layers(base_path, device=here, runs=PROFILE_RUNS, measure=False)
        priced = _table_prices(search, here)
        base_prices = priced({}) if priced else None  # the uncompressed plan, once
    except Exception as err:
        logger.warning("front not profiled (the baseline: %s)", err)
        return
    for n, (path, run_id) in members.items():
        try:
            mine = profile_layers(path, device=here, runs=PROFILE_RUNS, measure=False)
            prices = priced(search.records[n].plan) if priced else None
            rows = compare_layers(mine, base, prices=prices, base_prices=base_prices)
            out = folder / f"profile-{n}"
            out.mkdir(exist_ok=True)
            pd.DataFrame(rows).to_csv(out / "profile.csv", index=False)
            plot_layers(rows, out / "profile.png", f"trial {n}: layer times beside the baseline")
            tracker.log_artifact_files(
                run_id, [out / "profile.csv", out / "profile.png"], "profile"
            )
        except Exception as err:
            logger.warning("trial %d: not profiled (%s)", n, err)
    logger.info("profiled %d front members layer by layer (profile/ artifacts)", len(members))


def _table_prices(search: SearchView, profiled: Any) -> Any:
    """A function from a plan (a dict) to its ops' table prices per layer, on the
    device of this machine that runs models as ``profiled`` (the profiler's
    ``LocalDevice``) does (None where the search prices no such device)."""
    import math

    from frontier.latency_models import learned_entry, priced_layers
    from frontier.spaces import CompressionPlan

    ev = search.evaluation
    alike = [d.name for d in search.config.typed.devices if profiled.runs_like(d.local)]
    device = next((d for d in alike if d in ev.setup.latency), None)
    if device is None:
        return None
    lm = ev.setup.latency[device]

    def priced(plan: dict[str, Any]) -> dict[str, float]:
        plan_ = CompressionPlan.from_dict(plan)
        return priced_layers(lm, learned_entry(lm, ev.teacher, plan_, math.nan))

    return priced
