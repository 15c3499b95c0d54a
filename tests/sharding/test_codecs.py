"""Inner codecs and the codec pipeline."""

from __future__ import annotations

import gzip

import numcodecs
import numpy as np
import pytest
import zstandard

from dandizarr.sharding.codec_registry import pipeline_from_json
from dandizarr.sharding.codecs.base import ArraySpec, is_fill
from dandizarr.sharding.index import ShardFormatError
from dandizarr.sharding.parallel import parallel_map

SPEC = ArraySpec((4, 6), np.dtype("uint16"), 0)
DATA = np.arange(24, dtype="uint16").reshape(4, 6) * 257

BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}
BYTES_BE = {"name": "bytes", "configuration": {"endian": "big"}}

CHAINS = [
    [BYTES_LE],
    [BYTES_BE],
    [{"name": "transpose", "configuration": {"order": [1, 0]}}, BYTES_LE],
    [BYTES_LE, {"name": "gzip", "configuration": {"level": 1}}],
    [BYTES_BE, {"name": "zstd", "configuration": {"level": 3, "checksum": True}}],
    [BYTES_LE, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5}}],
    [BYTES_LE, {"name": "zstd"}, {"name": "crc32c"}],
]


@pytest.mark.parametrize("codecs", CHAINS, ids=lambda c: "+".join(x["name"] for x in c))
def test_round_trip(codecs: list[dict]) -> None:
    pipeline = pipeline_from_json(codecs, SPEC)
    encoded = pipeline.encode(DATA)
    decoded = pipeline.decode(encoded)
    assert decoded.dtype == DATA.dtype
    assert np.array_equal(decoded, DATA)
    # to_json re-parses to the same chain
    assert pipeline_from_json(pipeline.to_json(), SPEC).encode(DATA) == encoded


def test_bytes_endianness_on_the_wire() -> None:
    little = pipeline_from_json([BYTES_LE], SPEC).encode(DATA)
    big = pipeline_from_json([BYTES_BE], SPEC).encode(DATA)
    assert little == DATA.astype("<u2").tobytes()
    assert big == DATA.astype(">u2").tobytes()


def test_transpose_layout() -> None:
    pipeline = pipeline_from_json(
        [{"name": "transpose", "configuration": {"order": [1, 0]}}, BYTES_LE], SPEC
    )
    assert pipeline.encode(DATA) == DATA.T.astype("<u2").tobytes()
    assert pipeline.specs[-1].shape == (6, 4)


def test_compressors_interoperate_with_reference_libraries() -> None:
    raw = DATA.astype("<u2").tobytes()
    gz = pipeline_from_json([BYTES_LE, {"name": "gzip"}], SPEC)
    assert gzip.decompress(gz.encode(DATA)) == raw
    assert np.array_equal(gz.decode(gzip.compress(raw)), DATA)
    zs = pipeline_from_json([BYTES_LE, {"name": "zstd"}], SPEC)
    assert zstandard.ZstdDecompressor().decompress(zs.encode(DATA)) == raw
    # A streamed frame has no content size in its header: still decodes.
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(raw)
    assert np.array_equal(zs.decode(frame), DATA)
    blosc = pipeline_from_json([BYTES_LE, {"name": "blosc"}], SPEC)
    assert numcodecs.Blosc().decode(blosc.encode(DATA)) == raw
    assert blosc.to_json()[1]["configuration"]["typesize"] == 2


def test_crc32c_detects_corruption() -> None:
    pipeline = pipeline_from_json([BYTES_LE, {"name": "crc32c"}], SPEC)
    encoded = bytearray(pipeline.encode(DATA))
    assert len(encoded) == SPEC.nbytes + 4
    assert pipeline.encoded_size() == SPEC.nbytes + 4
    encoded[5] ^= 0x10
    with pytest.raises(ShardFormatError, match="checksum"):
        pipeline.decode(bytes(encoded))


def test_corrupt_compressed_chunk_is_a_format_error() -> None:
    pipeline = pipeline_from_json([BYTES_LE, {"name": "zstd"}], SPEC)
    with pytest.raises(ShardFormatError):
        pipeline.decode(b"not zstd at all")
    with pytest.raises(ShardFormatError, match="expected 48"):
        pipeline_from_json([BYTES_LE], SPEC).decode(b"\0" * 47)


def test_pipeline_structure_errors() -> None:
    with pytest.raises(ValueError, match="exactly one array -> bytes"):
        pipeline_from_json([], SPEC)
    with pytest.raises(ValueError, match="before array -> bytes"):
        pipeline_from_json([{"name": "gzip"}, BYTES_LE], SPEC)
    with pytest.raises(ValueError, match="more than one"):
        pipeline_from_json([BYTES_LE, BYTES_LE], SPEC)
    with pytest.raises(ValueError, match="unsupported codec"):
        pipeline_from_json([{"name": "nope"}], SPEC)
    with pytest.raises(ValueError, match="permutation"):
        pipeline_from_json(
            [{"name": "transpose", "configuration": {"order": [0, 0]}}, BYTES_LE], SPEC
        )
    with pytest.raises(ValueError, match="endian is required"):
        pipeline_from_json([{"name": "bytes"}], SPEC).encode(DATA)


def test_is_fill() -> None:
    assert is_fill(np.zeros(3, "u1"), 0)
    assert not is_fill(np.array([0, 1], "u1"), 0)
    assert is_fill(np.full(3, 7, "i4"), 7)
    assert is_fill(np.full(3, np.nan, "f4"), np.nan)
    assert not is_fill(np.array([np.nan, 0], "f4"), np.nan)
    assert not is_fill(np.zeros(3, "f8"), np.nan)


def test_parallel_map_keeps_order_and_nests() -> None:
    def inner(x: int) -> list[int]:
        return parallel_map(lambda y: x * 10 + y, list(range(3)))

    assert parallel_map(inner, list(range(5))) == [[x * 10 + y for y in range(3)] for x in range(5)]
