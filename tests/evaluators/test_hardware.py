"""A year of serving: the savings arithmetic a carbon analyst checks by hand."""

from __future__ import annotations

import pytest

from frontier.evaluators import CarbonScenario, serving_savings


def test_a_year_of_serving_and_the_day_it_pays_back_the_search() -> None:
    # 1 ms and 10 mJ saved per inference (10 W), a million inferences a day for a year
    scenario = CarbonScenario(inferences_per_day=1e6, days=365, pue=1.5, intensity_g_per_kwh=100)
    saved = serving_savings(
        scenario,
        baseline_ms=2.0,
        model_ms=1.0,
        baseline_mj=20.0,
        model_mj=10.0,
        search_energy_kwh=0.5,
        search_co2e_g=50.0,
        price_per_kwh=0.2,
        price_per_instance_hour=1.0,
    )
    kwh = 10.0 * 3.65e8 / 3.6e9 * 1.5  # mJ x inferences -> kWh, x PUE
    assert saved.latency_saved_ms == 1.0 and saved.energy_saved_mj == 10.0
    assert saved.energy_saved_kwh == pytest.approx(kwh)  # 1.52 kWh
    assert saved.co2e_saved_g == pytest.approx(kwh * 100)
    hours = 1.0 * 3.65e8 / 3.6e6  # 101.4 busy hours of one serving instance
    assert saved.instance_hours_saved == pytest.approx(hours)
    assert saved.money_saved == pytest.approx(kwh * 0.2 + hours * 1.0)
    assert saved.breakeven_day_co2e == pytest.approx(50.0 / (kwh * 100 / 365))  # day 120
    assert saved.breakeven_day_energy == pytest.approx(0.5 / (kwh / 365))
    assert set(saved.metrics("pi4")) == {
        f"serving_{k}@pi4"
        for k in (
            "latency_saved_ms", "energy_saved_mj", "energy_saved_kwh", "co2e_saved_g",
            "instance_hours_saved", "money_saved", "breakeven_day_co2e", "breakeven_day_energy",
        )
    }  # fmt: skip


def test_a_model_that_costs_more_never_pays_back() -> None:
    scenario = CarbonScenario(intensity_g_per_kwh=100)
    saved = serving_savings(
        scenario, baseline_ms=1.0, model_ms=1.2, baseline_mj=5.0, model_mj=6.0, search_co2e_g=10
    )
    assert saved.co2e_saved_g < 0 and saved.breakeven_day_co2e is None
    assert saved.money_saved is None  # no price given
    assert "serving_money_saved" not in saved.metrics()
