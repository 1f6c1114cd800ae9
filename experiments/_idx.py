"""MNIST-format (idx) data: Fashion-MNIST as Debian's ``dataset-fashion-mnist`` installs
it, or any folder holding the four idx files (gzipped or not)."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np

from ._tasks import TaskError

#: Where ``apt-get install dataset-fashion-mnist`` puts the files.
FASHION_MNIST_ROOT = Path("/usr/share/datasets/fashion-mnist")
INSTALL_HINT = (
    "install Fashion-MNIST with `apt-get install dataset-fashion-mnist` (Debian/Ubuntu), or "
    "set task.options.root to a folder with the four idx files "
    "(train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
    "t10k-labels-idx1-ubyte; .gz or not)"
)
#: split -> (images file, labels file), without the optional .gz
IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
#: the idx type byte -> numpy dtype (big-endian where it matters)
_DTYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def find_idx(root: Path, name: str) -> Path:
    """``root/name`` or ``root/name.gz``, whichever exists; the error says how to get it."""
    for candidate in (root / name, root / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise TaskError(f"task.options.root: no {name}[.gz] in {root}; {INSTALL_HINT}")


def read_idx(path: Path) -> np.ndarray:
    """An idx file (the MNIST format: magic, dimensions, data), gzipped or not, checked:
    a bad magic, dtype or size raises TaskError naming the file."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise TaskError(f"{path}: cannot read ({err})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise TaskError(f"{path}: not an idx file (the first two bytes must be zero)")
    dtype = _DTYPES.get(raw[2])
    if dtype is None:
        raise TaskError(f"{path}: unknown idx data type 0x{raw[2]:02x}")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise TaskError(f"{path}: truncated header ({ndim} dimensions)")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise TaskError(
            f"{path}: holds {len(raw) - header} data bytes, its header {shape} says {expected}"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)


def load_idx_split(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, H, W) and labels (N,) of ``split`` ("train" or "test") under ``root``."""
    if not root.is_dir():
        raise TaskError(f"task.options.root: {root} is not a directory; {INSTALL_HINT}")
    images_name, labels_name = IDX_FILES[split]
    images_path, labels_path = find_idx(root, images_name), find_idx(root, labels_name)
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3:
        raise TaskError(f"{images_path}: images must be N x H x W, got shape {images.shape}")
    if labels.ndim != 1 or len(labels) != len(images):
        raise TaskError(
            f"{labels_path}: {labels.shape} labels for {len(images)} images in {images_path}"
        )
    return images, labels.astype(np.int64)


def write_idx(path: Path, array: np.ndarray) -> Path:
    """Write ``array`` as an idx file (uint8, int8, int16, int32, float32 or float64):
    to make MNIST-format data of your own, or small files for tests."""
    array = np.asarray(array)
    codes = {dt.newbyteorder("=") if dt.byteorder == ">" else dt: c for c, dt in _DTYPES.items()}
    code = codes.get(array.dtype.newbyteorder("=") if array.dtype.byteorder == ">" else array.dtype)
    if code is None:
        raise TaskError(f"{path}: idx cannot hold {array.dtype} data")
    header = bytes([0, 0, code, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    path.write_bytes(header + array.astype(_DTYPES[code], copy=False).tobytes())
    return path
