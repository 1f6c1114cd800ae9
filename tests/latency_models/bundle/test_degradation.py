"""A table never predicts worse than it was measured to without saying so: the runner's
result is self-contained, import refuses (or records) what it would lose, too few
calibration models are prevented or reported, a cold start does not set a model's
latency, and a table of another machine is not validated against this one."""

import csv
import shutil
import zipfile

import numpy as np
import onnxruntime as ort
import pytest

from frontier.latency_models import (
    LatencyModel,
    TableError,
    validate,
    write_bundle,
)
from frontier.latency_models.bundle._whole import whole_model_bytes
from frontier.latency_models.device._table import with_weights
from frontier.latency_models.ops._op_models import strip_weights
from frontier.latency_models.runner import open_session, session_options, time_models
from frontier.spaces import CompressionPlan

RUNNER_FILES = (".meta.json", ".manifest.json", ".profiles.jsonl")


def _copy_result(measured, tmp_path, *, leave_out: tuple[str, ...] = ()):
    """The runner's result copied to ``tmp_path``, without the files ``leave_out``."""
    out, _ = measured
    for file in out.parent.iterdir():
        suffix = file.name[len(out.name) :]
        if file.name.startswith(out.name) and suffix not in leave_out:
            shutil.copyfile(file, tmp_path / file.name)
    return tmp_path / out.name


def test_the_runners_result_imports_with_its_calibration_alone(measured, store, tmp_path) -> None:
    """No --bundle: the manifest the runner wrote beside the CSV brings the calibration."""
    table = store.import_table(_copy_result(measured, tmp_path), name="dev")
    quality = LatencyModel(table).quality()
    assert quality["calibration"]["models"] == 8
    assert quality["warnings"] == []
    assert quality["stored_validation"]["samples"] == 3  # the device's own validation models
    assert "import_warnings" not in table.meta


@pytest.mark.parametrize(
    ("missing", "needle"),
    [
        (".manifest.json", "no bundle manifest"),
        (".profiles.jsonl", "in-context calibration"),
        (".meta.json", "CPU, threads"),
    ],
    ids=["manifest", "profiles", "meta"],
)
def test_import_refuses_what_would_predict_worse(
    measured, store, tmp_path, missing: str, needle: str
) -> None:
    path = _copy_result(measured, tmp_path, leave_out=(missing,))
    with pytest.raises(TableError, match=needle) as err:
        store.import_table(path, name="dev")
    assert "--allow-degraded" in str(err.value) and not store.has("dev")
    table = store.import_table(path, name="dev", allow_degraded=True)
    assert any(needle in w for w in table.meta["import_warnings"])
    assert any(needle in w for w in LatencyModel(table).quality()["warnings"])


def test_without_the_manifest_predictions_are_the_plain_sum_and_say_so(
    measured, store, tmp_path
) -> None:
    path = _copy_result(measured, tmp_path, leave_out=(".manifest.json",))
    table = store.import_table(path, name="dev", allow_degraded=True)
    quality = LatencyModel(table).quality()
    assert quality["calibration"]["method"] == "sum"
    assert any("8 whole models" in w or "11 whole models" in w for w in quality["warnings"])


def test_too_few_calibration_models_are_prevented_or_reported(
    mlp_setup, measured, store, tmp_path
) -> None:
    _task, model, x, space = mlp_setup
    with pytest.raises(ValueError, match="at least 8"):
        write_bundle(tmp_path / "b.zip", model=model, example_inputs=x, space=space, calibration=4)
    path = _copy_result(measured, tmp_path)
    rows = list(csv.DictReader(path.open()))
    calibration = [r for r in rows if r["kind"] == "calibration"]
    kept = [r for r in rows if r not in calibration[4:]]  # a table with 4 of its 8
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(kept)
    table = store.import_table(path, name="dev")
    assert any("only 4 calibration models" in w for w in table.meta["import_warnings"])
    assert LatencyModel(table).quality()["calibration"]["method"] == "sum"


def test_bundle_models_carry_no_weights_and_run_from_a_seed(mlp_setup, bundle) -> None:
    task, model, x, _space = mlp_setup
    full = whole_model_bytes(model, CompressionPlan(), x, task.calibration_batches())
    stripped, layout = strip_weights(full)
    assert len(stripped) * 10 < len(full)
    assert {name for name, _, _ in layout}  # the MLP's weight matrices
    so = session_options(1)
    run, feeds = open_session(stripped, so, weights=layout, weights_seed=3)
    out = run()[0]
    rebuilt = ort.InferenceSession(with_weights(stripped, layout, 3), so)
    assert np.allclose(rebuilt.run(None, feeds)[0], out)  # the same seeded weights
    # every model of the bundle (ops, INT8 ones too, and whole models) runs from its seed
    path, manifest = bundle
    with zipfile.ZipFile(path) as zf:
        for entry in manifest["models"]:
            if entry.get("weights"):
                run, _ = open_session(
                    zf.read(entry["file"]),
                    so,
                    weights=entry["weights"],
                    weights_seed=entry["weights_seed"],
                )
                assert np.isfinite(run()[0]).all()


def test_a_cold_start_does_not_set_a_models_latency() -> None:
    """A machine that runs its first moments 1.4x slow (as a freshly booted one did): the
    warm-up and the later rounds outvote the cold ones (on a fake clock: the logic, not
    this machine's noise, is what is checked)."""
    from tests.latency_models.test_runner_and_table import FakeClock, _fake

    clock = FakeClock()
    warm = clock.model(lambda now_s: 0.2)
    cold = clock.model(lambda now_s: 0.2 * (1.4 if now_s < 0.12 else 1.0))
    a, b = time_models([warm, cold], **_fake(clock, round_s=0.05))
    assert a["median_ms"] == pytest.approx(0.2)
    assert b["median_ms"] == pytest.approx(0.2)  # the cold spell fell in the warm-up
    # ... and a cold spell that outlasts the warm-up and sets a round is outvoted
    clock = FakeClock()
    colder = clock.model(lambda now_s: 0.2 * (1.4 if now_s < 0.055 else 1.0))
    (c,) = time_models([colder], **_fake(clock, round_s=0.05))
    assert c["round_medians"][0] == pytest.approx(0.28) and c["median_ms"] == pytest.approx(0.2)


def test_a_table_of_another_machine_is_not_validated_here(table, mlp_setup) -> None:
    _task, model, x, space = mlp_setup
    table.meta = {**table.meta, "cpu": "ARM Cortex-A72"}
    lm = LatencyModel(table)
    with pytest.raises(ValueError, match="holds 3 measured validation models: use --samples 3"):
        validate(lm, model=model, example_inputs=x, space=space, samples=5)
    with pytest.raises(ValueError, match="Cortex-A72"):
        validate(lm, model=model, example_inputs=x, space=space, samples=3, measure="local")
    report = validate(lm, model=model, example_inputs=x, space=space, samples=3)
    assert report.measured == "table"
