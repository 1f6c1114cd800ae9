import pytest

from frontier.search import ConfigError, load_config, parse_config
from frontier.search.cli import main


def test_builtin_config_by_name() -> None:
    config = load_config("digits-mcu")
    assert config.task.name == "digits" and config.task.options == {"model": "mlp"}
    assert config.space.round_to == 8


def test_built_in_techniques_are_configured_under_techniques_and_the_old_keys_still_load() -> None:
    new = parse_config(
        {
            "space": {
                "techniques": {
                    "prune": {"ratios": [0.0, 0.5]},
                    "quantize": {"weight_bits": [8, 32]},
                    "sparsity": {"shares": [0.0, 0.5]},
                    "distill": {"temperatures": [2.0], "alphas": [0.5]},
                    "activation_swap": {"replace": "SwishBeta"},
                }
            }
        }
    ).space
    old = parse_config(
        {
            "space": {
                "prune_ratios": [0.0, 0.5],
                "weight_bits": [8, 32],
                "sparsity": [0.0, 0.5],
                "distill": {"temperatures": [2.0], "alphas": [0.5]},
                "activation_swap": {"replace": "SwishBeta"},
            }
        }
    ).space
    assert new == old and new.techniques == {}  # only registered extras stay there
    assert [type(t).__name__ for t in (new.distill, new.activation_swap)] == [
        "Distill",
        "SwapActivations",
    ]
    with pytest.raises(ConfigError, match="prune_ratios and techniques.prune disagree"):
        parse_config({"space": {"prune_ratios": [0.0, 0.25], "techniques": {"prune": {}}}})
    with pytest.raises(ConfigError, match=r"techniques.quantize: weight_bits: .*got 12"):
        parse_config({"space": {"techniques": {"quantize": {"weight_bits": [12]}}}})


def test_unknown_name_lists_builtins() -> None:
    with pytest.raises(ConfigError, match="built-in: .*digits-mcu"):
        load_config("digits-mcx")


@pytest.mark.parametrize(
    ("yaml_text", "needle"),
    [
        (
            "space:\n  round_to: 0\n",
            "space: round_to must be an integer >= 1, got 0",
        ),
        (
            "space:\n  prune_ratios: [0.5, 1.2]\n",
            "space: prune_ratios: ratio must be in [0, 1), got 1.2",
        ),
        (
            "space:\n  weight_bits: [8, 12]\n",
            "space: weight_bits: bit width must be one of [2, 3, 4, 5, 6, 7, 8, 16, 32], got 12",
        ),
        (
            "space:\n  importance: l7\n",
            "space: importance must be one of ['l1', 'taylor', 'bn_scale'], got 'l7'",
        ),
        ("spcae: {}\n", "spcae: unknown field"),
        ("space:\n  include: ['(']\n", "is not a valid regex"),
        ("space:\n  ties: {a: '['}\n", "is not a valid regex"),
        ("[1, 2]\n", "a config must be a mapping"),
        (
            "devices:\n  - {name: npu, like: local-cpu, transfer_gbps: 0}\n",
            "devices.0.derived.transfer_gbps: Input should be greater than 0 (got 0)",
        ),
        ("devices:\n  - {name: npu}\n", "devices.0.derived.like: Field required"),
        (
            "space:\n  activation_swap: {replace: Swish, to: [gelu]}\n",
            "space.activation_swap: activation.to must be one of ['relu', 'hardswish'], got 'gelu'",
        ),
    ],
    ids=[
        "round_to",
        "ratio",
        "bits",
        "importance",
        "typo",
        "regex",
        "tie-regex",
        "not-mapping",
        "device-bandwidth",
        "device-like",
        "swap-to",
    ],
)
def test_errors_name_file_field_value(tmp_path, yaml_text: str, needle: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value)
    assert needle in str(err.value)


def test_carbon_scenario_section(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "task: {name: digits}\ncarbon:\n  inferences_per_day: 1000\n  country_iso: POL\n  pue: 1.2\n"
    )
    scenario = load_config(path).carbon.scenario()
    assert scenario.inferences_per_day == 1000 and scenario.pue == 1.2
    path.write_text("carbon:\n  pue: 0.5\n")
    with pytest.raises(ConfigError, match="carbon.pue: Input should be greater than or equal to 1"):
        load_config(path)


def test_parse_config_defaults() -> None:
    config = parse_config({})
    assert config.task.name == "digits"
    assert config.space.prune_ratios[0] == 0.0


def test_cli_space_and_experiments(capsys) -> None:
    assert main(["experiments", "list"]) == 0
    assert "digits-mcu" in capsys.readouterr().out
    assert main(["space", "digits-mcu"]) == 0
    out = capsys.readouterr().out
    assert "prune.features.1" in out and "not pruned: classifier" in out


def test_cli_plan_exports(tmp_path, capsys) -> None:
    import json

    assert main(["plan", "digits-cnn", "--seed", "1", "--export", str(tmp_path / "m.onnx")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["compressed"]["size_bytes"] <= report["baseline"]["size_bytes"]
    assert (tmp_path / "m.onnx").exists()


def test_cli_plan_prices_the_plan_on_each_stored_device_table(tmp_path, capsys) -> None:
    """``frontier plan`` reports the plan's predicted latency beside the baseline's on
    each device table the store holds, and says so where it holds none."""
    import json

    from frontier.latency_models import DeviceStore, ensure_local_table
    from frontier.search import task_and_space

    store = tmp_path / "store"
    assert main(["plan", "digits-mcu", "--seed", "1", "--store", str(store)]) == 0
    missing = json.loads(capsys.readouterr().out)["latency_ms"]["local-cpu"]
    assert "no table stored" in missing and str(store) in missing

    task, model, space = task_and_space(load_config("digits-mcu"))
    ensure_local_table(
        model, task.example_inputs(), space, store=DeviceStore(store), calibration=0, round_s=0.01
    )
    assert main(["plan", "digits-mcu", "--seed", "1", "--store", str(store)]) == 0
    priced = json.loads(capsys.readouterr().out)["latency_ms"]["local-cpu"]
    assert priced["compressed_ms"] > 0 and priced["baseline_ms"] > 0
    assert priced["speedup"] == pytest.approx(priced["baseline_ms"] / priced["compressed_ms"], 1e-2)
    assert priced["coverage"]["table"] > 0 and priced["coverage"]["fallback"] == 0


def test_cli_reports_config_errors(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("space:\n  round_to: -1\n")
    assert main(["space", str(bad)]) == 2
    assert f"{bad}: space: round_to must be an integer >= 1, got -1" in capsys.readouterr().err


def test_a_config_is_resolved_once_into_typed_devices_and_metrics() -> None:
    config = load_config("digits-mcu").override(
        {
            "objectives": [
                "accuracy",
                "latency_ms@local-cpu-2t",
                "latency_ms@npu",
                "energy_mj@pi4",
            ],
            "constraints": ["latency_ms@local-openvino <= 5"],
            "devices": [{"name": "npu", "like": "local-cpu-2t", "unsupported": ["Gelu"]}],
        }
    )
    typed = config.typed
    assert typed is config.typed  # worked out once
    by_name = {d.name: d for d in typed.devices}
    # the table a derived device borrows comes before it
    assert list(by_name) == ["local-cpu-2t", "npu", "pi4", "local-openvino"]
    assert by_name["local-cpu-2t"].source == "local" and by_name["local-cpu-2t"].local.threads == 2
    assert by_name["local-openvino"].local.runtime.kind == "openvino"
    npu = by_name["npu"]
    assert (npu.source, npu.like, npu.offload, npu.unsupported) == (
        "derived", "local-cpu-2t", "local-cpu-2t", ("Gelu",),
    )  # fmt: skip
    assert by_name["pi4"].source == "stored" and by_name["pi4"].local is None
    assert [(k.metric, k.device) for k in typed.metrics][-1] == ("latency_ms", "local-openvino")
    assert config.metric_names()[-1] == "latency_ms@local-openvino"
