"""A minimal Zarr v3 array over a ``KeyValueStore``: ``zarr.json``, a regular chunk grid,
``default`` / ``v2`` chunk key encodings, fill values, and the codecs of ``sharding.codecs``.

Enough to write and read whole arrays (or rectangular regions) that zarr-python and
tensorstore read and write too. When the only codec is ``sharding_indexed``, reads and writes
go through its range-read / partial-write paths with a per-array shard index cache.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from sharding.codecs import ArraySpec, CodecLike, CodecPipeline, is_fill, parallel_map
from sharding.indexed import IndexCache, ShardingCodec, WriteMode
from sharding.store import KeyValueStore

__all__ = [
    "DATA_TYPES",
    "Array",
    "ArrayMetadata",
    "ChunkKeyEncoding",
    "sharding_codec",
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
# Metadata


@dataclass(frozen=True)
class ChunkKeyEncoding:
    kind: Literal["default", "v2"] = "default"
    separator: Literal["/", "."] = "/"

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | str) -> ChunkKeyEncoding:
        if isinstance(value, str):
            value = {"name": value}
        name = value.get("name")
        config = value.get("configuration") or {}
        if name not in ("default", "v2"):
            raise ValueError(f"unsupported chunk_key_encoding {name!r}")
        separator = config.get("separator", "/" if name == "default" else ".")
        if separator not in ("/", "."):
            raise ValueError(f"invalid chunk key separator {separator!r}")
        return cls(name, separator)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.kind, "configuration": {"separator": self.separator}}

    def key(self, coords: Sequence[int]) -> str:
        if self.kind == "default":
            return self.separator.join(["c", *(str(int(c)) for c in coords)])
        return self.separator.join(str(int(c)) for c in coords) if coords else "0"


def _parse_float(value: Any, dtype: np.dtype[Any]) -> float:
    if isinstance(value, str):
        special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
        if value in special:
            return special[value]
        if value.startswith("0x"):
            raw = bytes.fromhex(value[2:])
            return float(np.frombuffer(raw, dtype=dtype.newbyteorder(">"))[0])
        raise ValueError(f"invalid float fill_value {value!r}")
    return float(value)


def parse_fill_value(value: Any, dtype: np.dtype[Any]) -> Any:
    """The fill value from JSON as a numpy scalar of ``dtype``."""
    if value is None:
        raise ValueError("fill_value is required in Zarr v3 metadata")
    if dtype.kind == "b":
        if not isinstance(value, bool):
            raise ValueError(f"invalid bool fill_value {value!r}")
        return np.bool_(value)
    if dtype.kind in "iu":
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise ValueError(f"invalid integer fill_value {value!r}")
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise ValueError(f"fill_value {value} out of range for {dtype}")
        return dtype.type(int(value))
    if dtype.kind == "f":
        return dtype.type(_parse_float(value, dtype))
    if dtype.kind == "c":
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise ValueError(f"invalid complex fill_value {value!r}")
        part = np.dtype(f"f{dtype.itemsize // 2}")
        return dtype.type(complex(_parse_float(value[0], part), _parse_float(value[1], part)))
    raise ValueError(f"unsupported data type {dtype}")


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
        if len(self.chunk_shape) != len(self.shape):
            raise ValueError(f"chunk shape {self.chunk_shape} does not match shape {self.shape}")
        if any(c <= 0 for c in self.chunk_shape) or any(s < 0 for s in self.shape):
            raise ValueError("chunk sizes must be positive and the shape non-negative")

    @property
    def data_type(self) -> str:
        return str(self.dtype)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ArrayMetadata:
        if doc.get("zarr_format") != 3 or doc.get("node_type") != "array":
            raise ValueError("not a Zarr v3 array (zarr_format 3, node_type array)")
        data_type = doc["data_type"]
        if not isinstance(data_type, str) or data_type not in DATA_TYPES:
            raise ValueError(f"unsupported data_type {data_type!r}")
        dtype = DATA_TYPES[data_type]
        grid = doc["chunk_grid"]
        if grid.get("name") != "regular":
            raise ValueError(f"unsupported chunk grid {grid.get('name')!r}")
        if doc.get("storage_transformers"):
            raise ValueError("storage transformers are not supported here")
        for name, value in doc.items():
            optional = isinstance(value, Mapping) and value.get("must_understand") is False
            if name not in _KNOWN_FIELDS and not optional:
                raise ValueError(f"unsupported metadata field {name!r}")
        return cls(
            shape=tuple(int(n) for n in doc["shape"]),
            dtype=dtype,
            chunk_shape=tuple(int(n) for n in grid["configuration"]["chunk_shape"]),
            fill_value=parse_fill_value(doc.get("fill_value"), dtype),
            codecs=[dict(c) if isinstance(c, Mapping) else {"name": c} for c in doc["codecs"]],
            chunk_key_encoding=ChunkKeyEncoding.from_json(
                doc.get("chunk_key_encoding") or {"name": "default"}
            ),
            attributes=dict(doc.get("attributes") or {}),
            dimension_names=doc.get("dimension_names"),
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


@dataclass(frozen=True, slots=True)
class _ChunkPart:
    coords: tuple[int, ...]
    region: tuple[slice, ...]  # inside the chunk
    out_sel: tuple[slice, ...]  # inside the selection
    covers: bool  # region covers the chunk's whole in-bounds part


def _chunk_parts(
    slices: tuple[slice, ...], shape: tuple[int, ...], chunk_shape: tuple[int, ...]
) -> list[_ChunkPart]:
    per_dim = []
    for sel, size, c in zip(slices, shape, chunk_shape, strict=True):
        items = []
        if sel.stop > sel.start:
            for i in range(sel.start // c, (sel.stop - 1) // c + 1):
                lo, hi = max(sel.start - i * c, 0), min(sel.stop - i * c, c)
                in_bounds = min(c, size - i * c)
                out = slice(i * c + lo - sel.start, i * c + hi - sel.start)
                items.append((i, slice(lo, hi), out, lo == 0 and hi >= in_bounds))
        per_dim.append(items)
    return [
        _ChunkPart(
            tuple(d[0] for d in combo),
            tuple(d[1] for d in combo),
            tuple(d[2] for d in combo),
            all(d[3] for d in combo),
        )
        for combo in itertools.product(*per_dim)
    ]


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
        self.pipeline = CodecPipeline.from_json(self.metadata.codecs, self.chunk_spec)
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
        pipeline = CodecPipeline.from_json(codecs, spec)
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
        return cls(store, path, ArrayMetadata.from_json(json.loads(raw)), **runtime)

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
        parts = _chunk_parts(slices, self.shape, self.chunk_shape)
        parallel_map(lambda part: self._read_part(part, out[part.out_sel]), parts)
        return out.reshape(out_shape)

    def _read_part(self, part: _ChunkPart, out: np.ndarray) -> None:
        key = self.chunk_key(part.coords)
        sharding = self.sharding
        if sharding is not None:
            sharding.read_region(self.store, key, part.region, out, cache=self.index_cache)
            return
        data = self.store.get(key)
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
        parts = _chunk_parts(slices, self.shape, self.chunk_shape)
        parallel_map(lambda part: self._write_part(part, value[part.out_sel]), parts)

    def _full_chunk(self, part: _ChunkPart, value: np.ndarray) -> np.ndarray:
        """The chunk's full array from a value covering its in-bounds part (edge: padded)."""
        if value.shape == self.chunk_shape:
            return value
        chunk = np.full(self.chunk_shape, self.fill_value, dtype=self.dtype)
        chunk[part.region] = value
        return chunk

    def _write_part(self, part: _ChunkPart, value: np.ndarray) -> None:
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
