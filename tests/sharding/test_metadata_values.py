"""The rules every reader of metadata stands on (dandizarr.sharding.metadata_values), and issue
#47's findings 1 and 2 at the library's level: codecs nested 300 deep and fill values no type
holds are a MetadataError from every reader, never a RecursionError, an OverflowError or an
IndexError."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dandizarr.sharding.array_documents import ARRAY_V2, ARRAY_V3, ArrayDocument, parse_document
from dandizarr.sharding.array_metadata import (
    DATA_TYPES,
    ArrayMetadata,
    fill_value_json,
    parse_fill_value,
)
from dandizarr.sharding.codec_registry import pipeline_from_json
from dandizarr.sharding.codecs.base import ArraySpec
from dandizarr.sharding.metadata_values import (
    MAX_CODEC_NESTING,
    MAX_JSON_DEPTH,
    MetadataError,
    check_nesting,
    shown,
)
from tests.support.metadata_strategies import deep_list, nested_sharding


def v3_doc(**extra: Any) -> dict[str, Any]:
    return {
        "zarr_format": 3, "node_type": "array", "shape": [8, 8], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes"}], **extra,
    }  # fmt: skip


def v2_doc(**extra: Any) -> dict[str, Any]:
    return {
        "zarr_format": 2, "shape": [8, 8], "chunks": [8, 8], "dtype": "|u1",
        "compressor": None, "fill_value": 0, "order": "C", "filters": None, **extra,
    }  # fmt: skip


def v3_metadata(name: str, doc: dict[str, Any]) -> ArrayMetadata:
    array = ArrayDocument.from_json(name, doc)
    assert array is not None
    return array.v3_metadata()


@pytest.mark.parametrize("depth", [MAX_CODEC_NESTING + 1, 150, 300, 5000])
def test_codecs_nested_deep_are_refused_before_anything_is_built(depth: int) -> None:
    """Finding 1: 300 deep was a RecursionError (150 was read, 200 was not)."""
    doc = v3_doc(codecs=nested_sharding(depth, [8, 8]))
    with pytest.raises(MetadataError, match="nest more than"):
        ArrayMetadata.from_json(doc)
    spec = ArraySpec((8, 8), np.dtype("uint8"), 0)
    with pytest.raises(MetadataError, match="nest more than"):
        pipeline_from_json(doc["codecs"], spec)


def test_codecs_nested_within_the_bound_are_built() -> None:
    doc = v3_doc(codecs=nested_sharding(MAX_CODEC_NESTING, [8, 8]))
    metadata = ArrayMetadata.from_json(doc)
    pipeline_from_json(metadata.codecs, ArraySpec((8, 8), metadata.dtype, 0))


# Finding 2, each value for each format: every one was a 500 (OverflowError, IndexError).
BAD_FILLS = [
    ("uint8", "|u1", math.inf),
    ("int64", "<i8", -math.inf),
    ("uint8", "|u1", math.nan),
    ("float32", "<f4", 10**400),
    ("float32", "<f4", 1e300),
    ("float64", "<f8", 10**400),
    ("float32", "<f4", "0x"),
    ("float32", "<f4", "0x00"),
    ("float32", "<f4", "0xzzzzzzzz"),
    ("float64", "<f8", "0x" + "ab" * 5000),
    ("complex64", "<c8", [10**400, 0]),
    ("complex64", "<c8", [0]),
    ("complex128", "<c16", ["0x", 0]),
    ("int32", "<i4", 2**200),
    ("int32", "<i4", 1.5),
    ("bool", "|b1", 1),
]


@pytest.mark.parametrize(("data_type", "dtype", "fill"), BAD_FILLS)
def test_a_fill_value_no_type_holds_is_a_metadata_error(
    data_type: str, dtype: str, fill: Any
) -> None:
    with pytest.raises(MetadataError, match="fill_value"):
        parse_fill_value(fill, DATA_TYPES[data_type])
    with pytest.raises(MetadataError, match="fill_value"):
        ArrayMetadata.from_json(v3_doc(data_type=data_type, fill_value=fill))
    with pytest.raises(MetadataError, match="fill_value"):
        v3_metadata(ARRAY_V3, v3_doc(data_type=data_type, fill_value=fill))
    with pytest.raises(MetadataError, match="fill_value"):
        v3_metadata(ARRAY_V2, v2_doc(dtype=dtype, fill_value=fill))


@pytest.mark.parametrize(
    ("data_type", "fill", "expected"),
    [
        ("uint8", 255, 255),
        ("int8", -128.0, -128),
        ("uint64", 2**64 - 1, 2**64 - 1),
        ("float32", "Infinity", math.inf),
        ("float16", 65504, 65504.0),
        ("float64", 10**300, 1e300),
        ("float32", "0x3f800000", 1.0),
        ("complex64", ["NaN", 1.0], complex(math.nan, 1.0)),
        ("bool", True, True),
    ],
)
def test_a_fill_value_a_type_holds_is_read(data_type: str, fill: Any, expected: Any) -> None:
    value = parse_fill_value(fill, DATA_TYPES[data_type])
    assert value.dtype == DATA_TYPES[data_type]
    assert np.array_equal(np.asarray(value), np.asarray(expected, value.dtype), equal_nan=True)


@given(data_type=st.sampled_from(sorted(DATA_TYPES)), data=st.data())
def test_a_fill_value_written_is_read_back(data_type: str, data: st.DataObject) -> None:
    dtype = DATA_TYPES[data_type]
    raw = data.draw(st.binary(min_size=dtype.itemsize, max_size=dtype.itemsize))
    value = np.frombuffer(raw, dtype)[0]
    back = parse_fill_value(fill_value_json(value, dtype), dtype)
    assert back.tobytes() == value.tobytes() or (
        dtype.kind in "fc" and np.isnan(value).any() and np.isnan(back).any()
    )


def test_nesting_is_checked_without_recursion() -> None:
    check_nesting(deep_list(MAX_JSON_DEPTH), "x")
    with pytest.raises(MetadataError, match="deeper than"):
        check_nesting(deep_list(MAX_JSON_DEPTH + 1), "x")
    with pytest.raises(MetadataError, match="deeper than"):
        check_nesting(deep_list(1_000_000), "x")  # far past any recursion limit
    with pytest.raises(MetadataError, match="deeper than"):
        parse_document(b'{"a": ' + b"[" * 900 + b"]" * 900 + b"}")


def test_a_value_is_shown_short_whatever_it_is() -> None:
    assert shown(10**5000) == "a 16610-bit integer"  # its decimal text is itself an error
    assert len(shown("x" * 1_000_000)) <= 80
    assert len(shown([10**5000] * 3)) <= 80
    assert len(shown(deep_list(100_000))) <= 80


@pytest.mark.parametrize(
    "codecs",
    [
        None,
        "bytes",
        {"name": "bytes"},
        [{"name": "sharding_indexed", "configuration": {"chunk_shape": [8, 8], "codecs": None}}],
        [{"name": "sharding_indexed", "configuration": {"chunk_shape": [8, 8], "codecs": {}}}],
        [{"name": "bytes"}] * 65,
    ],
)
def test_a_chain_that_is_no_list_of_codecs_is_a_metadata_error(codecs: Any) -> None:
    """The fuzzer's find: a sharding codec whose inner ``codecs`` is null was a TypeError."""
    with pytest.raises(MetadataError):
        pipeline_from_json(codecs, ArraySpec((8, 8), np.dtype("uint8"), 0))
