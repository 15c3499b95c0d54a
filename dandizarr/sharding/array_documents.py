"""The one reader of a Zarr array's metadata document (v2 ``.zarray``, v3 ``zarr.json``): what
the archive packing (which paths are chunk files), the service's pages (description and
preview) and OME descriptions (each level's shape) all read.

Every value is an uploader's and is checked before use: the document's nesting
(MAX_JSON_DEPTH), shapes and chunk shapes through ``metadata_ints`` (at most MAX_RANK
dimensions, int64 extents), the chunk key encoding, the grid, a v2 data type (``v2_dtype``),
fill values and codec configurations through ``dandizarr.sharding.metadata_values``. A
malformed document is a ``MetadataError`` naming the problem, whatever it holds: every reader
here returns a value or raises that. A v2 array reads as the v3 array it is equivalent to
(``ArrayDocument.v3_metadata``): the same chunk bytes under ``v2`` chunk keys, its compressor as
a codec.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dandizarr.sharding.array_metadata import (
    DATA_TYPES,
    ArrayMetadata,
    ChunkKeyEncoding,
    metadata_ints,
    parse_fill_value,
)
from dandizarr.sharding.codecs.compression import blosc_shuffle_name
from dandizarr.sharding.metadata_values import (
    MetadataError,
    check_nesting,
    shown,
)
from dandizarr.zarr_names import ARRAY_V2, NODE_V3

__all__ = [
    "ARRAY_V2",
    "ARRAY_V3",
    "MAX_DTYPE_FIELDS",
    "ArrayDocument",
    "MetadataError",
    "parse_document",
    "v2_dtype",
]

ARRAY_V3 = NODE_V3


# A v2 structured data type: at most this many fields, nested at most this deep (a field's
# type a list of fields in turn). Real ones have a handful of fields, one level.
MAX_DTYPE_FIELDS = 256
MAX_DTYPE_NESTING = 4


def parse_document(data: bytes) -> dict[str, Any]:
    """A metadata file's JSON object; MetadataError for bad JSON, JSON nested past
    MAX_JSON_DEPTH (or the parser's own depth), or anything but an object."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise MetadataError(f"not valid JSON ({type(error).__name__})") from None
    if not isinstance(doc, dict):
        raise MetadataError("metadata must be a JSON object")
    check_nesting(doc, "the document")
    return doc


# The longest type string of a v2 dtype read ("<M8[ns]", "|S1024": a few characters).
MAX_DTYPE_TEXT = 64


def v2_dtype(value: Any) -> np.dtype[Any]:
    """The numpy type of a v2 ``dtype`` (a type string, or a structured type's list of
    ``[name, type]`` or ``[name, type, shape]`` fields); MetadataError when it is none, and
    before numpy sees it when it has more than MAX_DTYPE_FIELDS fields or nests past
    MAX_DTYPE_NESTING."""
    if isinstance(value, list):
        check_nesting(value, "dtype", MAX_DTYPE_NESTING)
        if len(value) > MAX_DTYPE_FIELDS:
            raise MetadataError(f"dtype has {len(value)} fields, more than {MAX_DTYPE_FIELDS}")
        if not all(isinstance(field, list) for field in value):
            raise MetadataError("a structured dtype's fields must be lists")
        spec: Any = [tuple(field) for field in value]
    elif isinstance(value, str):
        spec = value
    else:
        raise MetadataError(f"dtype must be a string or a list, got {shown(value)}")
    # numpy reads a type string's digits as an integer (a 5,000-digit one raised SyntaxError
    # past Python's integer-string limit): no type numpy knows is spelt in more characters.
    texts = [value] if isinstance(value, str) else [f for field in spec for f in field[1:2]]
    if any(isinstance(text, str) and len(text) > MAX_DTYPE_TEXT for text in texts):
        raise MetadataError(f"a dtype's type string is longer than {MAX_DTYPE_TEXT} characters")
    try:
        return np.dtype(spec)
    except (TypeError, ValueError, OverflowError, RecursionError, SyntaxError):
        raise MetadataError(f"dtype {shown(value)} is not one numpy reads") from None


@dataclass(frozen=True)
class ArrayDocument:
    """What an array's document declares, its numbers checked."""

    zarr_format: Literal[2, 3]
    shape: tuple[int, ...]
    # One chunk *file*'s shape: a v3 array with ``sharding_indexed`` stores shards.
    chunks: tuple[int, ...]
    encoding: ChunkKeyEncoding
    doc: Mapping[str, Any]

    @classmethod
    def from_json(cls, name: str, doc: Mapping[str, Any]) -> ArrayDocument | None:
        """The array ``doc`` (the JSON of a file called ``name``) declares; None for a v3
        group; MetadataError when malformed."""
        if not isinstance(doc, Mapping):
            raise MetadataError("metadata must be a JSON object")
        if name == ARRAY_V2:
            return cls._v2(doc)
        if name == ARRAY_V3:
            return cls._v3(doc)
        raise MetadataError(f"{name!r} is not a Zarr array metadata file name")

    @classmethod
    def _v2(cls, doc: Mapping[str, Any]) -> ArrayDocument:
        if doc.get("zarr_format", 2) != 2:
            raise MetadataError(f"zarr_format must be 2, got {shown(doc.get('zarr_format'))}")
        for name in ("shape", "chunks", "dtype"):
            if name not in doc:
                raise MetadataError(f"missing {name!r}")
        separator = doc.get("dimension_separator") or "."
        if not isinstance(separator, str) or separator not in ("/", "."):
            raise MetadataError(f"dimension_separator must be '/' or '.', got {shown(separator)}")
        if not isinstance(doc["dtype"], str | list):
            raise MetadataError(f"dtype must be a string or a list, got {shown(doc['dtype'])}")
        return cls._checked(
            2, doc, metadata_ints(doc["shape"], "shape"), metadata_ints(doc["chunks"], "chunks"),
            ChunkKeyEncoding("v2", "/" if separator == "/" else "."),
        )  # fmt: skip

    @classmethod
    def _v3(cls, doc: Mapping[str, Any]) -> ArrayDocument | None:
        if doc.get("zarr_format") != 3:
            raise MetadataError(f"zarr_format must be 3, got {shown(doc.get('zarr_format'))}")
        node_type = doc.get("node_type")
        if node_type == "group":
            return None
        if node_type != "array":
            raise MetadataError(f"node_type must be 'array' or 'group', got {shown(node_type)}")
        if "shape" not in doc:
            raise MetadataError("missing 'shape'")
        grid = doc.get("chunk_grid")
        if not isinstance(grid, Mapping) or grid.get("name") != "regular":
            raise MetadataError(f"only a 'regular' chunk_grid is supported, got {shown(grid)}")
        config = grid.get("configuration")
        if not isinstance(config, Mapping) or "chunk_shape" not in config:
            raise MetadataError("chunk_grid has no configuration.chunk_shape")
        encoding = ChunkKeyEncoding.from_json(doc.get("chunk_key_encoding") or {"name": "default"})
        shape = metadata_ints(doc["shape"], "shape")
        return cls._checked(
            3, doc, shape, metadata_ints(config["chunk_shape"], "chunk_shape"), encoding
        )

    @classmethod
    def _checked(
        cls,
        zarr_format: Literal[2, 3],
        doc: Mapping[str, Any],
        shape: tuple[int, ...],
        chunks: tuple[int, ...],
        encoding: ChunkKeyEncoding,
    ) -> ArrayDocument:
        if len(shape) != len(chunks):
            raise MetadataError(f"chunk shape {chunks} does not match shape {shape}")
        if any(s < 0 for s in shape) or any(c < 1 for c in chunks):
            raise MetadataError(f"shape {shape} must be non-negative and chunks {chunks} positive")
        return cls(zarr_format, shape, chunks, encoding, doc)

    @property
    def itemsize(self) -> int:
        """Bytes per element as far as the type says (1 when it does not: strings,
        extension types, a dtype numpy does not know): used for size estimates only."""
        if self.zarr_format == 2:
            try:
                parsed = v2_dtype(self.doc["dtype"])
            except MetadataError:
                return 1
            return parsed.itemsize if parsed.kind != "O" and parsed.itemsize > 0 else 1
        data_type = self.doc.get("data_type")
        if isinstance(data_type, str):
            if data_type in DATA_TYPES:
                return DATA_TYPES[data_type].itemsize
            raw = re.fullmatch(r"r([1-9][0-9]{0,5})", data_type)  # r8 .. r999999
            if raw and int(raw.group(1)) % 8 == 0:
                return int(raw.group(1)) // 8
        return 1

    @property
    def inner_chunks(self) -> tuple[int, ...] | None:
        """A v3 ``sharding_indexed`` array's inner chunk shape (None when not sharded or not
        stated as a list of integers)."""
        codecs = self.doc.get("codecs") if self.zarr_format == 3 else None
        for codec in codecs if isinstance(codecs, list) else []:
            if isinstance(codec, Mapping) and codec.get("name") == "sharding_indexed":
                config = codec.get("configuration")
                inner = config.get("chunk_shape") if isinstance(config, Mapping) else None
                try:
                    return metadata_ints(inner, "inner chunk_shape")
                except MetadataError:
                    return None
        return None

    def v3_metadata(self) -> ArrayMetadata:
        """The array as v3 metadata for reading; MetadataError when its data type, filters,
        fill value or codecs are not ones the sharding library reads."""
        if self.zarr_format == 3:
            return ArrayMetadata.from_json(self.doc)
        return _v2_as_v3(self.doc, self.shape, self.chunks, self.encoding)


def _v2_codec(compressor: Any, native: np.dtype[Any]) -> dict[str, Any]:
    """A v2 compressor as the v3 codec it is (its numbers checked when the codec is built)."""
    if not isinstance(compressor, Mapping):
        raise MetadataError(f"compressor {shown(compressor)} is not an object")
    kind = compressor.get("id")
    if kind == "zstd":
        return {"name": "zstd", "configuration": {"level": compressor.get("level", 0)}}
    if kind in ("gzip", "zlib"):  # the gzip codec reads either header
        return {"name": "gzip", "configuration": {"level": compressor.get("level", 1)}}
    if kind == "blosc":
        config = {
            "cname": compressor.get("cname", "lz4"),
            "clevel": compressor.get("clevel", 5),
            "shuffle": blosc_shuffle_name(compressor.get("shuffle", 1), native.itemsize),
            "typesize": native.itemsize,
            "blocksize": compressor.get("blocksize", 0),
        }
        return {"name": "blosc", "configuration": config}
    raise MetadataError(f"compressor {shown(kind)} is not read")


def _v2_as_v3(
    doc: Mapping[str, Any],
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    encoding: ChunkKeyEncoding,
) -> ArrayMetadata:
    dtype = v2_dtype(doc.get("dtype"))
    native = dtype.newbyteorder("=")
    if native.kind not in "biufc" or str(native) not in DATA_TYPES:
        raise MetadataError(f"data type {shown(doc['dtype'])} is not numeric")
    filters = doc.get("filters")
    if filters:
        count = len(filters) if isinstance(filters, list) else 1
        raise MetadataError(
            f"{count} filter{'s' if count > 1 else ''} ({shown(filters)}): not read"
        )
    codecs: list[dict[str, Any]] = []
    if doc.get("order", "C") == "F":
        codecs.append(
            {"name": "transpose", "configuration": {"order": list(range(len(shape)))[::-1]}}
        )
    endian = "big" if dtype.byteorder == ">" else "little"
    codecs.append({"name": "bytes", "configuration": {"endian": endian}})
    compressor = doc.get("compressor")
    if compressor:
        codecs.append(_v2_codec(compressor, native))
    fill = doc.get("fill_value")
    return ArrayMetadata(
        shape=shape,
        dtype=DATA_TYPES[str(native)],
        chunk_shape=chunks,
        fill_value=parse_fill_value(0 if fill is None else fill, DATA_TYPES[str(native)]),
        codecs=codecs,
        chunk_key_encoding=encoding,
    )
