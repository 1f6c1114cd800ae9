"""`frontier lut measure` on a damaged bundle: exit 2 with one line naming the file,
never a traceback, and never a damaged model recorded as an op the device lacks."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from frontier.search.cli import main

CONFIG = {
    "name": "bad-bundles",
    "task": {"name": "digits", "options": {"model": "mlp"}},
    "space": {"prune_ratios": [0.0, 0.5], "weight_bits": [32], "act_bits": [32], "round_to": 8},
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bundle")
    config = folder / "c.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    out = folder / "ops.zip"
    assert main(["lut", "ops", str(config), "--out", str(out), "--calibration", "0"]) == 0
    return out


def _damaged(bundle: Path, kind: str, to: Path) -> Path:
    data = bundle.read_bytes()
    if kind == "truncated":
        to.write_bytes(data[: len(data) // 3])
    elif kind == "random":
        to.write_bytes(bytes(range(256)) * 20)
    elif kind == "text":
        to.write_text("these are not the models you are looking for\n")
    else:
        with zipfile.ZipFile(bundle) as src, zipfile.ZipFile(to, "w") as dst:
            onnx = [n for n in src.namelist() if n.endswith(".onnx")]
            for name in src.namelist():
                if kind == "no-manifest" and name == "manifest.json":
                    continue
                body = src.read(name)
                if kind == "corrupt-member" and name == onnx[1]:
                    body = b"\x00garbage" + body[:40]
                dst.writestr(name, body)
    return to


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("truncated", "not a readable op bundle zip"),
        ("random", "not a readable op bundle zip"),
        ("text", "not a readable op bundle zip"),
        ("no-manifest", "manifest.json"),
        ("corrupt-member", "is not a valid ONNX model"),
    ],
)
def test_a_damaged_bundle_is_exit_2_naming_it(
    bundle: Path, tmp_path: Path, capsys, kind: str, says: str
) -> None:
    bad = _damaged(bundle, kind, tmp_path / f"{kind}.zip")
    out = tmp_path / "table.csv"
    args = ["lut", "measure", str(bad), "--device", "d", "--out", str(out)]
    assert main([*args, "--rounds", "1", "--round-s", "0.01"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and says in err, err
    assert "Traceback" not in err


def test_an_op_whose_model_cannot_be_built_is_recorded_and_the_table_stands(
    mlp_setup, tmp_path, monkeypatch
) -> None:
    """An op model the builder cannot write (ShuffleNet's pruned channel shuffle in INT8
    made the quantizer raise) is recorded unsupported, with why, and the rest of the table
    is measured and prices plans; it is not measured again on the next search."""
    from frontier.latency_models import DeviceStore, LatencyModel, ensure_local_table
    from frontier.latency_models.bundle import _bundle

    task, model, x, space = mlp_setup
    built = _bundle.op_model_bytes
    refused: list[str] = []

    def build(spec, qdq=False):
        if spec.precision.startswith("int8") and spec.op_type == "Gemm" and not refused:
            refused.append(spec.key)
            raise RuntimeError("quantizer: shape mismatch\nmore lines")
        return built(spec, qdq)

    monkeypatch.setattr(_bundle, "op_model_bytes", build)
    store = DeviceStore(tmp_path / "store")
    kw = {"store": store, "name": "local-cpu", "calibration": 8, "rounds": 1, "round_s": 0.002,
          "calibration_data": task.calibration_batches()}  # fmt: skip
    table = ensure_local_table(model, x, space, **kw)
    row = table.get(refused[0])
    assert row is not None and row.status == "unsupported"
    assert sum(r.status == "ok" for r in table.rows if r.kind == "op") == len(table.ops()) - 1
    lm = LatencyModel(table)
    lm.bind(model, x, space)
    assert lm.predict(model, space.sample(0)).latency_ms > 0
    monkeypatch.setattr(_bundle, "op_model_bytes", built)
    again = ensure_local_table(model, x, space, **kw)  # found, not measured again
    assert again.rows == store.load("local-cpu").rows
    # the runner's row says why (a bundle of that op alone)
    import csv

    from frontier.latency_models import measure_bundle, write_bundle

    monkeypatch.setattr(_bundle, "op_model_bytes", build)
    refused.clear()
    bundle, out = tmp_path / "ops.zip", tmp_path / "t.csv"
    write_bundle(bundle, model=model, example_inputs=x, space=space, calibration=0)
    measure_bundle(bundle, out, device="t", kinds=("op",), rounds=1, round_s=0.002)
    with out.open() as f:
        why = {r["key"]: r["error"] for r in csv.DictReader(f)}[refused[0]]
    assert why == "op model not built (RuntimeError: quantizer: shape mismatch)"


def test_an_op_model_the_runtime_refuses_is_recorded_not_called_damaged(
    bundle: Path, tmp_path: Path
) -> None:
    """A member that reads as ONNX but that ONNX Runtime calls an invalid graph (Swin
    V2's ScatterND was written with float indices) is an op this device cannot take:
    its row says why and the rest of the table is measured. Before, the whole table
    stopped, calling the bundle damaged."""
    import csv

    from onnx import TensorProto, helper, numpy_helper

    from frontier.latency_models import measure_bundle

    indices = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(4, 1), "i")
    graph = helper.make_graph(
        [helper.make_node("ScatterND", ["d", "i", "u"], ["y"])], "refused",
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, [8]),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])], initializer=[indices],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    refused = tmp_path / "refused.zip"
    with zipfile.ZipFile(bundle) as src, zipfile.ZipFile(refused, "w") as dst:
        victim = sorted(n for n in src.namelist() if n.startswith("models/op-"))[0]
        for name in src.namelist():
            body = model.SerializeToString() if name == victim else src.read(name)
            dst.writestr(name, body)
    out = tmp_path / "t.csv"
    measure_bundle(refused, out, device="d", rounds=1, round_s=0.002)
    rows = list(csv.DictReader(out.open()))
    bad = [r for r in rows if r["status"] != "ok"]
    assert len(bad) == 1 and "INVALID_GRAPH" in bad[0]["error"], bad
    assert len(rows) > 1
