"""Which archive paths are an array's chunk files: chunk grids from Zarr v2 / v3 metadata."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from dandizarr.sharding.array_documents import (
    ARRAY_V2,
    ARRAY_V3,
    ArrayDocument,
    MetadataError,
    parse_document,
)
from dandizarr.sharding.array_metadata import CANONICAL_INT, ChunkKeyEncoding
from dandizarr.zarr_names import ATTRIBUTES_V2, CONSOLIDATED_V2, GROUP_V2

__all__ = [
    "METADATA_NAMES",
    "ChunkGrid",
    "PackingError",
    "find_grids",
    "grid_from_metadata",
    "is_plain_int",
]

METADATA_NAMES = (ARRAY_V2, ARRAY_V3)


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


def grid_from_metadata(array_path: str, metadata_name: str, data: bytes) -> ChunkGrid | None:
    """The chunk grid an array's ``.zarray`` / ``zarr.json`` declares; None for a group."""
    source = f"{array_path}/{metadata_name}" if array_path else metadata_name
    if metadata_name in (GROUP_V2, ATTRIBUTES_V2, CONSOLIDATED_V2):
        return None
    if metadata_name not in METADATA_NAMES:
        raise PackingError(f"{source}: not a Zarr metadata file name")
    try:
        array = ArrayDocument.from_json(metadata_name, parse_document(data))
    except MetadataError as error:
        raise PackingError(f"{source}: {error}") from None
    if array is None:
        return None
    try:
        return ChunkGrid(
            array_path=array_path,
            shape=array.shape,
            chunks=array.chunks,
            separator=array.encoding.separator,
            prefix="c" if array.encoding.kind == "default" else "",
            itemsize=array.itemsize,
        )
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
