"""A frame through a pipeline: stages on one device run one after another, stages on
different devices overlap where the graph allows, a tensor that crosses devices pays its
copy at the link's bandwidth, and the frame's latency is the critical path."""

import pytest

from frontier.latency_models import (
    FRAME,
    FrameError,
    Link,
    Links,
    StageCost,
    placements,
    price_frame,
)

MB = 1_000_000


def _three(det: str, seg: str, depth: str) -> list[StageCost]:
    """Detection, segmentation and depth, each reading the frame; ms on cpu / npu."""
    ms = {"det": (30.0, 10.0), "seg": (20.0, 12.0), "depth": (25.0, 40.0)}
    at = {"det": det, "seg": seg, "depth": depth}
    return [
        StageCost(n, at[n], ms[n][0] if at[n] == "cpu" else ms[n][1], energy_mj=1.0)
        for n in ("det", "seg", "depth")
    ]


def test_stages_on_one_device_run_one_after_another() -> None:
    got = price_frame(_three("cpu", "cpu", "cpu"), Links(), frame_device="cpu")
    assert got.latency_ms == pytest.approx(75.0)
    assert got.start_ms == {"det": 0.0, "seg": 30.0, "depth": 50.0}
    assert got.busiest_ms == pytest.approx(75.0)
    assert got.energy_mj == pytest.approx(3.0)


def test_stages_on_two_devices_overlap_and_copies_pay_the_link() -> None:
    link = Link("cpu", "npu", gbps=1.0, latency_ms=0.5, energy_nj_per_byte=2.0)
    stages = _three("npu", "npu", "cpu")
    got = price_frame(stages, Links([link]), frame_device="cpu", frame_bytes=2 * MB)
    # the frame is copied to the npu once, 0.5 + 2 ms, for both stages that read it there
    assert [(c.start_ms, c.end_ms) for c in got.copies] == [(0.0, 2.5)]
    assert got.start_ms["det"] == pytest.approx(2.5)
    assert got.start_ms["seg"] == pytest.approx(12.5)  # after det on the npu
    assert got.start_ms["depth"] == 0.0  # on the cpu, at once
    assert got.latency_ms == pytest.approx(25.0)  # depth is the critical path
    assert got.critical == ("depth",)
    assert got.energy_mj == pytest.approx(3.0 + 2 * MB * 2.0 * 1e-6)
    assert got.power_w(10) == pytest.approx(got.energy_mj * 10 / 1e3)


def test_a_chain_waits_for_its_input_and_names_the_critical_path() -> None:
    link = Link("cpu", "gpu", gbps=0.5)
    stages = [
        StageCost("backbone", "gpu", 8.0, output_bytes=MB),
        StageCost("head", "cpu", 3.0, reads=("backbone",)),
    ]
    got = price_frame(stages, Links([link]), frame_device="gpu")
    assert got.latency_ms == pytest.approx(8.0 + 2.0 + 3.0)
    assert got.critical == ("backbone", "head")


def test_the_best_placement_of_a_known_pipeline_is_found() -> None:
    link = Link("cpu", "npu", gbps=10.0)
    best = min(
        placements({"det": ["cpu", "npu"], "seg": ["cpu", "npu"], "depth": ["cpu", "npu"]}),
        key=lambda p: (
            price_frame(
                _three(p["det"], p["seg"], p["depth"]), Links([link]), frame_device="cpu"
            ).latency_ms
        ),
    )
    # det (10) and seg (12) on the npu run 22 ms beside depth on the cpu (25 ms)
    assert best == {"det": "npu", "seg": "npu", "depth": "cpu"}


def test_shared_memory_devices_hand_over_for_free_others_need_a_link() -> None:
    stages = [StageCost("a", "local-cpu", 1.0), StageCost("b", "local-openvino", 1.0)]
    shared = Links(shared_memory=["local-cpu", "local-openvino"])
    assert price_frame(stages, shared, frame_device="local-cpu").copies == ()
    with pytest.raises(FrameError, match=r"no link between local-cpu and local-openvino"):
        price_frame(stages, Links(), frame_device="local-cpu")


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        (
            [StageCost("a", "cpu", 1.0, reads=("nope",))],
            "stage 'a' reads 'nope', which is no stage",
        ),
        (
            [StageCost("a", "cpu", 1.0, reads=("b",)), StageCost("b", "cpu", 1.0, reads=("a",))],
            "stages a -> b -> a read each other in a cycle",
        ),
    ],
    ids=["unknown-input", "cycle"],
)
def test_a_pipeline_that_cannot_run_is_refused(stages: list[StageCost], message: str) -> None:
    with pytest.raises(FrameError, match=message):
        price_frame(stages, Links(), frame_device="cpu")


def test_a_frame_rate_the_busiest_device_cannot_take_is_told() -> None:
    got = price_frame(_three("cpu", "cpu", "cpu"), Links(), frame_device="cpu")
    assert got.keeps_up(10) and not got.keeps_up(20)
    assert FRAME == "frame"
