from types import SimpleNamespace

import pytest
import torch
from torch import nn

from frontier.evaluators import (
    Candidate,
    CarbonScenario,
    EvalSetup,
    EvaluationError,
    Evaluator,
    build_evaluator,
    distill,
    evaluator_names,
    measure_accuracy,
)
from frontier.experiments import DigitsTask
from frontier.spaces import CompressionPlan, DistillSpec


@pytest.fixture(scope="module")
def digits() -> DigitsTask:
    return DigitsTask(model="mlp")


@pytest.fixture
def eval_setup(digits) -> EvalSetup:
    return EvalSetup(task=digits, teacher=digits.baseline())


def test_registry_and_objective_names() -> None:
    assert {"accuracy", "size_bytes", "macs", "bops", "latency_ms", "energy_mj", "co2e_g"} <= set(
        evaluator_names()
    )
    ev = build_evaluator("latency_ms@pi4")
    assert ev.name == "latency_ms@pi4" and ev.unit == "ms" and ev.direction == "minimize"
    assert build_evaluator("accuracy").direction == "maximize"
    with pytest.raises(ValueError, match="unknown evaluator 'latncy_ms'"):
        build_evaluator("latncy_ms@pi4")


def test_size_of_a_hand_computed_plan(eval_setup) -> None:
    plan = CompressionPlan(
        prune={"features.1": 0.5},
        weight_bits={"features.1": 4},
        act_bits={"features.1": 8},
        round_to=8,
    )
    m = build_evaluator("size_bytes")(Candidate(plan, id="c1"), eval_setup)
    # features.1: 64 -> 128 kept of 256, 4-bit weights + (scale, zero point) per channel,
    # FP32 biases, one activation qparam pair; features.3: 128 -> 128 FP32; classifier FP32
    first = 64 * 128 // 2 + 128 * 5 + 128 * 4 + 5
    second = (128 * 128 + 128) * 4
    classifier = (128 * 10 + 10) * 4
    assert m.value == first + second + classifier and m.unit == "bytes"
    onnx = build_evaluator("size_bytes", format="onnx")(Candidate(plan, id="c1"), eval_setup)
    assert onnx.details["accounted_bytes"] == m.value and onnx.value > 0


def test_costs_are_counted_once_and_need_no_calibration(eval_setup, monkeypatch) -> None:
    """Size, MACs and BOPs of a candidate come from one build; where no evaluator built
    the calibrated model (the sampler's cost-only screening), they are counted on the
    plan's structure without the calibration passes, and equal the calibrated model's.
    The size alone runs no forward pass: MACs are counted when first asked for."""
    from frontier.spaces import apply_plan, model_cost

    plan = CompressionPlan(
        prune={"features.1": 0.5}, weight_bits={"features.3": 8}, act_bits={"features.3": 8}
    )
    calibrated = model_cost(eval_setup.compressed(Candidate(plan)), plan, eval_setup.example_inputs)
    builds: list[int] = []
    counts: list[bool] = []
    monkeypatch.setattr(eval_setup, "calibration", lambda: pytest.fail("calibrated for a count"))
    import frontier.evaluators._base as base

    monkeypatch.setattr(base, "apply_plan", lambda *a: builds.append(1) or apply_plan(*a))
    monkeypatch.setattr(
        base,
        "model_cost",
        lambda *a, macs=True: counts.append(macs) or model_cost(*a, macs=macs),
    )
    candidate = Candidate(plan)
    values = {
        n: build_evaluator(n)(candidate, eval_setup).value
        for n in ("size_bytes", "macs", "bops", "size_bytes")
    }
    assert values == {
        "size_bytes": calibrated.size_bytes,
        "macs": calibrated.macs,
        "bops": calibrated.bops,
    }
    assert builds == [1] and counts == [False, True] and candidate._model is None
    assert candidate._structure is None  # let go once every count is in


def test_costs_come_from_shapes_when_the_context_has_the_space(digits, monkeypatch) -> None:
    """With the space, a cost-only evaluation (the sampler's finalists) builds no model:
    after the counter's probes, plans are counted from shapes, with the same values."""
    from frontier.spaces import SpaceOptions, apply_plan, discover, model_cost

    teacher = digits.baseline()
    x = digits.example_inputs()
    space = discover(teacher, x, SpaceOptions(prune_ratios=(0.0, 0.5), weight_bits=(8, 32)))
    eval_setup = EvalSetup(task=digits, teacher=teacher, space=space)
    for seed in (7, 8, 9):  # the third plan counted from structure makes the counter
        build_evaluator("macs")(Candidate(space.sample(seed)), eval_setup)
    assert eval_setup._counter is not None and eval_setup._counter.ok
    import frontier.evaluators._base as base

    monkeypatch.setattr(base, "apply_plan", lambda *a, **k: pytest.fail("built a model"))
    for seed in range(2, 6):
        plan = space.sample(seed)
        candidate = Candidate(plan)
        got = {n: build_evaluator(n)(candidate, eval_setup).value for n in ("size_bytes", "macs")}
        built = model_cost(apply_plan(teacher, plan, x), plan, x)
        assert got == {"size_bytes": built.size_bytes, "macs": built.macs}


def test_structure_counts_equal_the_compressed_model_on_random_plans() -> None:
    """The cost-only build (no quantizers, channels ranked by L1) counts the same size,
    MACs and BOPs as the compressed model, for Taylor-ranked and quantized plans too."""
    import dataclasses
    import warnings

    import torchvision

    from frontier.evaluators._base import structure_plan
    from frontier.spaces import SpaceOptions, apply_plan, discover, model_cost

    model = torchvision.models.get_model("mobilenet_v2", weights=None, num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        space = discover(model, x, SpaceOptions(round_to=8, weight_bits=(4, 8, 32)))
    for seed in range(4):
        plan = space.sample(seed)
        if seed % 2:
            plan = dataclasses.replace(plan, importance="taylor")
        assert plan.weight_bits and plan.prune
        full = model_cost(apply_plan(model, plan, x, calibration_data=[x]), plan, x)
        fast = model_cost(apply_plan(model, structure_plan(plan), x), plan, x)
        for field in ("params", "size_bytes", "macs", "bops", "other_macs"):
            assert getattr(fast, field) == getattr(full, field), (seed, field)


def test_macs_and_bops(eval_setup) -> None:
    plan = CompressionPlan(weight_bits={"classifier": 8}, act_bits={"classifier": 8})
    macs = build_evaluator("macs")(Candidate(plan), eval_setup)
    bops = build_evaluator("bops")(Candidate(plan), eval_setup)
    assert macs.value == 64 * 256 + 256 * 128 + 128 * 10
    assert bops.value == (64 * 256 + 256 * 128) * 32 * 32 + 128 * 10 * 8 * 8


def _stub_latency(latency_ms: float, power_w: float | None):
    def predict(model, plan):
        energy = latency_ms * power_w if power_w is not None else None
        return SimpleNamespace(
            latency_ms=latency_ms, energy_mj=energy, coverage={}, sum_ms=latency_ms
        )

    return SimpleNamespace(predict=predict)


def test_energy_is_latency_times_power(eval_setup) -> None:
    eval_setup.latency = {"pi4": _stub_latency(20.0, 3.5), "jetson": _stub_latency(5.0, 10.0)}
    c = Candidate(CompressionPlan())
    assert build_evaluator("energy_mj@pi4")(c, eval_setup).value == pytest.approx(70.0)
    worst = build_evaluator("latency_ms@worst")(c, eval_setup)
    assert worst.value == 20.0 and worst.details["device"] == "pi4"
    eval_setup.latency = {"npu": _stub_latency(1.0, None)}
    with pytest.raises(EvaluationError, match="neither an energy column nor active_power_w"):
        build_evaluator("energy_mj@npu")(c, eval_setup)


def test_carbon_arithmetic_with_fixed_intensity(eval_setup) -> None:
    scenario = CarbonScenario(inferences_per_day=1000, days=10, pue=1.5, intensity_g_per_kwh=500)
    # 3.6 mJ x 10,000 inferences = 36 J = 1e-5 kWh; x 1.5 PUE x 500 g/kWh
    assert scenario.co2e_g(3.6) == pytest.approx(0.0075)
    eval_setup.latency = {"pi4": _stub_latency(2.0, 1.8)}
    m = build_evaluator("co2e_g", scenario=scenario)(Candidate(CompressionPlan()), eval_setup)
    assert m.value == pytest.approx(0.0075) and m.details["scenario"]["pue"] == 1.5


def test_grid_intensity_from_codecarbon() -> None:
    france, source = CarbonScenario(country_iso="FRA").intensity()
    poland, _ = CarbonScenario(country_iso="POL").intensity()
    assert 0 < france < poland and "CodeCarbon" in source
    with pytest.raises(ValueError, match="unknown country 'XXX'"):
        CarbonScenario(country_iso="XXX").intensity()


def test_distillation_loss_falls_and_teacher_is_untouched(digits, eval_setup) -> None:
    teacher = eval_setup.teacher
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    student = build_student_like(teacher)
    losses = distill(
        student,
        teacher,
        digits.loaders(batch_size=64),
        steps=200,
        temperature=4.0,
        alpha=0.9,
        lr=1e-3,
        seed=0,
    )
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    assert last < 0.7 * first, (first, last)
    plan = CompressionPlan(prune={"features.1": 0.5}, distill=DistillSpec(4.0, 0.7))
    for fidelity in ("proxy", "short", "full"):
        build_evaluator("accuracy", fidelity=fidelity, steps=20)(Candidate(plan), eval_setup)
    for k, v in teacher.state_dict().items():
        assert torch.equal(v, before[k]), k


def build_student_like(teacher: nn.Module) -> nn.Module:
    from frontier.spaces import StudentSpec, build_student

    return build_student(
        StudentSpec("mlp", width_mult=0.25), num_classes=10, example_inputs=torch.zeros(1, 1, 8, 8)
    )


def test_short_fine_tune_recovers_accuracy(eval_setup) -> None:
    plan = CompressionPlan(prune={"features.1": 0.75, "features.3": 0.75}, round_to=8)
    c = Candidate(plan, id="p75")
    proxy = build_evaluator("accuracy", fidelity="proxy")(c, eval_setup)
    short = build_evaluator("accuracy", fidelity="short", steps=150)(c, eval_setup)
    assert short.fidelity == "short" and short.details["split"] == "val"
    assert short.value > 0.9 and short.value >= proxy.details["agreement"] - 0.05
    # saliency's backward pass only where it is reported or every signal is asked for
    assert set(proxy.details) == {"agreement", "neg_kl"}
    every = build_evaluator("accuracy", fidelity="proxy", all_signals=True)(c, eval_setup)
    assert set(every.details) == {"agreement", "neg_kl", "saliency"}
    assert every.details["agreement"] == proxy.details["agreement"]
    assert every.details["neg_kl"] == pytest.approx(proxy.details["neg_kl"])


def test_a_failing_evaluator_names_candidate_and_evaluator(eval_setup) -> None:
    class Broken(Evaluator):
        name = "broken_metric"

        def evaluate(self, candidate, eval_setup):
            raise RuntimeError("device fell over")

    with pytest.raises(
        EvaluationError,
        match="evaluator 'broken_metric' failed on candidate trial-7: "
        "RuntimeError: device fell over",
    ):
        Broken()(Candidate(CompressionPlan(), id="trial-7"), eval_setup)
    with pytest.raises(EvaluationError, match="no latency model for device 'pi9'"):
        build_evaluator("latency_ms@pi9")(Candidate(CompressionPlan(), id="t"), eval_setup)


def test_student_plan_is_distilled_from_the_teacher(eval_setup) -> None:
    from frontier.spaces import StudentSpec

    plan = CompressionPlan(
        student=StudentSpec("mlp", width_mult=0.5), distill=DistillSpec(temperature=4.0, alpha=0.5)
    )
    c = Candidate(plan, id="student")
    untrained = build_evaluator("accuracy", fidelity="proxy")(c, eval_setup)
    trained = build_evaluator("accuracy", fidelity="short", steps=300)(c, eval_setup)
    assert untrained.value < 0.5 < 0.85 < trained.value  # random init, then distilled
    size = build_evaluator("size_bytes")(c, eval_setup).value
    assert size < build_evaluator("size_bytes")(Candidate(CompressionPlan()), eval_setup).value


def test_no_batch_is_an_error_not_a_score_or_a_hang() -> None:
    """An empty loader scored 0 and, when trained on, was cycled forever."""
    with pytest.raises(EvaluationError, match="held no batch"):
        measure_accuracy(nn.Linear(2, 3), [])
    empty = SimpleNamespace(train=[], val=[(torch.zeros(2, 2), torch.tensor([0, 1]))])
    student = nn.Linear(2, 3)
    with pytest.raises(EvaluationError, match="training data held no batch"):
        distill(
            student, nn.Linear(2, 3), empty, steps=3, temperature=2.0, alpha=0.5, lr=0.01, seed=0
        )


class _Regression:
    """A made-up task whose metric is no mean of batches (the share of the split's
    largest errors under 0.5: what mAP and mean IoU are like) and whose loss is its own."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def score(self):
        class Worst:
            def __init__(self) -> None:
                self.errors: list[torch.Tensor] = []

            def update(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
                self.errors.append((outputs.squeeze(-1) - targets).abs())

            def compute(self) -> float:
                return float((torch.cat(self.errors) < 0.5).float().mean())

        return Worst()

    def loss(self, outputs, targets, teacher, *, temperature: float, alpha: float):
        value = nn.functional.mse_loss(outputs.squeeze(-1), targets)
        self.losses.append(float(value))
        return value


def test_a_tasks_own_score_and_loss_drive_scoring_and_fine_tuning() -> None:
    from frontier.evaluators import measure_accuracy, task_loss, task_score

    torch.manual_seed(0)
    x = torch.randn(96, 4)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0])
    batches = [(x[i : i + 32], y[i : i + 32]) for i in range(0, 96, 32)]
    model = nn.Linear(4, 1)
    task = _Regression()
    before = measure_accuracy(model, batches, score=task_score(task))
    # the split's share, not a mean of per-batch figures: one pass over all 96 errors
    with torch.no_grad():
        errors = (model(x).squeeze(-1) - y).abs()
    assert before == pytest.approx(float((errors < 0.5).float().mean()))
    loaders = SimpleNamespace(train=batches, val=batches)
    distill(model, model, loaders, steps=300, temperature=1.0, alpha=0.0, lr=0.05, seed=0,
            loss=task_loss(task))  # fmt: skip
    assert len(task.losses) == 300 and task.losses[-1] < 0.01 * task.losses[0]
    assert measure_accuracy(model, batches, score=task_score(task)) == 1.0
