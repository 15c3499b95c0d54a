"""The shard index format and Morton write order."""

from __future__ import annotations

import struct

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dandizarr.sharding.index import (
    MAX_UINT64,
    IndexCodecs,
    ShardFormatError,
    ShardIndex,
    nbytes_encoded,
)
from dandizarr.sharding.morton import morton_code, morton_order, morton_rank
from tests.support.hypothesis_profiles import examples


def test_spec_example_size() -> None:
    # The spec's example: [2, 2] chunks per shard with bytes + crc32c is 68 bytes.
    assert nbytes_encoded((2, 2), crc32c=True) == 68
    assert nbytes_encoded((32, 2), crc32c=False) == 1024
    assert IndexCodecs(crc32c=False).nbytes((3, 5)) == 240


def test_encoding_is_c_order_little_endian_with_crc() -> None:
    index = ShardIndex.empty((2, 2))
    index.set((0, 1), 10, 20)
    index.set((1, 0), 30, 40)
    data = index.encode()
    body = struct.pack("<8Q", *([MAX_UINT64] * 2), 10, 20, 30, 40, *([MAX_UINT64] * 2))
    assert data == body + struct.pack("<I", crc32c.crc32c(body))
    assert ShardIndex.decode(data, (2, 2)) == index
    assert index.get((0, 1)) == (10, 20)
    assert index.get((0, 0)) is None


def test_big_endian_and_transpose_round_trip() -> None:
    codecs = IndexCodecs.from_json(
        [
            {"name": "transpose", "configuration": {"order": [2, 1, 0]}},
            {"name": "bytes", "configuration": {"endian": "big"}},
        ]
    )
    index = ShardIndex.empty((2, 3))
    index.set((1, 2), 7, 9)
    data = index.encode(codecs)
    assert len(data) == 96
    assert data != index.encode(IndexCodecs(crc32c=False))
    assert ShardIndex.decode(data, (2, 3), codecs) == index
    assert codecs.to_json()[1] == {"name": "bytes", "configuration": {"endian": "big"}}


def test_set_clear_is_empty() -> None:
    index = ShardIndex.empty((3,))
    assert index.is_empty()
    index.set((1,), 0, 5)
    assert not index.is_empty()
    assert index.present().tolist() == [False, True, False]
    index.clear((1,))
    assert index.is_empty()
    with pytest.raises(ValueError):
        index.set((0,), -1, 5)


@pytest.mark.parametrize("name", ["gzip", "zstd", "blosc"])
def test_variable_size_index_codec_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="variable-size"):
        IndexCodecs.from_json([{"name": "bytes"}, {"name": name}])


def test_index_codecs_need_bytes() -> None:
    with pytest.raises(ValueError, match="array -> bytes"):
        IndexCodecs.from_json([])
    with pytest.raises(ValueError, match="crc32c must come once, after bytes"):
        IndexCodecs.from_json([{"name": "crc32c"}, {"name": "bytes"}])


def test_decode_rejects_short_index() -> None:
    data = ShardIndex.empty((2, 2)).encode()
    with pytest.raises(ShardFormatError, match="expected 68"):
        ShardIndex.decode(data[:-1], (2, 2))


def test_decode_rejects_bad_checksum() -> None:
    data = bytearray(ShardIndex.empty((2, 2)).encode())
    data[3] ^= 1
    with pytest.raises(ShardFormatError, match="crc32c"):
        ShardIndex.decode(bytes(data), (2, 2))


def test_decode_rejects_half_empty_entry() -> None:
    body = struct.pack("<4Q", MAX_UINT64, 5, 0, 1)
    with pytest.raises(ShardFormatError, match="exactly one"):
        ShardIndex.decode(body, (2,), IndexCodecs(crc32c=False))


def test_validate_ranges() -> None:
    index = ShardIndex.empty((3,))
    index.set((0,), 0, 10)
    index.set((1,), 10, 5)
    index.set((2,), 15, 0)
    index.validate(0, 15)
    with pytest.raises(ShardFormatError, match="past the end"):
        index.validate(0, 14)
    with pytest.raises(ShardFormatError, match="before byte"):
        index.validate(1, 15)
    index.set((1,), 9, 5)
    with pytest.raises(ShardFormatError, match="overlap"):
        index.validate(0, 100)
    # A "negative" length (huge as uint64) cannot overflow into a valid-looking range.
    index.offsets_and_lengths[1] = (10, 2**64 - 2)
    with pytest.raises(ShardFormatError, match="past the end"):
        index.validate(0, None)


# -- Morton order -------------------------------------------------------------------------


def test_morton_small_examples() -> None:
    assert morton_order((2, 2)) == [(0, 0), (1, 0), (0, 1), (1, 1)]
    # Non-power-of-two: the (4, 2) block comes after the 4x2 power-of-two block.
    assert morton_order((5, 2)) == [
        (0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1), (4, 0), (4, 1),
    ]  # fmt: skip
    assert morton_order((1, 3)) == [(0, 0), (0, 1), (0, 2)]
    assert morton_code((1, 1, 1), (2, 2, 2)) == 7


def _reference_morton(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """zarr-python's algorithm: walk codes over the power-of-two box, skip out-of-range."""
    bits = [max(0, n - 1).bit_length() for n in shape]
    out: list[tuple[int, ...]] = []
    code = 0
    while len(out) < int(np.prod(shape)):
        coords = [0] * len(shape)
        bit = 0
        for level in range(max(bits)):
            for dim in range(len(shape)):
                if level < bits[dim]:
                    coords[dim] |= ((code >> bit) & 1) << level
                    bit += 1
        if all(c < n for c, n in zip(coords, shape, strict=True)):
            out.append(tuple(coords))
        code += 1
    return out


@settings(max_examples=examples(50))
@given(st.lists(st.integers(1, 9), min_size=1, max_size=4))
def test_morton_matches_reference(shape: list[int]) -> None:
    order = morton_order(tuple(shape))
    assert order == _reference_morton(tuple(shape))


def test_morton_large_non_power_of_two() -> None:
    shape = (33, 33, 33)
    order = morton_order(shape)
    assert len(order) == len(set(order)) == 33**3
    assert order[:8] == _reference_morton((2, 2, 2))
    rank = morton_rank(shape)
    flat = [int(np.ravel_multi_index(c, shape)) for c in order[:100]]
    assert rank[flat].tolist() == list(range(100))
    # The last coordinate has the largest code.
    assert order[-1] == (32, 32, 32)
