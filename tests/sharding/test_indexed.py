"""The sharding_indexed codec: shard layout, corruption, range reads, caching, partial writes."""

from __future__ import annotations

import struct
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dandizarr.sharding.codec_registry import create_sharding_codec, sharding_codec_from_config
from dandizarr.sharding.codecs.base import ArraySpec
from dandizarr.sharding.index import MAX_UINT64, IndexCodecs, ShardFormatError, ShardIndex
from dandizarr.sharding.indexed.codec import ShardingCodec, coalesce_ranges
from dandizarr.sharding.indexed.index_cache import IndexCache
from dandizarr.sharding.morton import morton_order
from dandizarr.sharding.store import CountingStore, MemoryStore
from tests.support.hypothesis_profiles import examples

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}


def make_codec(
    shard: tuple[int, ...] = (8, 6),
    chunk: tuple[int, ...] = (2, 3),
    codecs: list[dict[str, Any]] | None = None,
    dtype: str = "uint16",
    fill: Any = 0,
    **kwargs: Any,
) -> ShardingCodec:
    spec = ArraySpec(shard, np.dtype(dtype), np.dtype(dtype).type(fill))
    return create_sharding_codec(spec, chunk, codecs or [BYTES], **kwargs)


def sample(shape: tuple[int, ...], dtype: str = "uint16", seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 1000, shape).astype(dtype)


def chunk_region(codec: ShardingCodec, coords: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, codec.chunk_shape, strict=True))


# -- layout -------------------------------------------------------------------------------


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("crc", [True, False])
def test_layout_uncompressed(location: str, crc: bool) -> None:
    codec = make_codec(index_codecs=IndexCodecs(crc32c=crc), index_location=location)
    data = sample((8, 6))
    shard = codec.encode_shard(data)
    assert shard is not None
    n = 16 * 8 + (4 if crc else 0)
    assert codec.index_nbytes == n
    assert len(shard) == data.nbytes + n
    raw_index = shard[:n] if location == "start" else shard[-n:]
    index = ShardIndex.decode(raw_index, (4, 2), IndexCodecs(crc32c=crc))
    base = n if location == "start" else 0
    # Every chunk sits where the index says, chunks laid out in Morton order.
    for rank, coords in enumerate(morton_order((4, 2))):
        offset, nbytes = index.get(coords)  # type: ignore[misc]
        assert (offset, nbytes) == (base + rank * 12, 12)
        chunk = np.frombuffer(shard[offset : offset + nbytes], "<u2").reshape(2, 3)
        assert np.array_equal(chunk, data[chunk_region(codec, coords)])
    assert np.array_equal(codec.decode(shard, codec.shard_spec), data)


def test_c_write_order() -> None:
    codec = make_codec(write_order="C")
    shard = codec.encode_shard(sample((8, 6)))
    assert shard is not None
    offsets = [offset for _, offset, _ in sorted(codec.iter_stored_chunks(shard))]
    assert offsets == sorted(offsets)


def test_fill_chunks_are_not_written() -> None:
    codec = make_codec(fill=7)
    data = np.full((8, 6), 7, dtype="uint16")
    assert codec.encode_shard(data) is None
    data[3, 4] = 1  # chunk (1, 1)
    shard = codec.encode_shard(data)
    assert shard is not None
    index = ShardIndex.decode(shard[-codec.index_nbytes :], (4, 2))
    assert index.present().sum() == 1
    assert index.get((1, 1)) == (0, 12)
    assert index.offsets_and_lengths[0, 0].tolist() == [MAX_UINT64, MAX_UINT64]
    assert np.array_equal(codec.decode(shard, codec.shard_spec), data)


def test_nan_fill_value() -> None:
    codec = make_codec(dtype="float32", fill=np.nan, codecs=[BYTES, ZSTD])
    data = np.full((8, 6), np.nan, dtype="float32")
    assert codec.encode_shard(data) is None
    data[0, 0] = 1.5
    shard = codec.encode_shard(data)
    assert shard is not None
    assert len(list(codec.iter_stored_chunks(shard))) == 1
    assert np.array_equal(codec.decode(shard, codec.shard_spec), data, equal_nan=True)


def test_nested_encode_of_empty_shard_is_an_empty_index() -> None:
    codec = make_codec()
    encoded = codec.encode(np.zeros((8, 6), "uint16"), codec.shard_spec)
    assert ShardIndex.decode(encoded, (4, 2)).is_empty()


def test_config_round_trip_and_validation() -> None:
    codec = make_codec(codecs=[BYTES, ZSTD, {"name": "crc32c"}], index_location="start")
    config = codec.to_json()
    assert config["configuration"]["index_location"] == "start"
    again = sharding_codec_from_config(config["configuration"], codec.shard_spec)
    data = sample((8, 6))
    assert again.encode_shard(data) == codec.encode_shard(data)
    with pytest.raises(ValueError, match="evenly divide"):
        make_codec(chunk=(3, 3))
    with pytest.raises(ValueError, match="variable-size"):
        make_codec(index_codecs=[BYTES, {"name": "gzip"}])
    with pytest.raises(ValueError, match="index_location"):
        make_codec(index_location="middle")


# -- corrupt input ------------------------------------------------------------------------


def _shard_with_index(codec: ShardingCodec, body: bytes, entries: list[tuple[int, int]]) -> bytes:
    index = ShardIndex(np.array(entries, dtype=np.uint64).reshape((*codec.chunks_per_shard, 2)))
    return body + index.encode(codec.index_codecs)


def test_corrupt_shards_raise_format_errors() -> None:
    codec = make_codec(shard=(4,), chunk=(2,))
    good = codec.encode_shard(np.array([1, 2, 3, 4], "uint16"))
    assert good is not None
    body = good[:8]
    E = MAX_UINT64
    cases = {
        "shorter than its": good[:20],
        "crc32c mismatch": good[:-1] + bytes([good[-1] ^ 0xFF]),
        "past the end": _shard_with_index(codec, body, [(0, 4), (6, 4)]),
        "overlap": _shard_with_index(codec, body, [(0, 4), (2, 4)]),
        "exactly one": _shard_with_index(codec, body, [(0, 4), (E, 4)]),
        "past the end ": _shard_with_index(codec, body, [(0, 4), (4, E - 1)]),
        "expected 4 for": _shard_with_index(codec, body, [(0, 3), (4, 4)]),
    }
    for message, shard in cases.items():
        with pytest.raises(ShardFormatError, match=message.strip()):
            codec.decode(shard, codec.shard_spec)
    assert issubclass(ShardFormatError, ValueError)


def test_chunk_inside_start_index_is_rejected() -> None:
    codec = make_codec(shard=(4,), chunk=(2,), index_location="start")
    index = ShardIndex(np.array([[0, 4], [MAX_UINT64, MAX_UINT64]], dtype=np.uint64))
    shard = index.encode(codec.index_codecs) + b"\0" * 4
    with pytest.raises(ShardFormatError, match="inside index"):
        codec.decode(shard, codec.shard_spec)


def test_range_past_end_detected_on_partial_read() -> None:
    codec = make_codec(shard=(4,), chunk=(2,))
    store = MemoryStore()
    # Index claims chunk 1 at [42, 46) but the whole shard is 44 bytes. (A length longer than
    # any encoding of an inner chunk is refused before any read: test_junk_lengths_...)
    store.set("s", _shard_with_index(codec, b"\1" * 8, [(0, 4), (42, 4)]))
    with pytest.raises(ShardFormatError, match="past the end"):
        codec.read_region(store, "s", (slice(2, 4),))


def test_corrupt_chunk_crc_on_partial_read() -> None:
    codec = make_codec(codecs=[BYTES, {"name": "crc32c"}])
    store = MemoryStore()
    codec.write_region(store, "s", sample((8, 6)))
    shard = bytearray(store.data["s"])
    shard[0] ^= 1  # first chunk in Morton order: (0, 0)
    store.set("s", bytes(shard))
    with pytest.raises(ShardFormatError, match="checksum"):
        codec.read_chunk(store, "s", (0, 0))
    assert codec.read_chunk(store, "s", (1, 1)).shape == (2, 3)


# -- store reads: request counts and caching ---------------------------------------------


def test_one_inner_chunk_is_two_range_reads(counting_store: CountingStore) -> None:
    codec = make_codec(codecs=[BYTES, ZSTD])
    data = sample((8, 6))
    codec.write_region(counting_store, "s", data)
    counting_store.reset()
    chunk = codec.read_chunk(counting_store, "s", (2, 1))
    assert np.array_equal(chunk, data[4:6, 3:6])
    assert counting_store.requests == [("get_range", "s"), ("get_range", "s")]


def test_cached_index_is_one_read_and_never_stale(counting_store: CountingStore) -> None:
    codec = make_codec(codecs=[BYTES, ZSTD])
    cache = IndexCache()
    data = sample((8, 6))
    codec.write_region(counting_store, "s", data)
    counting_store.reset()
    codec.read_chunk(counting_store, "s", (0, 0), cache=cache)
    assert len(counting_store.requests) == 2
    counting_store.reset()
    for coords in [(1, 0), (3, 1), (2, 0)]:
        chunk = codec.read_chunk(counting_store, "s", coords, cache=cache)
        assert np.array_equal(chunk, data[chunk_region(codec, coords)])
    assert counting_store.requests == [("get_range", "s")] * 3

    # Another writer (no shared cache) rewrites the shard: the cached entry is now stale.
    newer = sample((8, 6), seed=1)
    codec.write_region(counting_store.inner, "s", newer)
    counting_store.reset()
    chunk = codec.read_chunk(counting_store, "s", (3, 1), cache=cache)
    assert np.array_equal(chunk, newer[6:8, 3:6])
    # One rejected conditional read, then index + chunk; the cache is fresh again.
    assert len(counting_store.requests) == 3
    counting_store.reset()
    codec.read_chunk(counting_store, "s", (0, 1), cache=cache)
    assert len(counting_store.requests) == 1


def test_stale_cache_same_size_rewrite(counting_store: CountingStore) -> None:
    # Uncompressed: the rewrite has exactly the same size and layout, only values differ.
    codec = make_codec()
    cache = IndexCache()
    codec.write_region(counting_store, "s", np.full((8, 6), 1, "uint16"))
    codec.read_chunk(counting_store, "s", (0, 0), cache=cache)
    codec.write_region(counting_store.inner, "s", np.full((8, 6), 2, "uint16"))
    assert (codec.read_chunk(counting_store, "s", (0, 0), cache=cache) == 2).all()


def test_cache_after_shard_deleted_and_empty_chunks(counting_store: CountingStore) -> None:
    codec = make_codec()
    cache = IndexCache()
    data = np.zeros((8, 6), "uint16")
    data[0, 0] = 5
    codec.write_region(counting_store, "s", data)
    assert codec.read_chunk(counting_store, "s", (0, 0), cache=cache)[0, 0] == 5
    counting_store.reset()
    # An empty chunk per the cached index still costs one (index) read: it may have changed.
    assert (codec.read_chunk(counting_store, "s", (3, 1), cache=cache) == 0).all()
    assert len(counting_store.requests) == 1
    counting_store.inner.delete("s")
    assert (codec.read_chunk(counting_store, "s", (0, 0), cache=cache) == 0).all()
    assert len(cache) == 0


def test_absent_shard_reads_fill(counting_store: CountingStore) -> None:
    codec = make_codec(fill=3)
    assert (codec.read_chunk(counting_store, "nope", (1, 1)) == 3).all()
    assert counting_store.requests == [("get_range", "nope")]
    assert (codec.read_region(counting_store, "nope") == 3).all()


def test_full_shard_read_is_one_get(counting_store: CountingStore) -> None:
    codec = make_codec(codecs=[BYTES, ZSTD])
    data = sample((8, 6))
    codec.write_region(counting_store, "s", data)
    counting_store.reset()
    assert np.array_equal(codec.read_region(counting_store, "s"), data)
    # One read, of at most the bytes a compact shard could have.
    assert counting_store.requests == [("get_range", "s")]


def test_nearby_ranges_are_merged() -> None:
    assert coalesce_ranges([(10, 20), (0, 5), (30, 40)], gap=4) == [
        (0, 5, [1]),
        (10, 20, [0]),
        (30, 40, [2]),
    ]
    assert coalesce_ranges([(10, 20), (0, 5), (30, 40)], gap=5) == [(0, 20, [1, 0]), (30, 40, [2])]
    assert coalesce_ranges([(10, 20), (0, 5), (30, 40)], gap=10) == [(0, 40, [1, 0, 2])]
    assert coalesce_ranges([(0, 10), (2, 4)], gap=0) == [(0, 10, [0, 1])]

    store = CountingStore(MemoryStore())
    merged = make_codec(shard=(16,), chunk=(1,), coalesce_gap=4)
    split = make_codec(shard=(16,), chunk=(1,), coalesce_gap=0)
    data = sample((16,))
    merged.write_region(store, "s", data)
    store.reset()
    # Chunks 0..3 are adjacent (2 bytes each); 6 leaves a 4-byte gap; 15 is far away.
    region = (slice(0, 16),)
    out = merged.read_region(store, "s", (slice(0, 7),))
    assert np.array_equal(out, data[:7])
    assert len(store.requests) == 2  # index + one merged range
    store.reset()
    wanted = [0, 3, 15]
    for codec, expected in [(merged, 1 + 2), (split, 1 + 3)]:
        store.reset()
        # Several separate chunks in one call: go through the private fetch to pick them.
        targets = [t for t in codec._targets(region) if t.coords[0] in wanted]
        got = codec._fetch_chunks(store, "s", targets, None)
        assert got is not None
        assert {c[0]: bytes(b) for c, b in got.items()} == {
            i: data[i : i + 1].tobytes() for i in wanted
        }
        assert len(store.requests) == expected


# -- partial writes -----------------------------------------------------------------------


@pytest.mark.parametrize("location", ["start", "end"])
def test_read_modify_write_copies_untouched_chunks(store: Any, location: str) -> None:
    codec = make_codec(codecs=[BYTES, ZSTD], index_location=location)
    data = sample((8, 6))
    codec.write_region(store, "s", data)
    before = {c: store.get("s")[o : o + n] for c, o, n in codec.iter_stored_chunks(store.get("s"))}
    codec.write_region(store, "s", 9, (slice(1, 3), slice(2, 5)))  # 4 chunks, all partial
    data[1:3, 2:5] = 9
    shard = store.get("s")
    after = {c: shard[o : o + n] for c, o, n in codec.iter_stored_chunks(shard)}
    changed = {c for c in after if after[c] != before[c]}
    assert changed == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert np.array_equal(codec.read_region(store, "s"), data)
    # Compact: exactly chunks + index, laid out in Morton order.
    assert len(shard) == sum(len(b) for b in after.values()) + codec.index_nbytes
    order = sorted(
        after, key=lambda c: next(o for cc, o, _ in codec.iter_stored_chunks(shard) if cc == c)
    )
    assert order == [c for c in morton_order((4, 2)) if c in after]


def test_append_mode_keeps_old_bytes(store: Any) -> None:
    codec = make_codec(codecs=[BYTES, ZSTD])
    data = sample((8, 6))
    codec.write_region(store, "s", data)
    old = store.get("s")
    codec.write_region(store, "s", 5, (slice(0, 2), slice(0, 3)), mode="append")
    data[0:2, 0:3] = 5
    new = store.get("s")
    assert new.startswith(old)  # old chunks and old index untouched
    index = ShardIndex.decode(new[-codec.index_nbytes :], (4, 2))
    offset, nbytes = index.get((0, 0))  # type: ignore[misc]
    assert offset == len(old) and offset + nbytes == len(new) - codec.index_nbytes
    assert np.array_equal(codec.read_region(store, "s"), data)
    # Append a deletion: only a new index is appended.
    codec.write_region(store, "s", 0, (slice(6, 8), slice(3, 6)), mode="append")
    data[6:8, 3:6] = 0
    assert len(store.get("s")) == len(new) + codec.index_nbytes
    assert np.array_equal(codec.read_region(store, "s"), data)
    with pytest.raises(ValueError, match="index_location 'end'"):
        make_codec(index_location="start").write_region(
            store, "t", 1, (slice(0, 1),) * 2, mode="append"
        )


@pytest.mark.parametrize("mode", ["rewrite", "append"])
def test_deletion(store: Any, mode: str) -> None:
    codec = make_codec()
    data = np.zeros((8, 6), "uint16")
    data[0, 0] = data[7, 5] = 1
    codec.write_region(store, "s", data)
    codec.erase_chunks(store, "s", [(0, 0)], mode=mode)  # type: ignore[arg-type]
    assert codec.read_region(store, "s")[0, 0] == 0
    assert store.get("s") is not None
    # Writing fill value over the last stored chunk deletes the whole shard.
    codec.write_region(store, "s", 0, chunk_region(codec, (3, 1)), mode=mode)  # type: ignore[arg-type]
    assert store.get("s") is None
    codec.write_region(store, "s", np.zeros((8, 6), "uint16"))
    assert store.get("s") is None


def test_concurrent_partial_writes_to_one_shard() -> None:
    codec = make_codec(shard=(16,), chunk=(1,))
    store = MemoryStore()
    threads = [
        threading.Thread(target=codec.write_region, args=(store, "s", i + 1, (slice(i, i + 1),)))
        for i in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codec.read_region(store, "s").tolist() == list(range(1, 17))


# -- nested sharding ----------------------------------------------------------------------


def test_nested_sharding(store: Any) -> None:
    inner_sharding = {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": [2, 2],
            "codecs": [BYTES, ZSTD],
            "index_codecs": [BYTES, {"name": "crc32c"}],
            "index_location": "start",
        },
    }
    codec = make_codec(shard=(8, 8), chunk=(4, 4), codecs=[inner_sharding])
    assert isinstance(codec.inner.array_bytes, ShardingCodec)
    data = sample((8, 8))
    data[:4, :4] = 0  # one empty outer-inner chunk
    data[4:6, 4:6] = 0  # one empty innermost chunk
    codec.write_region(store, "s", data)
    assert np.array_equal(codec.read_region(store, "s"), data)
    assert np.array_equal(codec.read_region(store, "s", (slice(3, 7), slice(1, 6))), data[3:7, 1:6])
    codec.write_region(store, "s", 4, (slice(5, 6), slice(5, 8)))
    data[5, 5:8] = 4
    assert np.array_equal(codec.read_region(store, "s"), data)
    assert len(list(codec.iter_stored_chunks(store.get("s")))) == 3
    assert codec.to_json()["configuration"]["codecs"][0] == inner_sharding


# -- property tests -----------------------------------------------------------------------

CODEC_CHOICES = [
    [BYTES],
    [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip"}],
    [BYTES, ZSTD, {"name": "crc32c"}],
    [{"name": "transpose", "configuration": {"order": "F"}}, BYTES, {"name": "blosc"}],
]


@st.composite
def shard_cases(draw: st.DrawFn) -> tuple[ShardingCodec, np.ndarray, tuple[slice, ...]]:
    ndim = draw(st.integers(1, 4))
    chunk = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    cps = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    shard = tuple(c * n for c, n in zip(chunk, cps, strict=True))
    codecs = draw(st.sampled_from(CODEC_CHOICES))
    if codecs[0]["name"] == "transpose":
        codecs = [
            {"name": "transpose", "configuration": {"order": list(range(ndim))[::-1]}},
            *codecs[1:],
        ]
    codec = make_codec(
        shard,
        chunk,
        codecs,
        dtype=draw(st.sampled_from(["uint8", "int32", "float64"])),
        index_codecs=IndexCodecs(crc32c=draw(st.booleans())),
        index_location=draw(st.sampled_from(["start", "end"])),
        write_order=draw(st.sampled_from(["morton", "C"])),
    )
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 4, shard).astype(codec.shard_spec.dtype)
    data[rng.random(shard) < 0.5] = 0  # plenty of fill-valued chunks
    region = []
    for n in shard:
        a = draw(st.integers(0, n - 1))
        b = draw(st.integers(a + 1, n))
        region.append(slice(a, b))
    return codec, data, tuple(region)


@settings(max_examples=examples(50))
@given(shard_cases())
def test_property_round_trip(case: tuple[ShardingCodec, np.ndarray, tuple[slice, ...]]) -> None:
    codec, data, region = case
    store = CountingStore(MemoryStore())
    codec.write_region(store, "s", data)
    if not data.any():
        assert store.inner.get("s") is None  # type: ignore[attr-defined]
    assert np.array_equal(codec.read_region(store, "s"), data)
    cache = IndexCache()
    assert np.array_equal(codec.read_region(store, "s", region, cache=cache), data[region])
    # Partial write of the region, then read everything back.
    patch = (np.arange(data[region].size).reshape(data[region].shape) % 3).astype(data.dtype)
    codec.write_region(store, "s", patch, region, cache=cache)
    data[region] = patch
    assert np.array_equal(codec.read_region(store, "s", cache=cache), data)
    encoded = store.inner.get("s")  # type: ignore[attr-defined]
    if encoded is not None:
        assert np.array_equal(codec.decode(encoded, codec.shard_spec), data)


def test_struct_sanity() -> None:
    # The spec's example index for 2x2 chunks: 64 bytes of pairs + 4 checksum bytes.
    codec = make_codec(shard=(64, 64), chunk=(32, 32))
    shard = codec.encode_shard(np.ones((64, 64), "uint16"))
    assert shard is not None
    assert codec.index_nbytes == 68
    pairs = struct.unpack("<8Q", shard[-68:-4])
    assert sorted(pairs[0::2]) == [0, 2048, 4096, 6144]


# -- junk: values longer than any encoding of them ----------------------------------------


class _BytesCountingStore(MemoryStore):
    """A memory store that adds up the bytes its reads return."""

    bytes_read = 0

    def get(self, key: str) -> bytes | None:
        value = super().get(key)
        self.bytes_read += len(value or b"")
        return value

    def get_range(self, key: str, start: int, end: int | None = None, **kw: Any) -> Any:
        got = super().get_range(key, start, end, **kw)
        self.bytes_read += 0 if got is None else len(got.data)
        return got


def test_junk_lengths_in_an_index_are_refused_before_their_ranges_are_read() -> None:
    codec = make_codec(shard=(4,), chunk=(2,), codecs=[BYTES, ZSTD])
    store = _BytesCountingStore()
    junk = 8 << 20  # an inner chunk of 2 uint16 cannot take 8 MiB, compressed or not
    store.set("s", _shard_with_index(codec, bytes(junk + 8), [(0, 8), (8, junk)]))
    store.bytes_read = 0
    with pytest.raises(ShardFormatError, match="longer than any encoding of it could be"):
        codec.read_region(store, "s", (slice(2, 4),))
    assert store.bytes_read == codec.index_nbytes  # the index, and nothing of the junk


def test_a_whole_shard_read_stops_at_a_compact_shards_size() -> None:
    codec = make_codec(codecs=[BYTES, ZSTD])
    store = _BytesCountingStore()
    data = sample((8, 6))
    codec.write_region(store, "s", data)
    limit = codec.max_encoded_size(codec.shard_spec)
    assert limit is not None and len(store.data["s"]) < limit
    # Dead bytes before the chunks (append-mode writes leave such): read by the index.
    index = codec._index_from_shard(store.data["s"])
    padded = ShardIndex(index.offsets_and_lengths.copy())
    padded.offsets_and_lengths[..., 0] += np.uint64(limit)
    body = bytes(limit) + store.data["s"][: -codec.index_nbytes]
    store.set("s", body + padded.encode(codec.index_codecs))
    store.bytes_read = 0
    assert np.array_equal(codec.read_region(store, "s"), data)
    assert store.bytes_read < 2 * limit  # the first try's bounded read, then the chunks
