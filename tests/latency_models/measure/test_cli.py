"""The `frontier lut` commands as a user runs them: ops -> measure -> import -> list/show ->
validate, on a small digits-MLP config."""

import json

import yaml

from frontier.search.cli import main

CONFIG = {
    "name": "lut-test",
    "task": {"name": "digits", "options": {"model": "mlp"}},
    "space": {
        "prune_ratios": [0.0, 0.5],
        "weight_bits": [8, 32],
        "act_bits": [8, 32],
        "round_to": 8,
    },
}


def test_lut_workflow(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("FRONTIER_DATA_DIR", str(tmp_path / "data"))
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    bundle, table = tmp_path / "ops.zip", tmp_path / "pi.csv"
    assert (
        main(
            [
                "lut",
                "ops",
                str(config),
                "--out",
                str(bundle),
                "--validation",
                "4",
                "--calibration",
                "8",
            ]
        )
        == 0
    )
    assert "ops, 8 calibration and 4 validation models" in capsys.readouterr().out
    assert (
        main(
            [
                "lut",
                "measure",
                str(bundle),
                "--device",
                "pi",
                "--out",
                str(table),
                "--rounds",
                "3",
                "--round-s",
                "0.01",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "lut",
                "import",
                str(table),
                "--name",
                "pi",
                "--power-w",
                "3.5",
            ]
        )
        == 0
    )
    # no --bundle: the runner's files beside the CSV bring the calibration along
    printed = capsys.readouterr()
    assert "calibration models" in printed.out and "calibration: " in printed.out
    assert "validation models measured on the device: 4" in printed.out
    assert "WARNING" not in printed.err
    assert main(["lut", "list"]) == 0
    assert capsys.readouterr().out.startswith("pi ")
    assert main(["lut", "show", "pi"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["active_power_w"] == 3.5 and summary["validation_models"] == 4
    assert summary["quality"]["calibration"]["models"] == 8
    assert summary["quality"]["stored_validation"]["samples"] == 4
    assert summary["protocol"]["rounds"] == 3  # how the runner timed its rows
    # which predictor prices each measured kind's missing ops, and how well
    fallbacks = summary["fallbacks"]
    assert "linear/fp32" in fallbacks and "linear/int8" in fallbacks
    for fit in fallbacks.values():
        assert fit["method"] in ("linear", "power", "gbr") and fit["rows"] >= 1
    # the MLP's FP32 linear ops run within a microsecond or two of the session overhead,
    # so their error relative to that net time is large; it is reported, finite
    # (test_model.py checks the fits themselves on ops of known cost)
    assert 0 <= fallbacks["linear/fp32"]["cv_wape"] < float("inf")
    out = tmp_path / "val"
    assert (
        main(
            ["lut", "validate", "--device", "pi", str(config), "--samples", "4", "--out", str(out)]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["samples"] == 4 and (out / "validation.png").exists()
    # the report names the calibration it used (8 calibration models: one was picked by CV)
    cal = report["calibration"]
    # (the report rounds each MAPE to 4 places: a blend within 0.00005 of its part ties)
    assert cal["cv_mape"][cal["method"]] <= min(cal["cv_mape"].values()) + 1e-4
    # the figures are kept with the table
    assert main(["lut", "show", "pi"]) == 0
    kept = json.loads(capsys.readouterr().out)["quality"]["validation"]
    assert kept["samples"] == 4 and kept["measured"] == "table"
    # too few calibration models are refused, with the rule
    args = ["lut", "ops", str(config), "--out", str(tmp_path / "b.zip"), "--calibration", "4"]
    assert main(args) == 2
    assert "calibration must be 0 or at least 8" in capsys.readouterr().err


def test_lut_import_rejects_bad_rows(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("model_id,kind,key,status,median_ms\nop-0,op,k1,ok,0.1\nop-1,op,k2,ok,-3\n")
    assert main(["lut", "import", str(bad), "--name", "x", "--store", str(tmp_path / "s")]) == 2
    assert "row 3: median_ms must be finite and > 0" in capsys.readouterr().err


def test_lut_import_of_unreadable_files_names_them(tmp_path, capsys) -> None:
    binary = tmp_path / "table.csv"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe binary, not a CSV")
    store = ["--store", str(tmp_path / "store")]
    assert main(["lut", "import", str(binary), "--name", "dev", *store]) == 2
    err = capsys.readouterr().err
    assert f"{binary}: not a UTF-8 text file" in err and "Traceback" not in err
    # a bundle that is not a zip is named too
    good = tmp_path / "good.csv"
    good.write_text("model_id,kind,key,op_type,precision,status,median_ms\n")
    fake = tmp_path / "ops.zip"
    fake.write_text("not a zip")
    assert main(["lut", "import", str(good), "--name", "dev", "--bundle", str(fake), *store]) == 2
    assert f"{fake}: not a readable op bundle zip" in capsys.readouterr().err
    assert not (tmp_path / "store" / "devices" / "dev").exists()  # nothing half-imported
