"""A minimal Zarr v3 array over a ``KeyValueStore``: ``zarr.json``, a regular chunk grid,
``default`` / ``v2`` chunk key encodings, fill values, and the codecs of
``dandizarr.sharding.codecs``.

Enough to write and read whole arrays (or rectangular regions) that zarr-python and
tensorstore read and write too. When the only codec is ``sharding_indexed``, reads and writes
go through its range-read / partial-write paths with a per-array shard index cache.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from dandizarr.sharding.array_documents import parse_document
from dandizarr.sharding.array_metadata import DATA_TYPES, ArrayMetadata, ChunkKeyEncoding
from dandizarr.sharding.codec_registry import pipeline_from_json
from dandizarr.sharding.codecs.base import ArraySpec, CodecLike, is_fill
from dandizarr.sharding.codecs.pipeline import CodecPipeline
from dandizarr.sharding.indexed.codec import ShardingCodec
from dandizarr.sharding.indexed.in_memory import WriteMode
from dandizarr.sharding.indexed.index_cache import IndexCache
from dandizarr.sharding.parallel import parallel_map
from dandizarr.sharding.regions import ChunkPart, chunk_parts
from dandizarr.sharding.store import KeyValueStore, get_bounded

__all__ = ["Array", "sharding_codec"]

_BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}

Selection = Any  # int | slice | Ellipsis | tuple of those


def sharding_codec(
    chunk_shape: Sequence[int],
    codecs: Sequence[Mapping[str, Any]] = (
        {"name": "bytes", "configuration": {"endian": "little"}},
    ),
    *,
    index_crc32c: bool = True,
    index_location: Literal["start", "end"] = "end",
) -> dict[str, Any]:
    """JSON of a ``sharding_indexed`` codec with inner ``chunk_shape`` (for ``Array.create``)."""
    index_codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if index_crc32c:
        index_codecs.append({"name": "crc32c"})
    return {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": list(chunk_shape),
            "codecs": [dict(c) for c in codecs],
            "index_codecs": index_codecs,
            "index_location": index_location,
        },
    }


# ---------------------------------------------------------------------------------------------
# Selections


def _normalize_selection(
    selection: Selection, shape: tuple[int, ...]
) -> tuple[tuple[slice, ...], tuple[int, ...]]:
    """Unit-step slices in bounds, plus the output shape (integer axes dropped)."""
    if selection is None:
        selection = ()
    if not isinstance(selection, tuple):
        selection = (selection,)
    if sum(s is Ellipsis for s in selection) > 1:
        raise IndexError("only one Ellipsis allowed")
    if Ellipsis in selection:
        i = selection.index(Ellipsis)
        fill = len(shape) - (len(selection) - 1)
        selection = (*selection[:i], *(slice(None),) * fill, *selection[i + 1 :])
    if len(selection) > len(shape):
        raise IndexError(f"too many indices for a {len(shape)}-d array")
    selection = (*selection, *(slice(None),) * (len(shape) - len(selection)))
    slices: list[slice] = []
    out_shape: list[int] = []
    for sel, size in zip(selection, shape, strict=True):
        if isinstance(sel, slice):
            start, stop, step = sel.indices(size)
            if step != 1:
                raise IndexError("only unit-step slices are supported")
            stop = max(start, stop)
            slices.append(slice(start, stop))
            out_shape.append(stop - start)
        elif isinstance(sel, int | np.integer):
            i = int(sel) + (size if sel < 0 else 0)
            if not 0 <= i < size:
                raise IndexError(f"index {sel} out of bounds for size {size}")
            slices.append(slice(i, i + 1))
        else:
            raise IndexError(f"unsupported selection {sel!r}")
    return tuple(slices), tuple(out_shape)


# ---------------------------------------------------------------------------------------------
# Array


@dataclass(eq=False)
class Array:
    store: KeyValueStore
    path: str
    metadata: ArrayMetadata
    # Runtime settings.
    write_mode: WriteMode = "rewrite"
    index_cache: IndexCache = field(default_factory=IndexCache)
    pipeline: CodecPipeline = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.path = self.path.strip("/")
        self.pipeline = pipeline_from_json(self.metadata.codecs, self.chunk_spec)
        if self.write_mode == "append":
            sharding = self.sharding
            if sharding is None or sharding.index_location != "end":
                raise ValueError("write_mode 'append' needs a sharding codec with index at the end")

    # -- creation ----------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        store: KeyValueStore,
        path: str = "",
        *,
        shape: Sequence[int],
        dtype: str | np.dtype[Any],
        chunk_shape: Sequence[int],
        codecs: Sequence[CodecLike] | None = None,
        fill_value: Any = None,
        chunk_key_encoding: ChunkKeyEncoding | Mapping[str, Any] | str = "default",
        attributes: Mapping[str, Any] | None = None,
        dimension_names: Sequence[str | None] | None = None,
        **runtime: Any,
    ) -> Array:
        """Write ``zarr.json`` (replacing any) and return the array. No chunks are written."""
        np_dtype = np.dtype(dtype)
        if str(np_dtype) not in DATA_TYPES:
            raise ValueError(f"unsupported data type {np_dtype}")
        np_dtype = DATA_TYPES[str(np_dtype)]
        if fill_value is None:
            fill_value = False if np_dtype.kind == "b" else 0
        if codecs is None:
            codecs = [{"name": "bytes", "configuration": {"endian": "little"}}]
        encoding = (
            chunk_key_encoding
            if isinstance(chunk_key_encoding, ChunkKeyEncoding)
            else ChunkKeyEncoding.from_json(chunk_key_encoding)
        )
        fill = np.asarray(fill_value, dtype=np_dtype)[()]
        spec = ArraySpec(tuple(int(c) for c in chunk_shape), np_dtype, fill)
        # Resolve once to validate and to fill in defaults (e.g. blosc typesize).
        pipeline = pipeline_from_json(codecs, spec)
        metadata = ArrayMetadata(
            shape=tuple(int(n) for n in shape),
            dtype=np_dtype,
            chunk_shape=spec.shape,
            fill_value=fill,
            codecs=pipeline.to_json(),
            chunk_key_encoding=encoding,
            attributes=dict(attributes or {}),
            dimension_names=list(dimension_names) if dimension_names is not None else None,
        )
        array = cls(store, path, metadata, **runtime)
        store.set(array._key("zarr.json"), json.dumps(metadata.to_json(), indent=2).encode())
        return array

    @classmethod
    def open(cls, store: KeyValueStore, path: str = "", **runtime: Any) -> Array:
        key = f"{path.strip('/')}/zarr.json" if path.strip("/") else "zarr.json"
        raw = store.get(key)
        if raw is None:
            raise FileNotFoundError(f"no zarr.json at {key!r}")
        # The one parser of metadata documents: bad JSON, or JSON nested past what any
        # reader takes, is a MetadataError like any other malformed metadata.
        return cls(store, path, ArrayMetadata.from_json(parse_document(raw)), **runtime)

    # -- properties --------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self.metadata.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.metadata.dtype

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return self.metadata.chunk_shape

    @property
    def fill_value(self) -> Any:
        return self.metadata.fill_value

    @property
    def chunk_spec(self) -> ArraySpec:
        return ArraySpec(self.metadata.chunk_shape, self.metadata.dtype, self.metadata.fill_value)

    @property
    def sharding(self) -> ShardingCodec | None:
        """The sharding codec when it is the whole pipeline (enables partial I/O)."""
        p = self.pipeline
        if isinstance(p.array_bytes, ShardingCodec) and not p.array_array and not p.bytes_bytes:
            return p.array_bytes
        return None

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunk_shape, strict=True))

    def _key(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name

    def chunk_key(self, coords: Sequence[int]) -> str:
        return self._key(self.metadata.chunk_key_encoding.key(coords))

    # -- reading -----------------------------------------------------------------------------

    def __getitem__(self, selection: Selection) -> np.ndarray:
        return self.read(selection)

    def read(self, selection: Selection = None) -> np.ndarray:
        slices, out_shape = _normalize_selection(selection, self.shape)
        out = np.empty(tuple(s.stop - s.start for s in slices), dtype=self.dtype)
        parts = chunk_parts(slices, self.shape, self.chunk_shape)
        parallel_map(lambda part: self._read_part(part, out[part.out_sel]), parts)
        return out.reshape(out_shape)

    def _read_part(self, part: ChunkPart, out: np.ndarray) -> None:
        key = self.chunk_key(part.coords)
        sharding = self.sharding
        if sharding is not None:
            sharding.read_region(self.store, key, part.region, out, cache=self.index_cache)
            return
        # A chunk object longer than any encoding of it is refused before it is read whole.
        data = get_bounded(self.store, key, self.pipeline.max_encoded_size())
        if data is None:
            out[...] = self.fill_value
        else:
            out[...] = self.pipeline.decode(data)[part.region]

    # -- writing -----------------------------------------------------------------------------

    def __setitem__(self, selection: Selection, value: Any) -> None:
        self.write(value, selection)

    def write(self, value: Any, selection: Selection = None) -> None:
        slices, out_shape = _normalize_selection(selection, self.shape)
        shape = tuple(s.stop - s.start for s in slices)
        value = np.asarray(value)
        if value.dtype != self.dtype:
            value = value.astype(self.dtype)
        value = np.broadcast_to(value, out_shape).reshape(shape)
        parts = chunk_parts(slices, self.shape, self.chunk_shape)
        parallel_map(lambda part: self._write_part(part, value[part.out_sel]), parts)

    def _full_chunk(self, part: ChunkPart, value: np.ndarray) -> np.ndarray:
        """The chunk's full array from a value covering its in-bounds part (edge: padded)."""
        if value.shape == self.chunk_shape:
            return value
        chunk = np.full(self.chunk_shape, self.fill_value, dtype=self.dtype)
        chunk[part.region] = value
        return chunk

    def _write_part(self, part: ChunkPart, value: np.ndarray) -> None:
        key = self.chunk_key(part.coords)
        sharding = self.sharding
        if sharding is not None:
            if part.covers:
                sharding.write_region(
                    self.store, key, self._full_chunk(part, value), cache=self.index_cache
                )
            else:
                sharding.write_region(
                    self.store,
                    key,
                    value,
                    part.region,
                    mode=self.write_mode,
                    cache=self.index_cache,
                )
            return
        if part.covers:
            chunk = self._full_chunk(part, value)
        else:
            old = self.store.get(key)
            if old is None:
                chunk = self.chunk_spec.fill_array()
            else:
                chunk = self.pipeline.decode(old).copy()
            chunk[part.region] = value
        if is_fill(chunk, self.fill_value):
            self.store.delete(key)
        else:
            self.store.set(key, self.pipeline.encode(chunk))
