"""Sparse-kernel rows: the CSR kernel computes the layer, and the table prices it."""

import dataclasses

import pytest
import torch

from frontier.latency_models import LatencyModel, OpSpec, ensure_local_table
from frontier.latency_models.bundle._sparse import (
    measure_sparse_rows,
    sparse_kernel,
    sparse_variants,
)
from frontier.spaces import SpaceOptions, discover

CONV = OpSpec(
    op_type="Conv",
    fused=("Relu",),
    input_shapes=((1, 8, 6, 6),),
    output_shape=(1, 16, 3, 3),
    attrs=(("dilations", (1, 1)), ("pads", (1, 1, 1, 1)), ("strides", (2, 2))),
    kernel=(3, 3),
    groups=1,
    precision="fp32",
)
GEMM = OpSpec(
    op_type="Gemm",
    fused=(),
    input_shapes=((1, 64),),
    output_shape=(1, 32),
    attrs=(("transB", 1),),
    kernel=(),
    groups=1,
    precision="fp32",
)


def test_sparse_variants_are_fp32_dense_convs_and_linears_only() -> None:
    int8 = dataclasses.replace(GEMM, precision="int8")
    depthwise = dataclasses.replace(CONV, groups=8, output_shape=(1, 8, 3, 3))
    found = list(sparse_variants([CONV, GEMM, int8, depthwise], [0.0, 0.5, 0.9]))
    assert [(s.kind, s.sparsity) for s in found] == [
        ("conv", 0.5),
        ("conv", 0.9),
        ("linear", 0.5),
        ("linear", 0.9),
    ]
    assert all(s.key.endswith(f"sparse={s.sparsity:g}") for s in found)


@pytest.mark.parametrize("spec", [CONV, GEMM], ids=["conv", "linear"])
def test_csr_kernel_computes_what_the_dense_layer_does(spec: OpSpec) -> None:
    sparse = dataclasses.replace(spec, sparsity=0.75)
    out = sparse_kernel(sparse)()
    assert out.shape == spec.output_shape
    torch.testing.assert_close(out, sparse_kernel(sparse, dense=True)(), rtol=1e-4, atol=1e-4)


def test_rows_are_measured_and_the_overhead_added_back() -> None:
    rows = measure_sparse_rows(sparse_variants([CONV, GEMM], [0.5]), overhead_ms=0.25)
    assert [r.op_type for r in rows] == ["conv-sparse", "linear-sparse"]
    for r in rows:
        assert r.status == "ok" and r.runs >= 25
        assert 0.25 < r.p10_ms <= r.median_ms <= r.p90_ms


def test_local_table_gets_sparse_rows_and_sparse_plans_use_them(mlp_setup, store) -> None:
    _, model, x, _ = mlp_setup
    options = SpaceOptions(
        prune_ratios=(0.0, 0.5), weight_bits=(32,), act_bits=(32,), sparsity=(0.0, 0.9)
    )
    space = discover(model, x, options)
    table = ensure_local_table(model, x, space, store=store, calibration=0)
    sparse_rows = [r for r in table.ops() if r.op_type.endswith("-sparse")]
    assert len(sparse_rows) == sum(1 for _ in sparse_variants(_ops(model, x, space), [0.9]))
    assert "CSR" in table.meta["sparse_kernels"]
    lm = LatencyModel(table, calibrate=False)
    lm.bind(model, x, space)
    plan = dataclasses.replace(space.sample(0), sparsity={"features.1": 0.9})
    estimate = lm.predict(model, plan)
    assert estimate.coverage["sparse_as_dense"] == 0
    sparse_op = next(o for o in estimate.ops if "sparse=0.9" in o.key)
    assert sparse_op.source == "table"
    assert sparse_op.latency_ms == pytest.approx(
        table.get(sparse_op.key).median_ms - table.overhead_ms
    )


def _ops(model, x, space):
    from frontier.latency_models import space_ops

    return space_ops(model, x, space).ops
