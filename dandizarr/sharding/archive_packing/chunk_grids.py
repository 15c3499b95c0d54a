"""Which archive paths are an array's chunk files: chunk grids from Zarr v2 / v3 metadata."""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from dandizarr.sharding.array_metadata import (
    CANONICAL_INT,
    DATA_TYPES,
    ChunkKeyEncoding,
    metadata_ints,
)

__all__ = [
    "METADATA_NAMES",
    "ChunkGrid",
    "PackingError",
    "find_grids",
    "grid_from_metadata",
    "is_plain_int",
]

METADATA_NAMES = (".zarray", "zarr.json")


class PackingError(ValueError):
    """Malformed metadata or an inconsistent shard request (a caller's error, not a bug)."""


def is_plain_int(value: Any) -> bool:
    """An int that is not a bool (JSON's true is no size)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ChunkGrid:
    """Which archive paths are an array's chunk files, and their grid coordinates.

    ``chunks`` is the shape of one chunk *file*: for a v3 array with ``sharding_indexed`` that
    is the shard shape.
    """

    array_path: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    separator: str
    prefix: str
    itemsize: int

    def __post_init__(self) -> None:
        if self.array_path.startswith("/") or self.array_path.endswith("/"):
            raise PackingError(f"array path {self.array_path!r} must be relative, no trailing /")
        if self.array_path and "" in self.array_path.split("/"):
            raise PackingError(f"array path {self.array_path!r} has an empty segment")
        if len(self.shape) != len(self.chunks):
            raise PackingError(f"chunk shape {self.chunks} does not match shape {self.shape}")
        if any(s < 0 for s in self.shape) or any(c < 1 for c in self.chunks):
            raise PackingError(
                f"shape {self.shape} must be non-negative and chunks {self.chunks} positive"
            )
        if self.separator not in ("/", "."):
            raise PackingError(f"chunk key separator must be '/' or '.', got {self.separator!r}")
        if self.prefix not in ("", "c"):
            raise PackingError(f"chunk key prefix must be '' or 'c', got {self.prefix!r}")
        if self.itemsize < 1:
            raise PackingError(f"itemsize must be positive, got {self.itemsize}")

    @cached_property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def _encoding(self) -> ChunkKeyEncoding:
        return ChunkKeyEncoding(
            "default" if self.prefix == "c" else "v2",
            "/" if self.separator == "/" else ".",
        )

    @property
    def _dir(self) -> str:
        return f"{self.array_path}/" if self.array_path else ""

    def grid_shape(self) -> tuple[int, ...]:
        return self._grid_shape

    # Computed once per grid: an upload asks every one of its paths (ten million, say), twice.
    # (cached_property stores into the instance's __dict__, which a frozen dataclass allows.)
    @cached_property
    def _grid_shape(self) -> tuple[int, ...]:
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunks, strict=True))

    @cached_property
    def _key_pattern(self) -> re.Pattern[str]:
        """A whole chunk path of an array of one or more dimensions: the array's directory,
        the prefix, and ``ndim`` canonical integers (captured) joined by the separator."""
        separator = re.escape(self.separator)
        key = separator.join([f"({CANONICAL_INT.pattern})"] * self.ndim)
        if self.prefix:
            key = re.escape(self.prefix) + separator + key
        return re.compile(re.escape(self._dir) + key)

    def chunk_coords(self, path: str) -> tuple[int, ...] | None:
        """Grid coordinates when ``path`` (archive-relative) is exactly one of this array's chunk
        keys inside the grid, else None: only canonical integers, the right number of them."""
        if self.ndim == 0:
            # Zarr v3's key for the one chunk of a 0-d array is its prefix; v2's is "0".
            return () if path == self._dir + (self.prefix or "0") else None
        match = self._key_pattern.fullmatch(path)
        if match is None:
            return None
        coords = tuple(map(int, match.groups()))
        return coords if all(map(operator.lt, coords, self._grid_shape)) else None

    def chunk_key(self, coords: Sequence[int]) -> str:
        if len(coords) != self.ndim:
            raise PackingError(f"{len(coords)} coordinates for a {self.ndim}-d grid")
        return self._dir + self._encoding.key(coords)

    def chunk_nbytes(self) -> int:
        return self.itemsize * math.prod(self.chunks)


def _int_tuple(value: Any, what: str, source: str) -> tuple[int, ...]:
    try:
        return metadata_ints(value, what)
    except ValueError as error:
        raise PackingError(f"{source}: {error}") from None


def _v2_itemsize(dtype: Any, source: str) -> int:
    if not isinstance(dtype, str | list):
        raise PackingError(f"{source}: dtype must be a string or a list, got {dtype!r}")
    try:
        parsed = np.dtype([tuple(f) for f in dtype] if isinstance(dtype, list) else dtype)
    except (TypeError, ValueError):
        return 1  # a dtype numpy doesn't know still has chunks; only size estimates suffer
    return parsed.itemsize if parsed.kind != "O" and parsed.itemsize > 0 else 1


def _v3_itemsize(data_type: Any) -> int:
    if isinstance(data_type, str):
        if data_type in DATA_TYPES:
            return DATA_TYPES[data_type].itemsize
        raw = re.fullmatch(r"r([1-9][0-9]*)", data_type)
        if raw and int(raw.group(1)) % 8 == 0:
            return int(raw.group(1)) // 8
    return 1  # strings, extension types: unknown per-element size


def grid_from_metadata(array_path: str, metadata_name: str, data: bytes) -> ChunkGrid | None:
    """The chunk grid an array's ``.zarray`` / ``zarr.json`` declares; None for a group."""
    source = f"{array_path}/{metadata_name}" if array_path else metadata_name
    if metadata_name in (".zgroup", ".zattrs", ".zmetadata"):
        return None
    if metadata_name not in METADATA_NAMES:
        raise PackingError(f"{source}: not a Zarr metadata file name")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise PackingError(f"{source}: not valid JSON ({type(error).__name__})") from None
    if not isinstance(doc, dict):
        raise PackingError(f"{source}: metadata must be a JSON object")
    if metadata_name == ".zarray":
        return _grid_v2(array_path, doc, source)
    return _grid_v3(array_path, doc, source)


def _grid_v2(array_path: str, doc: Mapping[str, Any], source: str) -> ChunkGrid:
    if doc.get("zarr_format", 2) != 2:
        raise PackingError(f"{source}: zarr_format must be 2, got {doc.get('zarr_format')!r}")
    for name in ("shape", "chunks", "dtype"):
        if name not in doc:
            raise PackingError(f"{source}: missing {name!r}")
    separator = doc.get("dimension_separator") or "."
    if separator not in ("/", "."):
        raise PackingError(f"{source}: dimension_separator must be '/' or '.', got {separator!r}")
    return _make_grid(
        source,
        array_path=array_path,
        shape=_int_tuple(doc["shape"], "shape", source),
        chunks=_int_tuple(doc["chunks"], "chunks", source),
        separator=separator,
        prefix="",
        itemsize=_v2_itemsize(doc["dtype"], source),
    )


def _grid_v3(array_path: str, doc: Mapping[str, Any], source: str) -> ChunkGrid | None:
    if doc.get("zarr_format") != 3:
        raise PackingError(f"{source}: zarr_format must be 3, got {doc.get('zarr_format')!r}")
    node_type = doc.get("node_type")
    if node_type == "group":
        return None
    if node_type != "array":
        raise PackingError(f"{source}: node_type must be 'array' or 'group', got {node_type!r}")
    if "shape" not in doc:
        raise PackingError(f"{source}: missing 'shape'")
    grid = doc.get("chunk_grid")
    if not isinstance(grid, Mapping) or grid.get("name") != "regular":
        raise PackingError(f"{source}: only a 'regular' chunk_grid is supported, got {grid!r}")
    config = grid.get("configuration")
    if not isinstance(config, Mapping) or "chunk_shape" not in config:
        raise PackingError(f"{source}: chunk_grid has no configuration.chunk_shape")
    encoding_json = doc.get("chunk_key_encoding") or {"name": "default"}
    if not isinstance(encoding_json, Mapping | str) or (
        isinstance(encoding_json, Mapping)
        and not isinstance(encoding_json.get("configuration") or {}, Mapping)
    ):
        raise PackingError(f"{source}: invalid chunk_key_encoding {encoding_json!r}")
    try:
        encoding = ChunkKeyEncoding.from_json(encoding_json)
    except (AttributeError, TypeError, ValueError) as error:
        raise PackingError(f"{source}: {error}") from None
    return _make_grid(
        source,
        array_path=array_path,
        shape=_int_tuple(doc["shape"], "shape", source),
        chunks=_int_tuple(config["chunk_shape"], "chunk_shape", source),
        separator=encoding.separator,
        prefix="c" if encoding.kind == "default" else "",
        itemsize=_v3_itemsize(doc.get("data_type")),
    )


def _make_grid(source: str, **fields: Any) -> ChunkGrid:
    try:
        return ChunkGrid(**fields)
    except PackingError as error:
        raise PackingError(f"{source}: {error}") from None


def find_grids(files: Mapping[str, bytes]) -> list[ChunkGrid]:
    """The chunk grids of every array among ``{archive path: bytes}`` metadata files, sorted by
    array path; other names (``.zgroup``, ``.zattrs``...) and groups are skipped."""
    grids = []
    for path, data in files.items():
        directory, _, name = path.rpartition("/")
        if name not in METADATA_NAMES:
            continue
        grid = grid_from_metadata(directory, name, data)
        if grid is not None:
            grids.append(grid)
    return sorted(grids, key=lambda g: g.array_path)
