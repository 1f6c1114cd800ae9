"""Does where ONNX Runtime places a model's activations move its latency?

A per-op latency table cannot know the memory offsets a whole model's tensors get. If
they moved a model's time, two plans with the same ops could run at different speeds
and no table could rank them. This benchmark measures it: each seeded whole
compressed model is timed in variants that compute the same thing but hold a dummy
activation of K bytes alive for the whole run (allocated before the first op and read
after the last), which shifts every later activation in ONNX Runtime's arena by K bytes.
K = 64 appears twice: the two identical copies are the control, the agreement of a
measurement with itself.

Printed: the control's MAPE, each shift's MAPE against the unshifted pair's mean, and the
plan-by-shift interaction (the std of log latency left after each plan's and each
shift's mean are taken out) beside the control's (the std of the pair's log ratio over
sqrt 2). An interaction no larger than the control means the layout does not move the
models' times beyond the machine's noise. A shift's MAPE also holds the dummy's own cost
(writing K bytes, a few microseconds), the same for every model: it shows on the tiny
digits CNN, not on mobilenet_v2; the interaction leaves it out.

Models are timed as ``lut validate`` times them on this machine: fresh sessions, each
beside the uncompressed model as reference, in a seeded random order.
Run: python benchmarks/bench_layout.py [--model mobilenet_v2|digits] [--models 20]
[--sessions 5]
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np
import onnx
import torch
import torchvision
from onnx import helper, numpy_helper
from scipy.stats import kendalltau

from frontier.experiments import DigitsTask
from frontier.latency_models import write_bundle
from frontier.latency_models._validate import local_run, measure_models, quiet_root_logger
from frontier.latency_models.runner import reference_level
from frontier.spaces import SpaceOptions, discover

#: dummy activation sizes in bytes; the first two are equal: the control pair
SHIFTS_BYTES = (64, 64, 1088, 4288, 16704, 65984)


def _const(name: str, values: list[int] | float) -> onnx.TensorProto:
    dtype = np.float32 if isinstance(values, float) else np.int64
    return numpy_helper.from_array(np.array(values, dtype), name)


def shifted(model_bytes: bytes, shift_bytes: int) -> bytes:
    """The model with a dummy float activation of ``shift_bytes`` alive for the whole run.

    It is expanded from the input's first element before the first op (the input passes
    through an Add of its first element times 0, so ONNX Runtime cannot schedule it
    later), and its last element is added into the output times 0 after the last op (so
    it cannot be freed earlier). The outputs are unchanged; the extra work is the
    expansion (K bytes written), a few nodes on single elements and one pass over the
    input, the same for every model."""
    m = onnx.load_from_string(model_bytes)
    g = m.graph
    x, y = g.input[0].name, g.output[0].name
    x_rank = len(g.input[0].type.tensor_type.shape.dim)
    y_rank = len(g.output[0].type.tensor_type.shape.dim)
    for node in g.node:
        for i, name in enumerate(node.input):
            node.input[i] = {x: "_shift_x", y: "_shift_y"}.get(name, name)
        for i, name in enumerate(node.output):
            if name == y:
                node.output[i] = "_shift_y"
    head = [
        helper.make_node("Slice", [x, "_shift_zeros_x", "_shift_ones_x"], ["_shift_x1"]),
        helper.make_node("Reshape", ["_shift_x1", "_shift_one"], ["_shift_x1f"]),
        helper.make_node("Expand", ["_shift_x1f", "_shift_len"], ["_shift_buf"]),
        helper.make_node("Slice", ["_shift_buf", "_shift_zero", "_shift_one"], ["_shift_b1"]),
        helper.make_node("Mul", ["_shift_b1", "_shift_fzero"], ["_shift_b0"]),
        helper.make_node("Add", [x, "_shift_b0"], ["_shift_x"]),
    ]
    tail = [
        helper.make_node("Slice", ["_shift_y", "_shift_zeros_y", "_shift_ones_y"], ["_shift_y1"]),
        helper.make_node("Reshape", ["_shift_y1", "_shift_one"], ["_shift_y1f"]),
        helper.make_node("Slice", ["_shift_buf", "_shift_last", "_shift_len"], ["_shift_bl"]),
        helper.make_node("Add", ["_shift_bl", "_shift_y1f"], ["_shift_late"]),
        helper.make_node("ReduceSum", ["_shift_late"], ["_shift_sum"], keepdims=0),
        helper.make_node("Mul", ["_shift_sum", "_shift_fzero"], ["_shift_z"]),
        helper.make_node("Add", ["_shift_y", "_shift_z"], [y]),
    ]
    nodes = [*head, *g.node, *tail]
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(
        [
            _const("_shift_zeros_x", [0] * x_rank),
            _const("_shift_ones_x", [1] * x_rank),
            _const("_shift_zeros_y", [0] * y_rank),
            _const("_shift_ones_y", [1] * y_rank),
            _const("_shift_zero", [0]),
            _const("_shift_one", [1]),
            _const("_shift_len", [max(shift_bytes // 4, 1)]),
            _const("_shift_last", [max(shift_bytes // 4, 1) - 1]),
            _const("_shift_fzero", 0.0),
        ]
    )
    return m.SerializeToString()


def bundle_models(name: str, n_models: int, tmp: Path) -> tuple[list[bytes], bytes]:
    """``n_models`` seeded whole compressed models of ``name`` and the uncompressed one."""
    opts = dict(prune_ratios=(0.0, 0.25, 0.5, 0.75), weight_bits=(8, 32), act_bits=(8, 32))
    calibration_data = None
    if name == "digits":
        task = DigitsTask(model="cnn")
        model, x = task.baseline(), task.example_inputs()
        space = discover(model, x, SpaceOptions(round_to=4, **opts))
        calibration_data = task.calibration_batches()
    else:
        model = torchvision.models.mobilenet_v2(weights=None).eval()
        x = torch.randn(1, 3, 224, 224)
        space = discover(model, x, SpaceOptions(round_to=8, **opts))
    bundle = tmp / "models.zip"
    manifest = write_bundle(
        bundle,
        model=model,
        example_inputs=x,
        space=space,
        calibration=0,
        validation=n_models,
        calibration_data=calibration_data,
        progress=lambda *_: None,
    )
    with zipfile.ZipFile(bundle) as zf:
        blobs = [zf.read(e["file"]) for e in manifest["models"] if e["kind"] == "validation"]
        teacher = zf.read(
            next(e["file"] for e in manifest["models"] if e["id"] == "reference-model")
        )
    return blobs, teacher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=("mobilenet_v2", "digits"), default="mobilenet_v2")
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=5, help="fresh sessions per variant")
    parser.add_argument("--seed", type=int, default=7, help="seed of the visiting order")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp, quiet_root_logger():
        blobs, teacher = bundle_models(args.model, args.models, Path(tmp))
        variants = [shifted(b, k) for b in blobs for k in SHIFTS_BYTES]
        reference = (teacher, reference_level(local_run(teacher), local_run(teacher)))
        print(
            f"{args.model}: {len(blobs)} models x {len(SHIFTS_BYTES)} layouts, "
            f"{args.sessions} sessions each"
        )
        ms = np.array(
            measure_models(
                variants,
                time_cap_s=0.5,
                reference=reference,
                sessions=args.sessions,
                seed=args.seed,
                label="layouts",
            )
        ).reshape(len(blobs), len(SHIFTS_BYTES))
    control = np.abs(ms[:, 1] / ms[:, 0] - 1).mean()
    print(f"  control (the same 64-byte shift twice): MAPE {control:.2%}")
    base = ms[:, :2].mean(axis=1)
    for j, k in enumerate(SHIFTS_BYTES[2:], start=2):
        err = ms[:, j] / base - 1
        print(
            f"  shifted {k:>6} bytes: MAPE {np.abs(err).mean():.2%} against the unshifted "
            f"pair, Kendall tau {kendalltau(base, ms[:, j])[0]:.3f}"
        )
    log = np.log(ms)
    interaction = log - log.mean(1, keepdims=True) - log.mean(0, keepdims=True) + log.mean()
    noise = np.log(ms[:, 1] / ms[:, 0]).std() / np.sqrt(2)
    print(
        f"  plan-by-layout interaction: std {interaction.std():.2%} of latency, against "
        f"{noise:.2%} for the control pair"
    )


if __name__ == "__main__":
    main()
