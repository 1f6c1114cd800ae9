"""One timing function behind every latency Frontier reports: the device runner's table
rows, ``lut validate``'s measured models, ``frontier pick``'s measurement and the
sparse-kernel rows all go through ``runner.time_models``."""

import json

import pytest

from frontier.latency_models import LatencyModel, measure_bundle, validate
from frontier.latency_models import runner as runner_module
from frontier.latency_models.bundle._sparse import measure_sparse_rows, sparse_variants
from frontier.latency_models.bundle._whole import whole_model_bytes
from frontier.spaces import CompressionPlan


@pytest.fixture
def timed(monkeypatch):
    """Counts the models each caller had ``time_models`` time."""
    calls: list[int] = []
    real = runner_module.time_models

    def counting(runs, **kwargs):
        calls.append(len(runs))
        return real(runs, **kwargs)

    monkeypatch.setattr(runner_module, "time_models", counting)
    return calls


def test_runner_validate_pick_and_sparse_rows_share_one_timer(
    timed, bundle, table, mlp_setup, ops, tmp_path, capsys, caplog
) -> None:
    from frontier.search import measure_picked as _measure_pick

    path, manifest = bundle
    measure_bundle(path, tmp_path / "t.csv", device="d", rounds=1, round_s=0.005, redo_budget_s=0)
    # every row of the table, in each chunk the uncompressed model it is stated against,
    # and the sample of whole models timed again for the table's noise band
    again = json.loads((tmp_path / "t.csv.meta.json").read_text())["noise_models"]
    assert sum(timed) == len(manifest["models"]) + len(timed) + again

    timed.clear()
    _, model, x, space = mlp_setup
    validate(
        LatencyModel(table), model=model, example_inputs=x, space=space, samples=3, measure="local"
    )
    assert sum(timed) == 3 + 1 + 1  # the plans, the uncompressed one, it again as reference

    timed.clear()
    onnx_path = tmp_path / "pick.onnx"
    onnx_path.write_bytes(whole_model_bytes(model, CompressionPlan(), x))
    measured = _measure_pick(onnx_path, {"latency_ms@local-cpu": 1e-6, "size_bytes": 10.0})
    assert sum(timed) == 1 and measured["local-cpu"] > 0
    # 1e-6 ms is far off: warned on the frontier logger (on stderr once a command or a
    # Search has shown its messages; to pytest's capture before)
    assert "latency_ms@local-cpu: logged" in capsys.readouterr().err + caplog.text

    timed.clear()
    dense = [o for o in ops.ops if o.op_type == "Gemm" and o.precision == "fp32"][:1]
    rows = measure_sparse_rows(sparse_variants(dense, [0.5]), overhead_ms=0.0, rounds=1)
    assert sum(timed) == len(rows) == 1
