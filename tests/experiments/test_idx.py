"""MNIST-format (idx) files: read back what the test writes, gzipped or not; bad files
and a missing data set are named with how to get them."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest

from frontier.experiments import TaskError, read_idx, write_idx


def test_idx_round_trip_plain_and_gzipped(tmp_path: Path) -> None:
    images = np.random.default_rng(0).integers(0, 256, (7, 28, 28), dtype=np.uint8)
    labels = np.arange(7, dtype=np.uint8) % 10
    for name, array in (("img", images), ("lab", labels)):
        plain = write_idx(tmp_path / f"{name}-idx", array)
        packed = tmp_path / f"{name}-idx.gz"
        packed.write_bytes(gzip.compress(plain.read_bytes()))
        assert np.array_equal(read_idx(plain), array)
        assert np.array_equal(read_idx(packed), array)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"\x01\x00\x08\x01\x00\x00\x00\x01\x05", "not an idx file"),
        (b"\x00\x00\x07\x01\x00\x00\x00\x01\x05", "unknown idx data type 0x07"),
        (b"\x00\x00\x08\x01\x00\x00\x00\x03\x05", "holds 1 data bytes, its header (3,) says 3"),
        (b"\x00\x00\x08\x02\x00\x00", "truncated header"),
    ],
    ids=["magic", "dtype", "size", "header"],
)
def test_bad_idx_files_are_named(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "bad-idx"
    path.write_bytes(content)
    with pytest.raises(TaskError, match=re.escape(needle)) as err:
        read_idx(path)
    assert str(path) in str(err.value)
