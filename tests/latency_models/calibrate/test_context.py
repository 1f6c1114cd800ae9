import numpy as np

from frontier.latency_models import LatencyModel
from frontier.latency_models.calibrate._context import boundary_features, split_profile
from frontier.latency_models.ops._ops import INT8_FP32_ADD, OpSpec


def test_attribute_splits_profile_by_op_names() -> None:
    nodes = {
        "/f/f.0/f.0.2/Clip_output_0_nchwc": ["Conv", 100.0],  # fused conv+clip of op 0
        "/f/f.1/conv/Conv_quant_token_3": ["QLinearConv", 40.0],  # op 1 in INT8
        "/f/f.1/Add_quant": ["QLinearAdd", 10.0],  # its residual add
        "ReorderOutput_token_1": ["ReorderOutput", 5.0],
        "/f/f.1/conv/Conv_output_0_QuantizeLinear": ["QuantizeLinear", 7.0],
        "model_run": ["", 200.0],
    }
    op_nodes = [
        [
            "/f/f.0/f.0.0/Conv",
            "/f/f.0/f.0.0/Conv_output_0",
            "/f/f.0/f.0.2/Clip",
            "/f/f.0/f.0.2/Clip_output_0",
        ],
        ["/f/f.1/conv/Conv", "/f/f.1/conv/Conv_output_0", "/f/f.1/Add", "/f/f.1/Add_output_0"],
    ]
    per_op, gaps, run = split_profile(nodes, op_nodes)
    assert per_op == [0.1, 0.05] and gaps == {1: 0.012} and run == 0.2


def _spec(precision: str, cin: int, cout: int) -> OpSpec:
    return OpSpec("Conv", (), ((1, cin, 4, 4),), (1, cout, 4, 4), (), (1, 1), 1, precision)


def _random_plan(rng: np.random.Generator, n_ops: int) -> list[OpSpec]:
    """A chain of ``n_ops`` convolutions with random widths and precisions."""
    chans = [3, *(int(c) for c in rng.choice([8, 16, 32], size=n_ops))]
    precisions = rng.choice(["fp32", "int8"], size=n_ops)
    return [_spec(str(p), a, b) for p, a, b in zip(precisions, chans[:-1], chans[1:], strict=True)]


def _op_ms(spec: OpSpec) -> float:
    return 0.002 * spec.input_shapes[0][1] * spec.output_shape[1] / 8


def test_boundary_features_count_int8_regions() -> None:
    specs = [_spec("fp32", 3, 8), _spec("int8", 8, 8), _spec("int8", 8, 4), _spec("fp32", 4, 2)]
    q, dq, n, const = boundary_features(specs)
    assert q == 8 * 16 / 1e6 and dq == 4 * 16 / 1e6 and n == 2 and const == 1
    # an INT8 op whose residual Add runs FP32 leaves the INT8 region by itself
    specs = [_spec(INT8_FP32_ADD, 3, 8), _spec("fp32", 8, 4), _spec("int8", 4, 2)]
    q, dq, n, _ = boundary_features(specs)
    assert q == (3 + 4) * 16 / 1e6 and dq == (8 + 2) * 16 / 1e6 and n == 4


def test_runner_profiles_calibration_models_and_model_picks_calibration(measured, store) -> None:
    out, manifest = measured
    lines = (out.parent / "table.csv.profiles.jsonl").read_text().splitlines()
    assert len(lines) == 8  # the calibration models
    table = store.import_table(out, name="t", manifest=manifest)
    assert len(table.profiles) == 8
    lm = LatencyModel(table)
    est = lm.predict_ops(lm.calibration_samples()[0].specs)
    # the calibration in use is the candidate (method or blend) with the lowest CV error
    assert lm.method_cv and lm.method == min(lm.method_cv, key=lm.method_cv.__getitem__)
    assert set(lm.weights) <= {"sum", "isolated-sum", "groups", "isolated-groups", "context"}
    assert abs(sum(lm.weights.values()) - 1) < 1e-12
    assert np.isfinite(est.latency_ms) and est.latency_ms > 0


def test_context_fits_glue_to_unprofiled_latency() -> None:
    """The profiler inflates small glue nodes; whole-model latency follows the
    unprofiled glue, which the fit recovers from the measured latencies."""
    from frontier.latency_models.calibrate._context import fit_context

    rng = np.random.default_rng(0)

    def plan() -> list[OpSpec]:
        return _random_plan(rng, 4)

    op_ms = _op_ms

    def truth(specs: list[OpSpec]) -> float:
        q, dq, n, _ = boundary_features(specs)
        return sum(map(op_ms, specs)) + 400 * q + 300 * dq + 0.004 * n + 0.01

    samples = []
    for _ in range(30):
        specs = plan()
        q, dq, n, _ = boundary_features(specs)
        nodes = {f"op{i}/Conv": ["Conv", 1000 * op_ms(s)] for i, s in enumerate(specs)}
        # profiled glue: three times the real cost, plus the profiler's 20 us per boundary
        nodes["glue/QuantizeLinear"] = [
            "QuantizeLinear",
            1000 * (3 * (400 * q + 300 * dq) + 0.02 * n),
        ]
        op_nodes = [[f"op{i}/Conv"] for i in range(len(specs))]
        samples.append((specs, op_nodes, nodes, truth(specs)))
    model = fit_context(samples, op_ms)
    assert model is not None
    held_out = [plan() for _ in range(20)]
    errors = [abs(model.predict(s, op_ms) / truth(s) - 1) for s in held_out]
    assert max(errors) < 0.01


def test_glue_goes_to_the_gap_it_runs_in() -> None:
    nodes = {
        "Transpose_token_0": ["Transpose", 3.0],  # before any op: the model's input
        "op0/Conv": ["Conv", 50.0],
        "ReorderOutput": ["ReorderOutput", 4.0],
        "op0_QuantizeLinear": ["QuantizeLinear", 6.0],
        "op1/Conv_quant": ["QLinearConv", 20.0],
        "op1_DequantizeLinear": ["DequantizeLinear", 8.0],
        "model_run": ["", 100.0],
    }
    _, gaps, _ = split_profile(nodes, [["op0/Conv"], ["op1/Conv"]])
    assert gaps == {-1: 0.003, 0: 0.01, 1: 0.008}


def test_context_learns_glue_per_gap() -> None:
    """Glue that is not linear in the crossing tensor's size (here a transpose into 8
    channels costs five times one into 32): the per-gap glue learnt from profiles
    predicts held-out models that the size-linear boundary predictors alone miss."""
    from frontier.latency_models.calibrate._context import fit_context

    rng = np.random.default_rng(1)

    def plan() -> list[OpSpec]:
        return _random_plan(rng, 5)

    op_ms = _op_ms

    def gap_ms(a: OpSpec, b: OpSpec) -> float:
        if a.precision == b.precision:
            return 0.0
        return 0.02 if a.output_shape[1] == 8 else 0.004

    def profile(specs: list[OpSpec]) -> dict[str, list]:
        nodes: dict[str, list] = {}
        for i, s in enumerate(specs):
            if i and gap_ms(specs[i - 1], s):  # profiled: twice the cost, plus 5 us
                nodes[f"glue{i}"] = ["Transpose", 1000 * (2 * gap_ms(specs[i - 1], s) + 0.005)]
            nodes[f"op{i}/Conv"] = ["Conv", 1000 * op_ms(s)]
        return nodes

    def truth(specs: list[OpSpec]) -> float:
        return sum(map(op_ms, specs)) + sum(map(gap_ms, specs, specs[1:])) + 0.01

    samples = []
    for _ in range(40):
        specs = plan()
        samples.append((specs, [[f"op{i}/Conv"] for i in range(5)], profile(specs), truth(specs)))
    held_out = [plan() for _ in range(30)]
    mape = {}
    for gaps in (True, False):
        model = fit_context(samples, op_ms, gaps=gaps)
        assert model is not None
        mape[gaps] = np.mean([abs(model.predict(s, op_ms) / truth(s) - 1) for s in held_out])
    assert mape[True] < 0.01 < mape[False]
