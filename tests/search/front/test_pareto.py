import numpy as np
import pytest

from frontier.search import Constraint, Objective, hypervolume, normalise, pareto_mask

ACC = Objective("accuracy", "maximize")
SIZE = Objective("size_bytes", "minimize")


def test_pareto_mask_respects_directions() -> None:
    values = np.array([[0.9, 100], [0.95, 200], [0.85, 150], [0.95, 300], [np.nan, 1]])
    assert pareto_mask(values, [ACC, SIZE]).tolist() == [True, True, False, False, False]


def test_hypervolume_two_objectives_by_hand() -> None:
    # normalised: (1 - acc/1.0, size/1000) -> (0.1, 0.1) and (0.5, 0.05); reference 1.1
    values = np.array([[0.9, 100.0], [0.5, 50.0]])
    expected = (1.1 - 0.1) * (1.1 - 0.1) + (0.1 - 0.5 + 0.4) * 0 + (1.1 - 0.5) * (0.1 - 0.05)
    assert hypervolume(values, [ACC, SIZE], [1.0, 1000.0]) == pytest.approx(expected)
    # a dominated point adds nothing; a point past the reference adds nothing
    more = np.vstack([values, [[0.8, 200.0]], [[0.99, 5000.0]]])
    assert hypervolume(more, [ACC, SIZE], [1.0, 1000.0]) == pytest.approx(expected)


def test_normalise_by_baseline() -> None:
    out = normalise(np.array([[0.5, 250.0]]), [ACC, SIZE], [1.0, 1000.0])
    assert out.tolist() == [[0.5, 0.25]]


@pytest.mark.parametrize(
    ("text", "value", "holds"),
    [("size_bytes <= 100", 100, True), ("accuracy >= 0.9", 0.89, False), ("x<=1e3", 999, True)],
    ids=["le-edge", "ge-miss", "sci"],
)
def test_constraint_parse_and_violation(text: str, value: float, holds: bool) -> None:
    c = Constraint.parse(text)
    assert c.holds(value) is holds
    assert (c.violation(value) <= 0) is holds


@pytest.mark.parametrize("text", ["size < 3", "size <= big", "<= 3"], ids=["op", "bound", "name"])
def test_constraint_errors_name_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="constraint"):
        Constraint.parse(text)


@pytest.mark.parametrize(
    ("text", "absolute"),
    [
        ("macs <= 60%", "macs <= 600"),
        ("accuracy >= baseline - 0.02", "accuracy >= 0.96"),
        ("accuracy>=baseline+0.01", "accuracy >= 0.99"),
        ("size_bytes <= 50", "size_bytes <= 50"),
    ],
    ids=["share", "offset-minus", "offset-plus", "absolute"],
)
def test_relative_constraints_resolve_against_the_baseline(text: str, absolute: str) -> None:
    c = Constraint.parse(text).resolve({"macs": 1000.0, "accuracy": 0.98, "size_bytes": 9.0})
    assert str(c) == absolute


def test_unresolved_relative_constraint_refuses_to_judge() -> None:
    with pytest.raises(ValueError, match="resolve"):
        Constraint.parse("macs <= 60%").holds(1.0)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("accuracy >= baseline -0.05", "accuracy >= baseline - 0.05"),
        ("accuracy>=baseline+0.01", "accuracy >= baseline + 0.01"),
        ("size_bytes <= 20395904", "size_bytes <= 20395904"),
        ("macs <= 1.5e9", "macs <= 1500000000"),
        ("latency_ms@local-cpu <= 123456.5", "latency_ms@local-cpu <= 123456"),
        ("det.size_bytes <= 2e7", "det.size_bytes <= 20000000"),
    ],
)
def test_constraints_read_as_people_write_them(text: str, shown: str) -> None:
    assert str(Constraint.parse(text)) == shown
    assert Constraint.parse(str(Constraint.parse(text))).relative == Constraint.parse(text).relative
