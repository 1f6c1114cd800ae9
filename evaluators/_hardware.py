"""Objectives priced on devices: latency, energy and the carbon of a deployment."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ._base import (
    MINIMIZE,
    Candidate,
    EvalSetup,
    Evaluator,
    Measurement,
    MetricKey,
    register_evaluator,
)

WORST = "worst"


def _devices(setup: EvalSetup, device: str) -> list[str]:
    if device == WORST:
        if not setup.latency:
            raise ValueError("latency_ms@worst needs at least one device's latency model")
        return sorted(setup.latency)
    if device not in setup.latency:
        raise ValueError(
            f"no latency model for device {device!r}; have: {sorted(setup.latency) or 'none'}"
        )
    return [device]


@register_evaluator("latency_ms")
class LatencyEvaluator(Evaluator):
    """Predicted latency on a device (``latency_ms@pi4``), or the worst over every device
    of the setup (``latency_ms@worst``), from its LatencyModel."""

    unit, direction = "ms", MINIMIZE
    priced_by_tables = True

    def __init__(self, *, device: str) -> None:
        self.device = device
        self.name = MetricKey.name("latency_ms", device)

    def evaluate(self, candidate: Candidate, setup: EvalSetup) -> Measurement:
        per_device = {}
        for d in _devices(setup, self.device):
            est = setup.latency[d].predict(setup.teacher, candidate.plan)
            per_device[d] = est
        worst = max(per_device, key=lambda d: per_device[d].latency_ms)
        est = per_device[worst]
        details = {"device": worst, "coverage": est.coverage, "sum_ms": est.sum_ms}
        if len(per_device) > 1:
            details["per_device_ms"] = {d: e.latency_ms for d, e in per_device.items()}
        return Measurement(est.latency_ms, "ms", "table", 0.0, details)


@register_evaluator("energy_mj")
class EnergyEvaluator(Evaluator):
    """Energy of one inference on a device in mJ: the table's measured energy column, or
    predicted latency x the device's active power."""

    unit, direction = "mJ", MINIMIZE
    priced_by_tables = True

    def __init__(self, *, device: str) -> None:
        self.device = device
        self.name = MetricKey.name("energy_mj", device)

    def evaluate(self, candidate: Candidate, setup: EvalSetup) -> Measurement:
        (device,) = _devices(setup, self.device)
        est = setup.latency[device].predict(setup.teacher, candidate.plan)
        if est.energy_mj is None:
            raise ValueError(
                f"device {device!r} has neither an energy column nor active_power_w; "
                "import its table with --power-w"
            )
        return Measurement(est.energy_mj, "mJ", "table", 0.0, {"latency_ms": est.latency_ms})


@dataclass(frozen=True)
class CarbonScenario:
    """A deployment: how often the model runs, for how long, and on which grid.

    Args:
        inferences_per_day: inferences a day, over the whole deployment.
        days: how long it runs.
        country_iso: ISO 3166-1 alpha-3 code of the grid (CodeCarbon's energy-mix data).
        cloud: ``provider:region`` (e.g. ``gcp:europe-west1``) instead of a country.
        pue: power usage effectiveness of the site (1.0 for an edge device).
        intensity_g_per_kwh: a fixed grid intensity, overriding the lookups.
    """

    inferences_per_day: float = 1e6
    days: float = 365.0
    country_iso: str = "FRA"
    cloud: str | None = None
    pue: float = 1.0
    intensity_g_per_kwh: float | None = None

    def intensity(self) -> tuple[float, str]:
        """Grid carbon intensity in gCO2e/kWh, and where it came from."""
        if self.intensity_g_per_kwh is not None:
            return float(self.intensity_g_per_kwh), "given"
        from codecarbon.input import DataSource

        source = DataSource()
        if self.cloud:
            provider, _, region = self.cloud.partition(":")
            df = source.get_cloud_emissions_data()
            rows = df[(df["provider"] == provider) & (df["region"] == region)]
            if rows.empty:
                raise ValueError(f"carbon.cloud: unknown cloud region {self.cloud!r}")
            return float(rows["impact"].iloc[0]), f"CodeCarbon cloud data {self.cloud}"
        mix = source.get_global_energy_mix_data()
        if self.country_iso not in mix:
            raise ValueError(f"carbon.country_iso: unknown country {self.country_iso!r}")
        entry = mix[self.country_iso]
        return float(entry["carbon_intensity"]), (
            f"CodeCarbon energy mix {self.country_iso} ({entry.get('year', '?')})"
        )

    def kwh(self, energy_mj: float) -> float:
        """The deployment's energy at ``energy_mj`` per inference, PUE included."""
        return energy_mj / 1000.0 / 3.6e6 * self.inferences_per_day * self.days * self.pue

    def co2e_g(self, energy_mj: float) -> float:
        """Operational gCO2e of the deployment at ``energy_mj`` per inference."""
        intensity, _ = self.intensity()
        return self.kwh(energy_mj) * intensity


@register_evaluator("co2e_g")
class CarbonEvaluator(Evaluator):
    """Operational gCO2e of a deployment scenario on a device (``co2e_g@pi4``; without a
    device, the setup's only device)."""

    unit, direction = "gCO2e", MINIMIZE
    priced_by_tables = True

    def __init__(self, *, device: str | None = None, scenario: Any = None) -> None:
        self.device = device
        self.scenario = (
            scenario if isinstance(scenario, CarbonScenario) else CarbonScenario(**(scenario or {}))
        )
        self.name = MetricKey.name("co2e_g", device)

    def evaluate(self, candidate: Candidate, setup: EvalSetup) -> Measurement:
        device = self.device
        if device is None:
            if len(setup.latency) != 1:
                raise ValueError("co2e_g: name the device (co2e_g@NAME) when there are several")
            device = next(iter(setup.latency))
        energy = EnergyEvaluator(device=device).evaluate(candidate, setup)
        intensity, source = self.scenario.intensity()
        return Measurement(
            self.scenario.co2e_g(energy.value),
            "gCO2e",
            "table",
            0.0,
            {
                "energy_mj": energy.value,
                "intensity_g_per_kwh": intensity,
                "intensity_source": source,
                "scenario": asdict(self.scenario),
                "device": device,
            },
        )


#: the name of every ``ServingSavings`` figure as a metric starts with this
SAVINGS_PREFIX = "serving_"


@dataclass(frozen=True)
class ServingSavings:
    """What serving a compressed model instead of its baseline saves over a deployment
    (``CarbonScenario``: inferences a day, days, grid, PUE), against what the search that
    found it cost. Every ``*_saved`` figure is baseline minus model (negative: it costs
    more). Per-deployment figures cover ``scenario.days`` days (365: a year).

    Attributes:
        latency_saved_ms: per inference.
        energy_saved_mj: per inference.
        energy_saved_kwh: over the deployment, PUE included.
        co2e_saved_g: over the deployment, at the scenario's grid intensity.
        instance_hours_saved: busy hours of a serving instance that runs one inference
            at a time, over the deployment.
        money_saved: at the given prices (per kWh, per instance-hour), or None.
        breakeven_day_co2e: the deployment day on which the gCO2e saved passes the
            search's own (None: never, or the search's carbon is unknown).
        breakeven_day_energy: the same for energy.
    """

    latency_saved_ms: float
    energy_saved_mj: float
    energy_saved_kwh: float
    co2e_saved_g: float
    instance_hours_saved: float
    money_saved: float | None
    breakeven_day_co2e: float | None
    breakeven_day_energy: float | None

    def metrics(self, device: str = "") -> dict[str, float]:
        """The figures as MLflow metrics (``serving_*``, on ``device`` where given; None
        left out)."""
        return {
            MetricKey.name(f"{SAVINGS_PREFIX}{k}", device): v
            for k, v in asdict(self).items()
            if v is not None
        }


def serving_savings(
    scenario: CarbonScenario,
    *,
    baseline_ms: float,
    model_ms: float,
    baseline_mj: float,
    model_mj: float,
    search_energy_kwh: float | None = None,
    search_co2e_g: float | None = None,
    price_per_kwh: float | None = None,
    price_per_instance_hour: float | None = None,
) -> ServingSavings:
    """Savings of serving a model at ``model_ms`` / ``model_mj`` per inference instead of
    its baseline, over ``scenario``, and the day each pays back the search's cost."""
    saved_mj = baseline_mj - model_mj
    kwh = scenario.kwh(saved_mj)
    co2e = scenario.co2e_g(saved_mj)
    hours = (baseline_ms - model_ms) / 3.6e6 * scenario.inferences_per_day * scenario.days
    money = None
    if price_per_kwh is not None or price_per_instance_hour is not None:
        money = kwh * (price_per_kwh or 0.0) + hours * (price_per_instance_hour or 0.0)

    def breakeven(cost: float | None, saved: float) -> float | None:
        if cost is None or saved <= 0:
            return None
        return cost / (saved / scenario.days)

    return ServingSavings(
        latency_saved_ms=baseline_ms - model_ms,
        energy_saved_mj=saved_mj,
        energy_saved_kwh=kwh,
        co2e_saved_g=co2e,
        instance_hours_saved=hours,
        money_saved=money,
        breakeven_day_co2e=breakeven(search_co2e_g, co2e),
        breakeven_day_energy=breakeven(search_energy_kwh, kwh),
    )
