"""A frame through a pipeline of models: each stage priced on the device it is placed on,
scheduled, and the frame's latency, energy and power read off the schedule.

The schedule is the one a deployment runs with one worker per device: stages placed on
one device run one after another (in the pipeline's order), stages on different devices
overlap wherever the graph allows, and a tensor that crosses from one device to another
is copied over their link once, whichever stages there read it (copies on one link one
after another). The frame's latency
is the end of its last stage: the critical path through that schedule. Energy is each
stage's energy on its device plus each copy's; power is that energy times the frame
rate. ``busiest_ms`` is the most one device works per frame: a stream of frames cannot
come faster than one per ``busiest_ms`` even when frames overlap.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: the input every pipeline starts from: a stage that reads it reads the camera's frame
FRAME = "frame"


class FrameError(ValueError):
    """A pipeline that cannot be scheduled: the message names the stage, device or link."""


@dataclass(frozen=True)
class Link:
    """How tensors move between two devices.

    Attributes:
        a, b: the two devices (the link carries both ways).
        gbps: its bandwidth in gigabytes per second.
        latency_ms: what each copy pays before its first byte (a DMA set-up, a driver call).
        energy_nj_per_byte: what each byte moved costs.
    """

    a: str
    b: str
    gbps: float
    latency_ms: float = 0.0
    energy_nj_per_byte: float = 0.0

    def __post_init__(self) -> None:
        if self.gbps <= 0:
            raise FrameError(f"link {self.a}-{self.b}: gbps must be > 0, got {self.gbps=}")
        if self.latency_ms < 0 or self.energy_nj_per_byte < 0:
            raise FrameError(f"link {self.a}-{self.b}: latency and energy must be >= 0")

    def copy_ms(self, size_bytes: int) -> float:
        return self.latency_ms + size_bytes / (self.gbps * 1e9) * 1e3

    def copy_mj(self, size_bytes: int) -> float:
        return size_bytes * self.energy_nj_per_byte * 1e-6


@dataclass(frozen=True)
class StageCost:
    """One stage as its placement prices it.

    Attributes:
        name: the stage's name.
        device: the device it is placed on.
        latency_ms: its model's latency there.
        energy_mj: its model's energy per inference there.
        reads: the stages whose outputs it reads, or ``FRAME``.
        output_bytes: the size of what it hands on (what a reader on another device copies).
    """

    name: str
    device: str
    latency_ms: float
    energy_mj: float = 0.0
    reads: tuple[str, ...] = (FRAME,)
    output_bytes: int = 0


@dataclass(frozen=True)
class Copy:
    """One tensor moved between devices in a frame's schedule."""

    source: str
    target: str
    link: str
    size_bytes: int
    start_ms: float
    end_ms: float
    energy_mj: float


@dataclass(frozen=True)
class FrameEstimate:
    """A frame's schedule and what it costs.

    Attributes:
        latency_ms: the end of the last stage (the critical path).
        energy_mj: every stage's energy plus every copy's.
        busiest_ms: the most one device (or link) is busy per frame.
        start_ms, end_ms: each stage's place in the schedule, by name.
        copies: the tensors moved between devices.
        critical: the stages (and copies, as ``a->b``) on the critical path, first to last.
    """

    latency_ms: float
    energy_mj: float
    busiest_ms: float
    start_ms: dict[str, float]
    end_ms: dict[str, float]
    copies: tuple[Copy, ...] = ()
    critical: tuple[str, ...] = field(default_factory=tuple)

    def power_w(self, fps: float) -> float:
        """Average power when ``fps`` frames a second go through: energy per frame times
        the frame rate (the devices' idle power between frames not included)."""
        return self.energy_mj * fps / 1e3

    def keeps_up(self, fps: float) -> bool:
        """Whether the busiest device can take ``fps`` frames a second."""
        return self.busiest_ms <= 1e3 / fps


class Links:
    """The links between a pipeline's devices, looked up either way round. Devices in
    ``shared_memory`` (processes of one host) hand tensors over for free."""

    def __init__(self, links: Iterable[Link] = (), *, shared_memory: Iterable[str] = ()) -> None:
        self._links: dict[frozenset[str], Link] = {}
        for link in links:
            key = frozenset((link.a, link.b))
            if len(key) != 2:
                raise FrameError(f"link {link.a}-{link.b}: a link joins two different devices")
            if key in self._links:
                raise FrameError(f"link {link.a}-{link.b}: given twice")
            self._links[key] = link
        self.shared = frozenset(shared_memory)

    def between(self, a: str, b: str) -> Link | None:
        """The link ``a``-``b``; None where no copy is needed (one device, or both on
        shared memory). Raises ``FrameError`` where the two have no link."""
        if a == b:
            return None
        link = self._links.get(frozenset((a, b)))
        if link is not None:
            return link
        if a in self.shared and b in self.shared:
            return None
        raise FrameError(
            f"no link between {a} and {b}: a stage on one reads a tensor from the other; "
            f"add one to the pipeline's links (between: [{a}, {b}], gbps: ...)"
        )


def stage_cycle(reads: Mapping[str, Sequence[str]]) -> list[str]:
    """One cycle of stages that read each other (``reads``: stage -> the stages it
    reads), its first stage repeated last; [] where there is none."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in reads.get(node, ()):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in reads:
        if node not in state and (found := visit(node)):
            return found
    return []


def order(stages: Sequence[StageCost]) -> list[StageCost]:
    """``stages`` in an order that runs every stage after what it reads (the given order
    where it allows); ``FrameError`` names an unknown input or a cycle."""
    names = {s.name for s in stages}
    for s in stages:
        for r in s.reads:
            if r != FRAME and r not in names:
                raise FrameError(f"stage {s.name!r} reads {r!r}, which is no stage")
    done: list[StageCost] = []
    left = list(stages)
    while left:
        ready = next(
            (s for s in left if all(r == FRAME or r in {d.name for d in done} for r in s.reads)),
            None,
        )
        if ready is None:
            cycle = stage_cycle({s.name: [r for r in s.reads if r != FRAME] for s in left})
            raise FrameError(f"stages {' -> '.join(cycle)} read each other in a cycle")
        done.append(ready)
        left.remove(ready)
    return done


def price_frame(
    stages: Sequence[StageCost],
    links: Links,
    *,
    frame_device: str,
    frame_bytes: int = 0,
) -> FrameEstimate:
    """Schedule one frame through ``stages`` and price it.

    Args:
        stages: each stage placed and priced (``StageCost``), in the pipeline's order.
        links: how tensors move between the devices.
        frame_device: where the frame arrives (a stage elsewhere copies it over).
        frame_bytes: the frame's size.
    """
    free: dict[str, float] = {}  # device or link -> when it is next free
    busy: dict[str, float] = {}
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    device_of = {FRAME: frame_device}
    size_of = {FRAME: frame_bytes}
    end_of = {FRAME: 0.0}
    came_from: dict[str, str] = {}  # stage -> what it last waited for
    copies: list[Copy] = []
    arrived: dict[tuple[str, str], float] = {}  # (tensor, device) -> when its copy is there
    energy = 0.0
    for s in order(stages):
        ready = 0.0
        waited = ""
        for r in s.reads:
            at = end_of[r]
            link = links.between(device_of[r], s.device)
            if link is not None and (r, s.device) in arrived:
                at = arrived[(r, s.device)]  # copied to this device already, for another
            elif link is not None:
                key = f"{link.a}<->{link.b}"
                t0 = max(at, free.get(key, 0.0))
                t1 = t0 + link.copy_ms(size_of[r])
                free[key] = t1
                busy[key] = busy.get(key, 0.0) + (t1 - t0)
                copies.append(Copy(r, s.name, key, size_of[r], t0, t1, link.copy_mj(size_of[r])))
                energy += copies[-1].energy_mj
                at = arrived[(r, s.device)] = t1
            if at >= ready:
                ready, waited = at, r
        t0 = max(ready, free.get(s.device, 0.0))
        if free.get(s.device, 0.0) > ready:
            waited = next(n for n in reversed(list(end)) if device_of[n] == s.device)
        start[s.name], end[s.name] = t0, t0 + s.latency_ms
        free[s.device] = end[s.name]
        busy[s.device] = busy.get(s.device, 0.0) + s.latency_ms
        device_of[s.name], size_of[s.name], end_of[s.name] = s.device, s.output_bytes, end[s.name]
        came_from[s.name] = waited
        energy += s.energy_mj
    last = max(end, key=lambda n: end[n]) if end else ""
    path: list[str] = []
    node = last
    while node and node != FRAME:
        path.append(node)
        node = came_from.get(node, "")
    return FrameEstimate(
        latency_ms=end[last] if last else 0.0,
        energy_mj=energy,
        busiest_ms=max(busy.values(), default=0.0),
        start_ms=start,
        end_ms=end,
        copies=tuple(copies),
        critical=tuple(reversed(path)),
    )


def placements(choices: Mapping[str, Sequence[str]]) -> Iterable[dict[str, str]]:
    """Every placement: one device per stage from its ``choices`` (stage -> devices)."""
    names = list(choices)
    for combo in itertools.product(*(choices[n] for n in names)):
        yield dict(zip(names, combo, strict=True))
