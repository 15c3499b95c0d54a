"""Neuroglancer precomputed sharded format: hashing, Morton ids, shard files, the reader."""

from __future__ import annotations

import gzip
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dandizarr.sharding.morton import morton_decode as compressed_morton_decode
from dandizarr.sharding.neuroglancer import (
    ShardingError,
    ShardingSpec,
    compressed_morton_code,
    decode_shard,
    encode_shard,
    iter_shards,
    murmurhash3_x86_128_low64,
    write_shards,
)
from dandizarr.sharding.neuroglancer_reader import ShardedReader
from dandizarr.sharding.store import CountingStore, DirectoryStore, MemoryStore
from tests.support.hypothesis_profiles import examples


def spec_json(**overrides: object) -> dict[str, object]:
    config: dict[str, object] = {
        "@type": "neuroglancer_uint64_sharded_v1",
        "preshift_bits": 0,
        "hash": "identity",
        "minishard_bits": 1,
        "shard_bits": 1,
    }
    config.update(overrides)
    return config


# --- check values from the specs README ---


def test_murmurhash_check_value() -> None:
    assert murmurhash3_x86_128_low64(0) == 0x4772B084E028AE41


def test_identity_check_value() -> None:
    spec = ShardingSpec(preshift_bits=2, minishard_bits=3, shard_bits=3)
    location = spec.locate(0b10101010)
    assert spec.shard_name(location.shard) == "5.shard"
    assert location.minishard == 2


def test_murmur_locate_uses_hash_of_shifted_id() -> None:
    spec = ShardingSpec(preshift_bits=3, minishard_bits=4, shard_bits=5, hash="murmurhash3_x86_128")
    hashed = 0x4772B084E028AE41  # ids 0..7 shift to 0
    for chunk_id in range(8):
        location = spec.locate(chunk_id)
        assert location.minishard == hashed & 0xF
        assert location.shard == (hashed >> 4) & 0x1F


def test_compressed_morton_check_value() -> None:
    # bits {4, 2, 1}: grid sizes 16, 4, 2
    assert compressed_morton_code((0b1001, 0b10, 1), (16, 4, 2)) == 0b1010101
    assert compressed_morton_decode(0b1010101, (16, 4, 2)) == (0b1001, 0b10, 1)


def test_compressed_morton_single_chunk_dimensions_take_no_bits() -> None:
    assert compressed_morton_code((0, 3, 0), (1, 4, 1)) == 3
    assert compressed_morton_code((0, 0, 0), (1, 1, 1)) == 0
    with pytest.raises(ValueError, match="outside"):
        compressed_morton_code((0, 4, 0), (1, 4, 1))


@given(st.lists(st.integers(1, 40), min_size=1, max_size=4), st.data())
@settings(max_examples=examples(50))
def test_compressed_morton_is_a_bijection(grid: list[int], data: st.DataObject) -> None:
    position = tuple(data.draw(st.integers(0, g - 1)) for g in grid)
    code = compressed_morton_code(position, grid)
    total_bits = sum((g - 1).bit_length() for g in grid)
    assert code < 1 << total_bits
    assert compressed_morton_decode(code, grid) == position


@pytest.mark.parametrize(
    ("shard_bits", "shard", "name"),
    [
        (0, 0, "0.shard"),
        (3, 5, "5.shard"),
        (4, 10, "a.shard"),
        (5, 10, "0a.shard"),
        (9, 1, "001.shard"),
    ],
)
def test_shard_names_are_zero_padded_lowercase_hex(shard_bits: int, shard: int, name: str) -> None:
    assert (
        ShardingSpec(preshift_bits=0, minishard_bits=0, shard_bits=shard_bits).shard_name(shard)
        == name
    )


# --- metadata ---


def test_spec_json_round_trip_and_default_encodings() -> None:
    spec = ShardingSpec.from_json(spec_json())
    assert spec.minishard_index_encoding == "raw" and spec.data_encoding == "raw"
    assert ShardingSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize(
    "overrides",
    [
        {"@type": "zarr_sharded"},
        {"hash": "md5"},
        {"preshift_bits": -1},
        {"minishard_bits": "2"},
        {"shard_bits": True},
        {"shard_bits": 40, "minishard_bits": 30},
        {"data_encoding": "zstd"},
        {"minishard_index_encoding": None},
    ],
)
def test_bad_metadata_is_rejected(overrides: dict[str, object]) -> None:
    with pytest.raises(ShardingError):
        ShardingSpec.from_json(spec_json(**overrides))


def test_missing_metadata_fields_are_rejected() -> None:
    config = spec_json()
    del config["shard_bits"]
    with pytest.raises(ShardingError, match="shard_bits"):
        ShardingSpec.from_json(config)
    with pytest.raises(ShardingError):
        ShardingSpec.from_json([1, 2])


# --- shard files ---


def test_shard_layout_matches_the_format_byte_for_byte() -> None:
    # One minishard (minishard_bits 0): index entry, then chunk data in id order, then the
    # minishard index [3, n] with ids and offsets delta encoded.
    spec = ShardingSpec(preshift_bits=0, minishard_bits=0, shard_bits=0)
    shard = encode_shard(spec, {7: b"seven!!", 3: b"abc"})
    data = b"abc" + b"seven!!"
    minishard_index = struct.pack("<6Q", 3, 4, 0, 0, 3, 7)
    expected = struct.pack("<QQ", len(data), len(data) + 48) + data + minishard_index
    assert shard == expected
    assert decode_shard(spec, shard) == {3: b"abc", 7: b"seven!!"}


def test_empty_minishards_have_zero_length_ranges() -> None:
    spec = ShardingSpec(preshift_bits=0, minishard_bits=2, shard_bits=0)
    shard = encode_shard(spec, {1: b"x"})
    entries = struct.unpack("<8Q", shard[:64])
    # minishard 1: its index follows the chunk's one byte; the others are empty.
    assert entries == (0, 0, 1, 1 + 24, 0, 0, 0, 0)
    reader = ShardedReader(MemoryStore({"0.shard": shard}), spec)
    assert [reader.get(i) for i in range(4)] == [None, b"x", None, None]


def test_gzip_encodings() -> None:
    spec = ShardingSpec(
        preshift_bits=0,
        minishard_bits=1,
        shard_bits=0,
        minishard_index_encoding="gzip",
        data_encoding="gzip",
    )
    chunks = {0: b"a" * 1000, 1: b"b" * 10, 2: b""}
    shard = encode_shard(spec, chunks)
    assert len(shard) < 1000
    assert decode_shard(spec, shard) == chunks
    start, end = struct.unpack("<QQ", shard[:16])
    index = gzip.decompress(shard[32 + start : 32 + end])
    assert struct.unpack("<6Q", index)[:2] == (0, 2)  # ids 0 and 2 in minishard 0


def test_encode_shard_rejects_chunks_of_several_shards() -> None:
    spec = ShardingSpec(preshift_bits=0, minishard_bits=0, shard_bits=1)
    with pytest.raises(ValueError, match="several shards"):
        encode_shard(spec, {0: b"a", 1: b"b"})


specs = st.builds(
    ShardingSpec,
    preshift_bits=st.integers(0, 3),
    minishard_bits=st.integers(0, 3),
    shard_bits=st.integers(0, 3),
    hash=st.sampled_from(["identity", "murmurhash3_x86_128"]),
    minishard_index_encoding=st.sampled_from(["raw", "gzip"]),
    data_encoding=st.sampled_from(["raw", "gzip"]),
)


@given(specs, st.dictionaries(st.integers(0, 2**64 - 1), st.binary(max_size=20), max_size=30))
@settings(max_examples=examples(60))
def test_shards_round_trip_through_the_reader(spec: ShardingSpec, chunks: dict[int, bytes]) -> None:
    store = MemoryStore()
    keys = write_shards(store, spec, chunks, prefix="s0/")
    assert sorted(keys) == sorted(store.data)
    assert len(keys) == len(iter_shards(spec, chunks))
    reader = ShardedReader(store, spec, prefix="s0/")
    for chunk_id, value in chunks.items():
        assert reader.get(chunk_id) == value
    for key in keys:
        assert all(reader.shard_key(i) == key for i in decode_shard(spec, store.data[key]))
    assert sum(len(decode_shard(spec, store.data[k])) for k in keys) == len(chunks)


# --- the reader: requests, caching, versions ---


def make_store(spec: ShardingSpec, chunks: dict[int, bytes]) -> CountingStore:
    store = CountingStore(MemoryStore())
    write_shards(store, spec, chunks)
    store.reset()
    return store


def test_reader_reads_a_chunk_in_three_range_reads_then_one() -> None:
    spec = ShardingSpec(preshift_bits=0, minishard_bits=2, shard_bits=1)
    chunks = {i: bytes([i]) * (i + 1) for i in range(32)}
    store = make_store(spec, chunks)
    reader = ShardedReader(store, spec)
    assert reader.get(5) == chunks[5]
    assert [op for op, _ in store.requests] == ["get_range"] * 3
    store.reset()
    assert reader.get(5) == chunks[5]
    assert reader.get(13) == chunks[13]  # same shard (bit 2 = 1) and minishard (5 & 3 = 1)
    assert [op for op, _ in store.requests] == ["get_range"] * 2


def test_reader_absent_chunks() -> None:
    spec = ShardingSpec(preshift_bits=0, minishard_bits=2, shard_bits=1)
    store = make_store(spec, {0: b"zero", 4: b"four"})
    reader = ShardedReader(store, spec)
    assert reader.get(1) is None  # empty minishard: index entry only
    assert len(store.requests) == 1
    assert reader.get(8) is None  # minishard 0 of shard 0 holds 0 and 4, not 8
    assert reader.get(2 + 4) is None  # shard 1 does not exist
    assert reader.get(0) == b"zero"


def test_reader_notices_a_rewritten_shard() -> None:
    spec = ShardingSpec(preshift_bits=0, minishard_bits=1, shard_bits=0)
    store = MemoryStore()
    write_shards(store, spec, {0: b"old", 2: b"other"})
    reader = ShardedReader(store, spec)
    assert reader.get(0) == b"old"
    assert reader.get(4) is None
    write_shards(store, spec, {0: b"a new and longer value", 4: b"four"})
    assert reader.get(0) == b"a new and longer value"
    assert reader.get(4) == b"four"
    assert reader.get(2) is None
    store.data.clear()
    assert reader.get(0) is None


def test_reader_over_a_directory(tmp_path: object) -> None:
    spec = ShardingSpec(preshift_bits=1, minishard_bits=1, shard_bits=2, hash="murmurhash3_x86_128")
    chunks = {i * 7: str(i).encode() for i in range(20)}
    store = DirectoryStore(tmp_path)  # type: ignore[arg-type]
    write_shards(store, spec, chunks, prefix="scale/")
    reader = ShardedReader(store, spec, prefix="scale/")
    assert reader.get_many(range(140)) == chunks


# --- corrupt input ---


def test_truncated_shard_index() -> None:
    spec = ShardingSpec(preshift_bits=0, minishard_bits=2, shard_bits=0)
    store = MemoryStore({"0.shard": b"\x00" * 40})
    with pytest.raises(ShardingError, match="truncated"):
        ShardedReader(store, spec).get(3)  # entry 3 is bytes [48, 64)
    with pytest.raises(ShardingError, match="shorter than"):
        decode_shard(spec, b"\x00" * 40)


def test_minishard_index_range_past_end() -> None:
    spec = ShardingSpec(preshift_bits=0, minishard_bits=0, shard_bits=0)
    store = MemoryStore({"0.shard": struct.pack("<QQ", 0, 48)})
    with pytest.raises(ShardingError, match="past the end"):
        ShardedReader(store, spec).get(0)
    with pytest.raises(ShardingError, match="past the end"):
        decode_shard(spec, store.data["0.shard"])


def test_chunk_range_past_end() -> None:
    spec = ShardingSpec(preshift_bits=0, minishard_bits=0, shard_bits=0)
    good = encode_shard(spec, {0: b"0123456789"})
    # Grow the chunk size in the minishard index beyond the file.
    minishard_index = struct.pack("<3Q", 0, 0, 1000)
    bad = struct.pack("<QQ", 10, 34) + good[16:26] + minishard_index
    with pytest.raises(ShardingError, match="past the end"):
        ShardedReader(MemoryStore({"0.shard": bad}), spec).get(0)
    with pytest.raises(ShardingError, match="past the end"):
        decode_shard(spec, bad)


def test_reversed_and_misaligned_minishard_index() -> None:
    spec = ShardingSpec(preshift_bits=0, minishard_bits=0, shard_bits=0)
    with pytest.raises(ShardingError, match="reversed"):
        decode_shard(spec, struct.pack("<QQ", 8, 0) + b"\x00" * 8)
    with pytest.raises(ShardingError, match="multiple of 24"):
        ShardedReader(MemoryStore({"0.shard": struct.pack("<QQ", 0, 5) + b"12345"}), spec).get(0)


def test_corrupt_gzip() -> None:
    spec = ShardingSpec(preshift_bits=0, minishard_bits=0, shard_bits=0, data_encoding="gzip")
    shard = bytearray(encode_shard(spec, {0: b"hello" * 10}))
    shard[16 + 12] ^= 0xFF  # inside the gzip stream of the chunk
    with pytest.raises(ShardingError, match="gzip"):
        ShardedReader(MemoryStore({"0.shard": bytes(shard)}), spec).get(0)
