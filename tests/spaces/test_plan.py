import json

import pytest

from frontier.spaces import (
    PLAN_FORMAT_VERSION,
    CompressionPlan,
    DistillSpec,
    PlanError,
    Prune,
    Quantize,
    StudentSpec,
    discover,
)


def full_plan() -> CompressionPlan:
    return CompressionPlan(
        prune={"1": 0.5},
        weight_bits={"1": 4, "3": 8},
        act_bits={"3": 8},
        sparsity={"3": 0.75},
        distill=DistillSpec(temperature=4.0, alpha=0.9),
        student=None,
        round_to=8,
        importance="taylor",
    )


def test_json_round_trip_is_identity() -> None:
    plan = full_plan()
    again = CompressionPlan.from_json(json.dumps(json.loads(plan.to_json())))
    assert again == plan
    assert json.loads(plan.to_json())["format_version"] == PLAN_FORMAT_VERSION == 4


def test_older_plan_formats_still_load() -> None:
    old = {"format_version": 1, "prune": {"1": 0.5}, "weight_bits": {}, "act_bits": {}}
    assert CompressionPlan.from_dict(old) == CompressionPlan(prune={"1": 0.5})
    v3 = {**full_plan().to_dict(), "format_version": 3}
    del v3["techniques"]  # format 3 had no registered techniques
    assert CompressionPlan.from_dict(v3) == full_plan()


def test_unknown_technique_in_a_plan_is_named() -> None:
    with pytest.raises(PlanError, match="unknown technique 'nope'; registered: "):
        CompressionPlan.from_dict({"techniques": {"nope": {}}})


def test_student_round_trip() -> None:
    plan = CompressionPlan(student=StudentSpec("mlp", width_mult=0.5))
    assert CompressionPlan.from_dict(plan.to_dict()).student == StudentSpec("mlp", 0.5, 1.0)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"prunee": {}}, "unknown plan key 'prunee'; did you mean 'prune'"),
        ({"prune": {"1": 1.0}}, "ratio must be in [0, 1), got 1.0"),
        ({"prune": {"1": -0.1}}, "got -0.1"),
        ({"sparsity": {"1": 1.5}}, "sparsity['1']: ratio must be in [0, 1), got 1.5"),
        ({"weight_bits": {"1": 9}}, "bit width must be one of"),
        ({"distill": {"temperature": 0}}, "distill.temperature must be > 0"),
        ({"distill": {"alpha": 2}}, "distill.alpha must be in [0, 1]"),
        ({"student": {"family": "mlp", "width": 2}}, "unknown key student.width"),
        ({"format_version": 99}, "format_version"),
        ({"round_to": 0}, "round_to must be an integer >= 1"),
        ({"importance": "l3"}, "importance must be one of"),
    ],
    ids=[
        "unknown-key",
        "ratio-one",
        "ratio-negative",
        "sparsity",
        "bits-nine",
        "temperature-zero",
        "alpha-two",
        "student-unknown-key",
        "version",
        "round-to-zero",
        "importance",
    ],
)
def test_bad_plans_name_field_and_value(data: dict, needle: str) -> None:
    with pytest.raises(PlanError) as err:
        CompressionPlan.from_dict(data)
    assert needle in str(err.value)


def test_space_rejects_unknown_layer_with_suggestion(mlp, tmp_path) -> None:
    import torch

    space = discover(mlp, torch.randn(1, 64))
    with pytest.raises(PlanError, match=r"'features\.9'|did you mean '1'") as err:
        CompressionPlan.from_dict({"prune": {"11": 0.5}}, space=space)
    assert "'11' is not a layer of this search space" in str(err.value)
    assert "did you mean" in str(err.value)


def test_space_rejects_bits_it_does_not_allow(mlp) -> None:
    import torch

    from frontier.spaces import SpaceOptions

    space = discover(mlp, torch.randn(1, 64), SpaceOptions(weight_bits=(8, 32)))
    with pytest.raises(
        PlanError, match=r"weight_bits\['1'\]: bit width must be one of \[8, 32\], got 4"
    ):
        CompressionPlan.from_dict({"weight_bits": {"1": 4}}, space=space)


def test_plan_file_errors_name_the_file(tmp_path) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text("prune: {fc: 0.5}\n")  # YAML, not JSON
    with pytest.raises(PlanError, match=f"{bad}: plan is not valid JSON"):
        CompressionPlan.load(bad)
    with pytest.raises(PlanError, match=f"{tmp_path / 'missing.json'}: cannot read the plan"):
        CompressionPlan.load(tmp_path / "missing.json")
    good = tmp_path / "good.json"
    good.write_text(CompressionPlan(prune={"fc": 0.5}).to_json())
    assert CompressionPlan.load(good).prune == {"fc": 0.5}


@pytest.mark.parametrize("given", ["half", 0.5])
def test_a_list_given_as_one_value_says_it_wants_a_list(given) -> None:
    """``ratios: half`` was reported as "ratio must be a number, got 'h'"."""
    with pytest.raises(PlanError, match=f"ratios must be a list of ratios.*got {given!r}"):
        Prune(ratios=given)
    with pytest.raises(PlanError, match="weight_bits must be a list of bit widths.*got 8"):
        Quantize(weight_bits=8)
