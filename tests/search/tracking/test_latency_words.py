"""pick's latency warning says which way the model moved, as its sign reads."""

from __future__ import annotations

from frontier.search.tracking._results import latency_change, speedup_change


def test_a_slower_model_is_called_slower_and_a_faster_one_faster() -> None:
    # 0.007082 ms logged, 0.009664 measured: 36% slower here (not "-27%")
    slower = latency_change(0.007082, 0.009664)
    assert "logged 0.007082 ms, measured here 0.009664 ms: it runs 36% slower here" in slower
    assert "runs 50% faster here" in latency_change(2.0, 1.0)


def test_a_speed_up_below_its_price_is_called_less() -> None:
    said = speedup_change(1.45, 1.30)
    assert said.startswith("the search priced it 1.45x the uncompressed model's speed")
    assert said.endswith("measured here beside it, 1.30x (10% less than priced)")
    assert "(20% more than priced)" in speedup_change(1.0, 1.2)
