import pytest

from frontier.search import Constraint, Objective, SpreadPromotion
from frontier.search._front import Front, TrialRecord

ACC = Objective("accuracy", "maximize")
LAT = Objective("latency_ms@local-cpu", "minimize")


def _front(short: dict[int, tuple[float, float]]) -> Front:
    """Trials scored at the short rung (0) only: number -> (accuracy, latency_ms)."""
    records = {
        n: TrialRecord(
            n,
            {},
            {"n": n},
            "complete",
            rungs={0: {"accuracy": acc, "latency_ms@local-cpu": ms}},
        )
        for n, (acc, ms) in short.items()
    }
    return Front(records, [ACC, LAT], [Constraint("accuracy", ">=", 0.765)])


# trial 0: accurate and slow; 1: fast, 4 points short of the bound after the cheap rung;
# 2: fast and hopeless
TRIALS = {0: (0.80, 10.0), 1: (0.733, 5.0), 2: (0.40, 2.0)}


def test_without_slack_a_near_miss_at_the_cheap_rung_stays_there() -> None:
    picks = SpreadPromotion(share=1.0).select(_front(TRIALS), rungs=2)
    assert picks == [(0, 1)]


def test_slack_promotes_the_near_miss_and_not_the_hopeless() -> None:
    picks = SpreadPromotion(share=1.0, slack=0.1).select(_front(TRIALS), rungs=2)
    assert sorted(picks) == [(0, 1), (1, 1)]


def test_slack_leaves_the_front_itself_constrained() -> None:
    front = _front(TRIALS)
    SpreadPromotion(share=1.0, slack=0.1).select(front, rungs=2)
    assert front.numbers() == [0]


def test_promotion_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="slack"):
        SpreadPromotion(share=0.5, slack=1.0)
    with pytest.raises(ValueError, match="share"):
        SpreadPromotion(share=0.0)


# four feasible members, each more accurate and slower than the next
LADDER = {0: (0.80, 10.0), 1: (0.79, 8.0), 2: (0.78, 6.0), 3: (0.77, 4.0)}


def test_spread_promotes_both_ends_of_the_front() -> None:
    picks = SpreadPromotion(share=0.5).select(_front(LADDER), rungs=2)
    assert sorted(picks) == [(0, 1), (3, 1)]


def test_toward_latency_promotes_the_fastest_members_only() -> None:
    """A 'fastest student keeping 95%' question spends no full rung on slow members."""
    picks = SpreadPromotion(share=0.5, toward="latency_ms@local-cpu").select(
        _front(LADDER), rungs=2
    )
    assert sorted(picks) == [(2, 1), (3, 1)]
    picks = SpreadPromotion(share=0.5, toward="accuracy").select(_front(LADDER), rungs=2)
    assert sorted(picks) == [(0, 1), (1, 1)]


def test_toward_must_name_an_objective() -> None:
    from frontier.search import ConfigError, parse_config

    with pytest.raises(ValueError, match="toward"):
        SpreadPromotion(share=0.5, toward="co2e_g").select(_front(LADDER), rungs=2)
    with pytest.raises(
        ConfigError, match=r"search.fidelity.toward: 'macs' is not an objective"
    ) as err:
        parse_config(
            {
                "objectives": ["accuracy", "latency_ms@local-cpu"],
                "search": {"fidelity": {"toward": "macs"}},
            }
        )
    assert "(got" not in str(err.value)  # the message, not the whole config echoed back
    config = parse_config(
        {
            "objectives": ["accuracy", "latency_ms@local-cpu"],
            "search": {"fidelity": {"toward": "latency_ms@local-cpu"}},
        }
    )
    assert config.search.fidelity.toward == "latency_ms@local-cpu"
