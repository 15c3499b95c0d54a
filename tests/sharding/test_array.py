"""The minimal Zarr v3 array: metadata, chunk keys, fill values, selections, request counts."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dandizarr.sharding.array import Array, sharding_codec
from dandizarr.sharding.array_metadata import (
    ArrayMetadata,
    ChunkKeyEncoding,
    fill_value_json,
    parse_fill_value,
)
from dandizarr.sharding.store import CountingStore, MemoryStore
from tests.support.hypothesis_profiles import examples

ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
BYTES = {"name": "bytes", "configuration": {"endian": "little"}}


def test_metadata_document(memory_store: MemoryStore) -> None:
    Array.create(
        memory_store,
        "a/b",
        shape=(10, 7),
        dtype="float32",
        chunk_shape=(4, 4),
        fill_value=float("nan"),
        attributes={"k": 1},
        dimension_names=["y", "x"],
    )
    doc = json.loads(memory_store.data["a/b/zarr.json"])
    assert doc == {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [10, 7],
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN",
        "codecs": [BYTES],
        "attributes": {"k": 1},
        "dimension_names": ["y", "x"],
    }
    opened = Array.open(memory_store, "a/b")
    assert opened.shape == (10, 7) and math.isnan(opened.fill_value)


def test_unknown_metadata_rejected() -> None:
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [2],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
    }
    assert ArrayMetadata.from_json(doc).chunk_key_encoding == ChunkKeyEncoding()
    with pytest.raises(ValueError, match="unsupported metadata field"):
        ArrayMetadata.from_json({**doc, "mystery": {"must_understand": True}})
    ArrayMetadata.from_json({**doc, "optional": {"must_understand": False}})
    with pytest.raises(ValueError, match="data_type"):
        ArrayMetadata.from_json({**doc, "data_type": "string"})


def test_chunk_keys() -> None:
    assert ChunkKeyEncoding().key((1, 2, 3)) == "c/1/2/3"
    assert ChunkKeyEncoding("default", ".").key((1, 2)) == "c.1.2"
    assert ChunkKeyEncoding("default").key(()) == "c"
    assert ChunkKeyEncoding.from_json({"name": "v2"}).key((1, 2)) == "1.2"
    assert ChunkKeyEncoding("v2", "/").key((4, 5)) == "4/5"
    assert ChunkKeyEncoding("v2").key(()) == "0"


@pytest.mark.parametrize(
    ("value", "dtype", "expected"),
    [
        (0, "uint8", 0),
        (-3, "int16", -3),
        (True, "bool", True),
        ("Infinity", "float64", math.inf),
        ("-Infinity", "float32", -math.inf),
        ("0x3fc00000", "float32", 1.5),
        (2.5, "float16", 2.5),
        ([1.0, "NaN"], "complex64", complex(1, math.nan)),
    ],
)
def test_fill_values(value: Any, dtype: str, expected: Any) -> None:
    parsed = parse_fill_value(value, np.dtype(dtype))
    assert parsed.dtype == np.dtype(dtype)
    assert np.array_equal(np.asarray(parsed), np.asarray(expected, dtype=dtype), equal_nan=True)
    again = parse_fill_value(fill_value_json(parsed, np.dtype(dtype)), np.dtype(dtype))
    assert np.array_equal(np.asarray(again), np.asarray(parsed), equal_nan=True)


def test_bad_fill_values() -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_fill_value(300, np.dtype("uint8"))
    with pytest.raises(ValueError, match="must be an integer"):
        parse_fill_value(1.5, np.dtype("int32"))
    with pytest.raises(ValueError, match="required"):
        parse_fill_value(None, np.dtype("int32"))


@pytest.mark.parametrize("encoding", ["default", "v2"])
def test_unsharded_round_trip_and_keys(memory_store: MemoryStore, encoding: str) -> None:
    array = Array.create(
        memory_store,
        shape=(5, 7),
        dtype="int32",
        chunk_shape=(2, 3),
        codecs=[BYTES, ZSTD],
        fill_value=-1,
        chunk_key_encoding=encoding,
    )
    data = np.arange(35, dtype="int32").reshape(5, 7)
    data[:2, :3] = -1
    array[...] = data
    expected_key = "c/2/2" if encoding == "default" else "2.2"
    assert expected_key in memory_store.data
    assert ("c/0/0" if encoding == "default" else "0.0") not in memory_store.data
    assert np.array_equal(array[...], data)
    array[1:4, 2] = 100
    data[1:4, 2] = 100
    assert np.array_equal(Array.open(memory_store)[...], data)
    assert array[4, 6] == 34
    assert array[..., -1].tolist() == data[:, -1].tolist()


def test_sharded_array_request_counts(memory_store: MemoryStore) -> None:
    store = CountingStore(memory_store)
    array = Array.create(
        store,
        shape=(64, 64),
        dtype="uint16",
        chunk_shape=(32, 32),
        codecs=[sharding_codec((8, 8), [BYTES, ZSTD])],
    )
    data = np.random.default_rng(0).integers(0, 9, (64, 64)).astype("uint16")
    array[...] = data
    store.reset()
    assert np.array_equal(array[8:16, 40:48], data[8:16, 40:48])
    assert len(store.requests) == 2
    store.reset()
    assert np.array_equal(array[16:24, 32:40], data[16:24, 32:40])
    assert len(store.requests) == 1  # index cached
    # A fresh reader rewrites that shard; the cached reader sees the new data.
    other = Array.open(memory_store)
    other[0:32, 32:64] = 7
    store.reset()
    assert (array[8:16, 40:48] == 7).all()
    assert len(store.requests) == 3
    # A whole-shard read is one request.
    store.reset()
    assert (array[0:32, 32:64] == 7).all()
    assert store.requests == [("get_range", "c/0/1")]  # bounded: no more than a shard can be


def test_append_mode_needs_index_at_end(memory_store: MemoryStore) -> None:
    with pytest.raises(ValueError, match="index at the end"):
        Array.create(
            memory_store,
            shape=(4,),
            dtype="uint8",
            chunk_shape=(4,),
            codecs=[sharding_codec((2,), index_location="start")],
            write_mode="append",
        )


def test_sharded_edge_write_does_not_read(memory_store: MemoryStore) -> None:
    store = CountingStore(memory_store)
    array = Array.create(
        store, shape=(40,), dtype="uint8", chunk_shape=(16,), codecs=[sharding_codec((4,))]
    )
    store.reset()
    array[...] = np.arange(1, 41, dtype="uint8")
    # Three shards; the last is the edge (8 of 16 in bounds): encoded without reading.
    assert sorted(store.requests) == [("set", "c/0"), ("set", "c/1"), ("set", "c/2")]
    assert array[...].tolist() == list(range(1, 41))


@st.composite
def array_cases(draw: st.DrawFn) -> tuple[dict[str, Any], np.ndarray, tuple[slice, ...]]:
    ndim = draw(st.integers(1, 3))
    inner = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    per = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    shard = tuple(i * p for i, p in zip(inner, per, strict=True))
    shape = tuple(draw(st.integers(1, 2 * s + 1)) for s in shard)
    codecs = draw(st.sampled_from([[BYTES], [BYTES, ZSTD], [BYTES, {"name": "gzip"}]]))
    sharded = draw(st.booleans())
    location = draw(st.sampled_from(["start", "end"]))
    kwargs = {
        "shape": shape,
        "dtype": draw(st.sampled_from(["uint8", "int16", "float32"])),
        "chunk_shape": shard,
        "codecs": [
            sharding_codec(
                inner,
                codecs,
                index_crc32c=draw(st.booleans()),
                index_location=location,
            )
        ]
        if sharded
        else codecs,
        "write_mode": draw(st.sampled_from(["rewrite", "append"]))
        if sharded and location == "end"
        else "rewrite",
    }
    rng = np.random.default_rng(draw(st.integers(0, 1000)))
    data = (rng.integers(0, 3, shape) * (rng.random(shape) < 0.5)).astype(kwargs["dtype"])
    region = []
    for n in shape:
        a = draw(st.integers(0, n - 1))
        region.append(slice(a, draw(st.integers(a + 1, n))))
    return kwargs, data, tuple(region)


@settings(max_examples=examples(50))
@given(array_cases())
def test_property_array_round_trip(case: tuple[dict[str, Any], np.ndarray, tuple]) -> None:
    kwargs, data, region = case
    store = MemoryStore()
    array = Array.create(store, "arr", **kwargs)
    array[...] = data
    assert np.array_equal(array[...], data)
    assert np.array_equal(array[region], data[region])
    array[region] = 1
    data[region] = 1
    assert np.array_equal(Array.open(store, "arr")[...], data)
    assert np.array_equal(array[region], data[region])
