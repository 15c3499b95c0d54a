"""The one reader of a Zarr array's metadata document (v2 ``.zarray``, v3 ``zarr.json``): what
the archive packing (which paths are chunk files), the service's pages (description and
preview) and OME descriptions (each level's shape) all read.

Every value is an uploader's and is checked before use: shapes and chunk shapes through
``metadata_ints`` (at most MAX_RANK dimensions, int64 extents), the chunk key encoding, the
grid. A malformed document is a ``MetadataError`` naming the problem. A v2 array reads as the
v3 array it is equivalent to (``ArrayDocument.v3_metadata``): the same chunk bytes under ``v2``
chunk keys, its compressor as a codec.
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

__all__ = [
    "ARRAY_V2",
    "ARRAY_V3",
    "ArrayDocument",
    "MetadataError",
    "parse_document",
]

ARRAY_V2 = ".zarray"
ARRAY_V3 = "zarr.json"


class MetadataError(ValueError):
    """An array's metadata document is malformed (the uploader's error, not a bug)."""


def parse_document(data: bytes) -> dict[str, Any]:
    """A metadata file's JSON object; MetadataError for bad JSON, JSON nested past the
    parser's depth, or anything but an object."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise MetadataError(f"not valid JSON ({type(error).__name__})") from None
    if not isinstance(doc, dict):
        raise MetadataError("metadata must be a JSON object")
    return doc


def _ints(value: Any, what: str) -> tuple[int, ...]:
    try:
        return metadata_ints(value, what)
    except ValueError as error:
        raise MetadataError(str(error)) from None


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
        if name == ARRAY_V2:
            return cls._v2(doc)
        if name == ARRAY_V3:
            return cls._v3(doc)
        raise MetadataError(f"{name!r} is not a Zarr array metadata file name")

    @classmethod
    def _v2(cls, doc: Mapping[str, Any]) -> ArrayDocument:
        if doc.get("zarr_format", 2) != 2:
            raise MetadataError(f"zarr_format must be 2, got {doc.get('zarr_format')!r}")
        for name in ("shape", "chunks", "dtype"):
            if name not in doc:
                raise MetadataError(f"missing {name!r}")
        separator = doc.get("dimension_separator") or "."
        if separator not in ("/", "."):
            raise MetadataError(f"dimension_separator must be '/' or '.', got {separator!r}")
        if not isinstance(doc["dtype"], str | list):
            raise MetadataError(f"dtype must be a string or a list, got {doc['dtype']!r}")
        return cls._checked(
            2, doc, _ints(doc["shape"], "shape"), _ints(doc["chunks"], "chunks"),
            ChunkKeyEncoding("v2", "/" if separator == "/" else "."),
        )  # fmt: skip

    @classmethod
    def _v3(cls, doc: Mapping[str, Any]) -> ArrayDocument | None:
        if doc.get("zarr_format") != 3:
            raise MetadataError(f"zarr_format must be 3, got {doc.get('zarr_format')!r}")
        node_type = doc.get("node_type")
        if node_type == "group":
            return None
        if node_type != "array":
            raise MetadataError(f"node_type must be 'array' or 'group', got {node_type!r}")
        if "shape" not in doc:
            raise MetadataError("missing 'shape'")
        grid = doc.get("chunk_grid")
        if not isinstance(grid, Mapping) or grid.get("name") != "regular":
            raise MetadataError(f"only a 'regular' chunk_grid is supported, got {grid!r}")
        config = grid.get("configuration")
        if not isinstance(config, Mapping) or "chunk_shape" not in config:
            raise MetadataError("chunk_grid has no configuration.chunk_shape")
        encoding_json = doc.get("chunk_key_encoding") or {"name": "default"}
        if not isinstance(encoding_json, Mapping | str) or (
            isinstance(encoding_json, Mapping)
            and not isinstance(encoding_json.get("configuration") or {}, Mapping)
        ):
            raise MetadataError(f"invalid chunk_key_encoding {encoding_json!r}")
        try:
            encoding = ChunkKeyEncoding.from_json(encoding_json)
        except (AttributeError, TypeError, ValueError) as error:
            raise MetadataError(str(error)) from None
        return cls._checked(
            3, doc, _ints(doc["shape"], "shape"), _ints(config["chunk_shape"], "chunk_shape"),
            encoding,
        )  # fmt: skip

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
            dtype = self.doc["dtype"]
            try:
                parsed = np.dtype([tuple(f) for f in dtype] if isinstance(dtype, list) else dtype)
            except (TypeError, ValueError):
                return 1
            return parsed.itemsize if parsed.kind != "O" and parsed.itemsize > 0 else 1
        data_type = self.doc.get("data_type")
        if isinstance(data_type, str):
            if data_type in DATA_TYPES:
                return DATA_TYPES[data_type].itemsize
            raw = re.fullmatch(r"r([1-9][0-9]*)", data_type)
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
                    return _ints(inner, "inner chunk_shape")
                except MetadataError:
                    return None
        return None

    def v3_metadata(self) -> ArrayMetadata:
        """The array as v3 metadata for reading; ValueError when its data type, filters or
        codecs are not ones the sharding library reads."""
        if self.zarr_format == 3:
            return ArrayMetadata.from_json(self.doc)
        return _v2_as_v3(self.doc, self.shape, self.chunks, self.encoding)


def _v2_as_v3(
    doc: Mapping[str, Any],
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    encoding: ChunkKeyEncoding,
) -> ArrayMetadata:
    try:
        dtype = np.dtype(doc["dtype"])
    except (TypeError, ValueError):
        raise ValueError(f"data type {doc.get('dtype')!r} is not one this reader reads") from None
    native = dtype.newbyteorder("=")
    if native.kind not in "biufc" or str(native) not in DATA_TYPES:
        raise ValueError(f"data type {doc['dtype']!r} is not numeric")
    filters = doc.get("filters")
    if filters:
        names = ", ".join(
            str(f.get("id")) if isinstance(f, Mapping) else repr(f)
            for f in (filters if isinstance(filters, list) else [filters])
        )
        raise ValueError(f"filters ({names}) are not read")
    codecs: list[dict[str, Any]] = []
    if doc.get("order", "C") == "F":
        codecs.append(
            {"name": "transpose", "configuration": {"order": list(range(len(shape)))[::-1]}}
        )
    endian = "big" if dtype.byteorder == ">" else "little"
    codecs.append({"name": "bytes", "configuration": {"endian": endian}})
    compressor = doc.get("compressor")
    if compressor:
        if not isinstance(compressor, Mapping):
            raise ValueError(f"compressor {compressor!r} is not an object")
        kind = compressor.get("id")
        if kind == "zstd":
            codecs.append({"name": "zstd", "configuration": {"level": compressor.get("level", 0)}})
        elif kind in ("gzip", "zlib"):  # the gzip codec reads either header
            codecs.append({"name": "gzip", "configuration": {"level": compressor.get("level", 1)}})
        elif kind == "blosc":
            config = {
                "cname": compressor.get("cname", "lz4"),
                "clevel": compressor.get("clevel", 5),
                "shuffle": blosc_shuffle_name(compressor.get("shuffle", 1), native.itemsize),
                "typesize": native.itemsize,
                "blocksize": compressor.get("blocksize", 0),
            }
            codecs.append({"name": "blosc", "configuration": config})
        else:
            raise ValueError(f"compressor {kind!r} is not read")
    fill = doc.get("fill_value")
    return ArrayMetadata(
        shape=shape,
        dtype=DATA_TYPES[str(native)],
        chunk_shape=chunks,
        fill_value=parse_fill_value(0 if fill is None else fill, DATA_TYPES[str(native)]),
        codecs=codecs,
        chunk_key_encoding=encoding,
    )
