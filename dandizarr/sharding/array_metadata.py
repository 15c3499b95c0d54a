"""Zarr v3 array metadata (``zarr.json``): data types, chunk key encodings, fill values.

Pure JSON and numpy: no codecs, so whatever reads array metadata or names chunk keys (the
array, the archive packing) needs nothing more. Every reader here is total: a value, or
``MetadataError`` (``dandizarr.sharding.metadata_values``: its numbers through one bounded
helper, its codecs' nesting checked before anything builds them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from dandizarr.sharding.metadata_values import (
    MetadataError,
    check_codecs,
    is_int,
    metadata_int,
    metadata_number,
    shown,
)

__all__ = [
    "CANONICAL_INT",
    "DATA_TYPES",
    "MAX_EXTENT",
    "MAX_RANK",
    "ArrayMetadata",
    "ChunkKeyEncoding",
    "fill_value_json",
    "parse_fill_value",
]

DATA_TYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(name)
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
}

# A chunk coordinate as chunk keys spell it: decimal, no sign, no leading zeros. Parsers accept
# only this form, so one chunk has one key ("01" or "+1" would be a second name for chunk 1).
CANONICAL_INT = re.compile(r"0|[1-9][0-9]*")

# What an array's metadata may declare, whoever wrote it: at most 32 dimensions (tensorstore's
# limit; numpy's is 64) and extents and chunk sizes that are int64s (what numpy and every
# reader index with). Metadata is an uploader's: past these it is refused, never iterated.
MAX_RANK = 32
MAX_EXTENT = 2**63 - 1


def metadata_ints(value: Any, what: str) -> tuple[int, ...]:
    """A list of JSON integers (``shape``, ``chunk_shape``), checked against MAX_RANK and
    MAX_EXTENT (an int64, either sign); a MetadataError naming ``what`` otherwise."""
    if not isinstance(value, list | tuple) or not all(map(is_int, value)):
        raise MetadataError(f"{what} must be a list of integers, got {shown(value)}")
    if len(value) > MAX_RANK:
        raise MetadataError(f"{what} has {len(value)} dimensions, more than {MAX_RANK}")
    return tuple(metadata_int(n, f"an extent of {what}", -MAX_EXTENT, MAX_EXTENT) for n in value)


@dataclass(frozen=True)
class ChunkKeyEncoding:
    kind: Literal["default", "v2"] = "default"
    separator: Literal["/", "."] = "/"

    @classmethod
    def from_json(cls, value: Any) -> ChunkKeyEncoding:
        """The encoding a ``chunk_key_encoding`` (an object, or its name) declares."""
        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, Mapping):
            raise MetadataError(f"invalid chunk_key_encoding {shown(value)}")
        name = value.get("name")
        config = value.get("configuration") or {}
        if not isinstance(name, str) or name not in ("default", "v2"):
            raise MetadataError(f"unsupported chunk_key_encoding {shown(name)}")
        if not isinstance(config, Mapping):
            raise MetadataError(f"chunk_key_encoding configuration {shown(config)} is no object")
        separator = config.get("separator", "/" if name == "default" else ".")
        if not isinstance(separator, str) or separator not in ("/", "."):
            raise MetadataError(f"invalid chunk key separator {shown(separator)}")
        return cls(name, separator)  # type: ignore[arg-type]  # both checked above

    def to_json(self) -> dict[str, Any]:
        return {"name": self.kind, "configuration": {"separator": self.separator}}

    def key(self, coords: Sequence[int]) -> str:
        if self.kind == "default":
            return self.separator.join(["c", *(str(int(c)) for c in coords)])
        return self.separator.join(str(int(c)) for c in coords) if coords else "0"


def parse_fill_value(value: Any, dtype: np.dtype[Any]) -> Any:
    """The fill value from JSON as a numpy scalar of ``dtype``; MetadataError when it is
    missing or not one (``metadata_values.metadata_number``)."""
    if value is None:
        raise MetadataError("fill_value is required in Zarr v3 metadata")
    return metadata_number(value, dtype, "fill_value")


def _float_json(x: float) -> Any:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return float(x)


def fill_value_json(value: Any, dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "b":
        return bool(value)
    if dtype.kind in "iu":
        return int(value)
    if dtype.kind == "f":
        if math.isnan(value):
            # Keep NaN payloads exact: any NaN other than the canonical one goes as hex.
            canonical = np.array(np.nan, dtype=dtype).tobytes()
            raw = np.array(value, dtype=dtype).tobytes()
            if raw != canonical:
                return "0x" + np.array(value, dtype=dtype.newbyteorder(">")).tobytes().hex()
        return _float_json(float(value))
    if dtype.kind == "c":
        return [_float_json(float(value.real)), _float_json(float(value.imag))]
    raise ValueError(f"unsupported data type {dtype}")


@dataclass
class ArrayMetadata:
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    chunk_shape: tuple[int, ...]
    fill_value: Any
    codecs: list[dict[str, Any]]
    chunk_key_encoding: ChunkKeyEncoding = field(default_factory=ChunkKeyEncoding)
    attributes: dict[str, Any] = field(default_factory=dict)
    dimension_names: list[str | None] | None = None

    def __post_init__(self) -> None:
        metadata_ints(self.shape, "shape")
        metadata_ints(self.chunk_shape, "chunk shape")
        if len(self.chunk_shape) != len(self.shape):
            raise MetadataError(f"chunk shape {self.chunk_shape} does not match shape {self.shape}")
        if any(c <= 0 for c in self.chunk_shape) or any(s < 0 for s in self.shape):
            raise MetadataError("chunk sizes must be positive and the shape non-negative")

    @property
    def data_type(self) -> str:
        return str(self.dtype)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ArrayMetadata:
        """The array a ``zarr.json`` declares; MetadataError when it is no v3 array this
        library reads (every field checked before use)."""
        if doc.get("zarr_format") != 3 or doc.get("node_type") != "array":
            raise MetadataError("not a Zarr v3 array (zarr_format 3, node_type array)")
        data_type = doc.get("data_type")
        if not isinstance(data_type, str) or data_type not in DATA_TYPES:
            raise MetadataError(f"unsupported data_type {shown(data_type)}")
        dtype = DATA_TYPES[data_type]
        grid = doc.get("chunk_grid")
        if not isinstance(grid, Mapping) or grid.get("name") != "regular":
            raise MetadataError(f"unsupported chunk grid {shown(grid)}")
        grid_config = grid.get("configuration")
        if not isinstance(grid_config, Mapping):
            raise MetadataError("chunk_grid has no configuration.chunk_shape")
        if doc.get("storage_transformers"):
            raise MetadataError("storage transformers are not supported here")
        for name, value in doc.items():
            optional = isinstance(value, Mapping) and value.get("must_understand") is False
            if name not in _KNOWN_FIELDS and not optional:
                raise MetadataError(f"unsupported metadata field {shown(name)}")
        codecs = check_codecs(doc.get("codecs"))
        attributes = doc.get("attributes") or {}
        if not isinstance(attributes, Mapping):
            raise MetadataError("attributes must be an object")
        names = doc.get("dimension_names")
        if names is not None and (
            not isinstance(names, list)
            or len(names) > MAX_RANK
            or not all(n is None or isinstance(n, str) for n in names)
        ):
            raise MetadataError(f"dimension_names {shown(names)} is no list of names")
        return cls(
            shape=metadata_ints(doc.get("shape"), "shape"),
            dtype=dtype,
            chunk_shape=metadata_ints(grid_config.get("chunk_shape"), "chunk_shape"),
            fill_value=parse_fill_value(doc.get("fill_value"), dtype),
            codecs=[dict(c) if isinstance(c, Mapping) else {"name": c} for c in codecs],
            chunk_key_encoding=ChunkKeyEncoding.from_json(
                doc.get("chunk_key_encoding") or {"name": "default"}
            ),
            attributes=dict(attributes),
            dimension_names=names,
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.data_type,
            "chunk_grid": {
                "name": "regular",
                "configuration": {"chunk_shape": list(self.chunk_shape)},
            },
            "chunk_key_encoding": self.chunk_key_encoding.to_json(),
            "fill_value": fill_value_json(self.fill_value, self.dtype),
            "codecs": self.codecs,
            "attributes": self.attributes,
        }
        if self.dimension_names is not None:
            doc["dimension_names"] = self.dimension_names
        return doc


_KNOWN_FIELDS = {
    "zarr_format",
    "node_type",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
    "attributes",
    "dimension_names",
    "storage_transformers",
}
