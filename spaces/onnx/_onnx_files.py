"""ONNX files of any size.

Protocol Buffers cannot serialise a message of 2 GiB or more, so a model whose weights
come near that (regnet_y_128gf: 2.6 GB) cannot be one ``.onnx`` file: PyTorch's exporter
writes each of its tensors to a file of its own beside it, and ``onnx.save`` of it
loaded whole fails ("EncodeError: Failed to serialize proto"). Frontier's exports keep
such a model's weights in one file beside it, ``<name>.data`` (ONNX's external data
format, which ONNX Runtime and OpenVINO read); a smaller model stays one file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Weights (bytes) above which a model's are stored beside it: under protobuf's 2 GiB,
#: with room for the graph itself.
INLINE_LIMIT_BYTES = 2**31 - 2**27
#: Tensors this small stay in the graph even then (shapes, scales: what shape inference
#: and the graph's own arithmetic read).
EXTERNAL_MIN_BYTES = 1024


def _external_locations(proto: Any) -> set[str]:
    """The files ``proto``'s initializers refer to for their data."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    return {ExternalDataInfo(t).location for t in proto.graph.initializer if uses_external_data(t)}


def open_onnx(path: str | Path) -> tuple[Any, list[Path]]:
    """The model at ``path``, its weights loaded, and the files beside it they came
    from (none for a one-file model): what ``save_onnx(..., replaces=)`` removes once
    the model is written again."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    files = [Path(path).parent / name for name in sorted(_external_locations(proto))]
    if files:
        onnx.load_external_data_for_model(proto, str(Path(path).parent))
    return proto, files


def load_onnx(path: str | Path, *, weights: bool = True) -> Any:
    """The model at ``path``; its weights loaded from the files beside it, if it has
    any, or (``weights=False``) left as references to them: shapes, types and the graph
    all there, in a message of any model's size."""
    import onnx

    if weights:
        return open_onnx(path)[0]
    return onnx.load(str(path), load_external_data=False)


def weights_bytes(proto: Any) -> int:
    """The bytes ``proto``'s initializers hold in the message."""
    return sum(len(t.raw_data) for t in proto.graph.initializer)


def save_onnx(proto: Any, path: str | Path, *, replaces: Sequence[Path] = ()) -> None:
    """Write ``proto`` (its weights loaded) to ``path``: one file, or with weights of
    ``INLINE_LIMIT_BYTES`` or more, the graph there and its weights in ``<name>.data``
    beside it. ``replaces``: weight files an earlier version of the model left beside
    it (``open_onnx``), removed once it is written."""
    import onnx

    if _external_locations(proto):
        raise ValueError(f"{path}: the model's weights are references, not loaded (load_onnx)")
    path = Path(path)
    data = data_file(path)
    data.unlink(missing_ok=True)  # ONNX appends to a data file it finds
    if weights_bytes(proto) >= INLINE_LIMIT_BYTES:
        onnx.save_model(
            proto,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data.name,
            size_threshold=EXTERNAL_MIN_BYTES,
        )
    else:
        onnx.save_model(proto, str(path))
    for stale in replaces:
        if stale.resolve() != data.resolve():
            stale.unlink(missing_ok=True)


def data_file(path: str | Path) -> Path:
    """Where ``save_onnx`` keeps the weights of a model too large for one file."""
    return Path(path).with_name(Path(path).name + ".data")


def model_bytes(path: str | Path) -> bytes:
    """The model ``save_onnx`` wrote at ``path``, as bytes: the file's own, or for a
    model whose weights are stored beside it, its graph with the weights as references
    to that file, for a reader that leaves them to a seed (``latency_models``'
    ``strip_weights``) or needs only shapes."""
    if not data_file(path).exists():
        return Path(path).read_bytes()
    return bytes(load_onnx(path, weights=False).SerializeToString())
