"""A pipeline of models in one config: each bad pipeline is one line and exit 2 naming
the stage, device or link; ``frontier pipeline`` prices the uncompressed stages in every
placement by their device tables and says how far the fastest is from the budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from frontier.search import load_config
from frontier.search.cli import main

STAGES = [
    {"name": "mlp", "task": {"name": "digits", "options": {"model": "mlp", "epochs": 2}}},
    {
        "name": "cnn",
        "task": {"name": "digits", "options": {"model": "cnn", "epochs": 2}},
        "reads": ["frame"],
    },
]


def _config(tmp_path: Path, **pipeline: Any) -> Path:
    data: dict[str, Any] = {
        "name": "two-stages",
        "devices": [
            "local-cpu",
            {"name": "npu", "like": "local-cpu", "unsupported": ["Gemm"], "transfer_gbps": 2},
        ],
        "local_table": {"calibration": 0, "round_s": 0.01},
        "device_store": str(tmp_path / "store"),
        "pipeline": {"stages": STAGES, **pipeline},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        (
            {"stages": [{**STAGES[0], "reads": ["det"]}]},
            "pipeline.stages[0] (mlp): reads 'det', which is no stage; stages: mlp (or 'frame')",
        ),
        (
            {"stages": [{**STAGES[0], "reads": ["cnn"]}, {**STAGES[1], "reads": ["mlp"]}]},
            "pipeline.stages: mlp -> cnn -> mlp read each other in a cycle",
        ),
        (
            {"stages": [{**STAGES[0], "placements": ["local-cuda-b8"]}]},
            "pipeline.stages[0] (mlp): placement 'local-cuda-b8' is not one of the config's "
            "devices (local-cpu, npu)",
        ),
        (
            {"stages": STAGES, "links": [{"between": ["local-cpu", "tpu"], "gbps": 1}]},
            "pipeline.links[0]: 'tpu' is not one of the config's devices",
        ),
        (
            {"stages": [STAGES[0], {**STAGES[0]}]},
            "pipeline.stages: each stage name once, got ['mlp'] twice",
        ),
        ({"stages": STAGES, "power_w": 5}, "a power limit needs the frame rate (fps)"),
    ],
    ids=["unknown-stage", "cycle", "unknown-device", "link-device", "name-twice", "power-no-fps"],
)
def test_a_bad_pipeline_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pipeline: dict[str, Any], message: str
) -> None:
    path = _config(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["pipeline"] = pipeline
    path.write_text(yaml.safe_dump(data))
    assert main(["pipeline", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_stages_on_devices_with_no_link_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "devices": ["local-cpu", "board"],  # a stored table's device: no shared memory
                "pipeline": {"stages": STAGES},
            }
        )
    )
    with pytest.raises(
        ValueError,
        match=r"stage 'mlp' may run on board and read 'frame' from local-cpu, but no link joins them",
    ):
        load_config(path)


@pytest.mark.slow
def test_every_placement_is_priced_and_the_fastest_told_against_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _config(tmp_path, budget_ms=0.001, fps=10, power_w=100)
    assert main(["pipeline", str(path), "--format", "json", "--top", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    stages = {s["name"]: s for s in out["stages"]}
    assert set(stages) == {"mlp", "cnn"}
    for s in stages.values():
        assert set(s["latency_ms"]) == {"local-cpu", "npu"}
        assert all(v > 0 for v in s["latency_ms"].values())
        assert s["output_bytes"] == 10 * 4  # ten classes' logits, float32
    # two stages, two devices each: four placements, fastest first
    assert out["placements_priced"] == 4
    frames = [p["latency_ms@frame"] for p in out["placements"]]
    assert frames == sorted(frames)
    # both on local-cpu: one after the other, nothing copied
    serial = next(p for p in out["placements"] if set(p["placement"].values()) == {"local-cpu"})
    cpu = stages["mlp"]["latency_ms"]["local-cpu"] + stages["cnn"]["latency_ms"]["local-cpu"]
    assert serial["latency_ms@frame"] == pytest.approx(cpu)
    # one on each device: they overlap, the npu's stage after the frame's copy over 2 GB/s
    split = next(
        p for p in out["placements"] if p["placement"] == {"mlp": "local-cpu", "cnn": "npu"}
    )
    frame_copy_ms = 8 * 8 * 4 / 2e9 * 1e3
    assert split["latency_ms@frame"] == pytest.approx(
        max(
            stages["mlp"]["latency_ms"]["local-cpu"],
            frame_copy_ms + stages["cnn"]["latency_ms"]["npu"],
        )
    )
    assert "no placement of the uncompressed stages meets it" in out["verdict"]
    assert out["placements"][0]["power_w@frame"] == pytest.approx(
        out["placements"][0]["energy_mj@frame"] * 10 / 1e3
    )
