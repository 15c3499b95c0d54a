"""The Zarr arrays of an archive: found through its ``.checksum`` tree, described, and opened
with the sharding library's ``Array`` (Zarr v3 as it is; Zarr v2 as the v3 array it is
equivalent to: the same chunk bytes under ``v2`` chunk keys, its compressor as a codec).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dandizarr.ome import dtype_name
from dandizarr.sharding.array import Array
from dandizarr.sharding.array_metadata import (
    DATA_TYPES,
    ArrayMetadata,
    ChunkKeyEncoding,
    parse_fill_value,
)
from dandizarr.sharding.codec_registry import pipeline_from_json
from dandizarr.sharding.codecs.base import ArraySpec
from dandizarr_server.zarr_api.pages.reader import ArchiveFiles

# How far the archive page looks for arrays: directories read (pages.archive_scan), plain
# arrays listed.
MAX_DIRECTORIES = 200
MAX_ARRAYS = 24
# A preview's budget, checked from the metadata before any chunk is read (an anonymous
# request may ask for one): the chunks its plane spans, the bytes they decode to, and the
# size of a metadata document read to describe an array. Chunks decode to no more than their
# array's chunk size (dandizarr.sharding.codecs.compression), and reading stops at the deadline
# (pages.reader.ArchiveFiles).
MAX_PREVIEW_CHUNKS = 1024
MAX_PREVIEW_DECODED_BYTES = 64 << 20
MAX_METADATA_BYTES = 1 << 20

_V2_BLOSC_SHUFFLE = {-1: "shuffle", 0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


class Unsupported(ValueError):
    """The array's metadata or codecs are not ones this service reads."""


@dataclass(frozen=True)
class ArrayInfo:
    path: str  # the array's directory in the archive ("" for an archive that is one array)
    zarr_format: int
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    codecs: tuple[str, ...]  # compressor, filters or codecs, as "name(config)"
    # "sharding_indexed: inner chunks (a, b)" for a v3 sharded array.
    sharding: str | None
    # The array as v3 metadata for reading, or why it has no preview.
    metadata: ArrayMetadata | None
    preview_problem: str | None

    @property
    def metadata_name(self) -> str:
        return ".zarray" if self.zarr_format == 2 else "zarr.json"


def _codec_text(name: str, config: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{k}={v}" for k, v in config.items() if k not in ("id", "name"))
    return f"{name}({shown})" if shown else name


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(n, int) for n in value):
        raise Unsupported(f"{what} must be a list of integers, got {value!r}")
    return tuple(value)


def _v2_metadata(doc: Mapping[str, Any], shape: tuple[int, ...]) -> ArrayMetadata:
    try:
        dtype = np.dtype(doc["dtype"])
    except (TypeError, ValueError):
        raise Unsupported(f"data type {doc.get('dtype')!r} is not one this service reads") from None
    native = dtype.newbyteorder("=")
    if native.kind not in "biufc" or str(native) not in DATA_TYPES:
        raise Unsupported(f"data type {doc['dtype']!r} is not numeric")
    if doc.get("filters"):
        names = ", ".join(str(f.get("id")) for f in doc["filters"])
        raise Unsupported(f"filters ({names}) are not read by this service")
    codecs: list[dict[str, Any]] = []
    if doc.get("order", "C") == "F":
        codecs.append(
            {"name": "transpose", "configuration": {"order": list(range(len(shape)))[::-1]}}
        )
    codecs.append(
        {
            "name": "bytes",
            "configuration": {"endian": "big" if dtype.byteorder == ">" else "little"},
        }
    )
    compressor = doc.get("compressor")
    if compressor:
        kind = compressor.get("id")
        if kind == "zstd":
            codecs.append({"name": "zstd", "configuration": {"level": compressor.get("level", 0)}})
        elif kind in ("gzip", "zlib"):  # the gzip codec reads either header
            codecs.append({"name": "gzip", "configuration": {"level": compressor.get("level", 1)}})
        elif kind == "blosc":
            config = {
                "cname": compressor.get("cname", "lz4"),
                "clevel": compressor.get("clevel", 5),
                "shuffle": _V2_BLOSC_SHUFFLE.get(compressor.get("shuffle", 1), "shuffle"),
                "typesize": native.itemsize,
                "blocksize": compressor.get("blocksize", 0),
            }
            codecs.append({"name": "blosc", "configuration": config})
        else:
            raise Unsupported(f"compressor {kind!r} is not read by this service")
    fill = doc.get("fill_value")
    separator = doc.get("dimension_separator") or "."
    return ArrayMetadata(
        shape=shape,
        dtype=DATA_TYPES[str(native)],
        chunk_shape=_ints(doc["chunks"], "chunks"),
        fill_value=parse_fill_value(0 if fill is None else fill, DATA_TYPES[str(native)]),
        codecs=codecs,
        chunk_key_encoding=ChunkKeyEncoding.from_json(
            {"name": "v2", "configuration": {"separator": separator}}
        ),
    )


def _v3_codecs(doc: Mapping[str, Any]) -> tuple[tuple[str, ...], str | None]:
    names: list[str] = []
    sharding = None
    for codec in doc.get("codecs") or []:
        name, config = (codec, {}) if isinstance(codec, str) else (codec.get("name"), codec)
        config = config.get("configuration") or {}
        if name == "sharding_indexed":
            inner = [c.get("name") if isinstance(c, Mapping) else c for c in config["codecs"]]
            sharding = (
                f"sharding_indexed: inner chunks {tuple(config.get('chunk_shape', ()))}, "
                f"inner codecs {', '.join(map(str, inner))}"
            )
            names.append(str(name))
        else:
            names.append(_codec_text(str(name), config))
    return tuple(names), sharding


def describe(path: str, name: str, raw: bytes) -> ArrayInfo | None:
    """The array whose metadata file ``path/name`` holds ``raw``; None for a group."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    if name == "zarr.json" and doc.get("node_type") != "array":
        return None
    try:
        shape = _ints(doc.get("shape"), "shape")
        if name == ".zarray":
            chunks = _ints(doc.get("chunks"), "chunks")
            dtype = dtype_name(2, doc.get("dtype"))
            compressor = doc.get("compressor")
            codecs = tuple(
                _codec_text(str(c.get("id")), c)
                for c in [*(doc.get("filters") or []), compressor]
                if c
            )
            sharding = None
        else:
            grid = doc.get("chunk_grid") or {}
            chunks = _ints((grid.get("configuration") or {}).get("chunk_shape"), "chunk_shape")
            dtype = dtype_name(3, doc.get("data_type"))
            codecs, sharding = _v3_codecs(doc)
    except (Unsupported, AttributeError, KeyError, TypeError) as error:
        return ArrayInfo(
            path, 2 if name == ".zarray" else 3, (), (), "?", (), None, None, str(error)
        )
    metadata, problem = None, None
    try:
        metadata = _v2_metadata(doc, shape) if name == ".zarray" else ArrayMetadata.from_json(doc)
        spec = ArraySpec(metadata.chunk_shape, metadata.dtype, metadata.fill_value)
        pipeline_from_json(metadata.codecs, spec)
        problem = _plane_problem(metadata)
    except (Unsupported, ValueError, KeyError, TypeError) as error:
        problem = str(error) or type(error).__name__
    return ArrayInfo(
        path, 2 if name == ".zarray" else 3, shape, chunks, dtype, codecs, sharding,
        metadata if problem is None else None, problem,
    )  # fmt: skip


def _read_chunk_shape(metadata: ArrayMetadata) -> tuple[int, ...]:
    """The chunks a plane read decodes: a sharded array's inner chunks, else its chunks."""
    shape = metadata.chunk_shape
    for codec in metadata.codecs:
        if isinstance(codec, Mapping) and codec.get("name") == "sharding_indexed":
            inner = (codec.get("configuration") or {}).get("chunk_shape")
            if isinstance(inner, list) and len(inner) == len(shape):
                shape = tuple(int(n) for n in inner)
    return shape


def plane_read_cost(metadata: ArrayMetadata) -> tuple[int, int]:
    """(chunks, decoded bytes) a read of the middle plane costs, from the metadata alone."""
    chunk = _read_chunk_shape(metadata)
    chunks = math.prod(
        -(-n // max(c, 1)) for n, c in zip(metadata.shape[-2:], chunk[-2:], strict=True)
    )
    return chunks, chunks * math.prod(chunk) * metadata.dtype.itemsize


def _plane_problem(metadata: ArrayMetadata) -> str | None:
    if len(metadata.shape) < 2:
        return f"a {len(metadata.shape)}-D array has no plane to draw"
    if metadata.dtype.kind not in "biufc":
        return f"data type {metadata.dtype} is not numeric"
    if 0 in metadata.shape:
        return "the array is empty"
    chunks, decoded = plane_read_cost(metadata)
    if chunks > MAX_PREVIEW_CHUNKS:
        return f"its middle plane spans {chunks} chunks, more than a preview reads"
    if decoded > MAX_PREVIEW_DECODED_BYTES:
        return f"its middle plane's chunks hold {decoded >> 20} MiB, more than a preview reads"
    return None


def plane_selection(shape: Sequence[int]) -> tuple[int | slice, ...]:
    """The middle plane of the last two dimensions."""
    return (*(n // 2 for n in shape[:-2]), slice(None), slice(None))


def read_plane(files: ArchiveFiles, info: ArrayInfo) -> np.ndarray:
    """The middle plane of ``info``'s array, reading only the chunks that intersect it."""
    if info.metadata is None:
        raise Unsupported(info.preview_problem or "no preview")
    return read_selection(files, info, plane_selection(info.metadata.shape))


def read_selection(
    files: ArchiveFiles, info: ArrayInfo, selection: tuple[int | slice, ...]
) -> np.ndarray:
    """``info``'s array at ``selection`` (an index or all of each dimension), reading only the
    chunks that intersect it."""
    if info.metadata is None:
        raise Unsupported(info.preview_problem or "no preview")
    array = Array(files, info.path, info.metadata)
    per_dim = [
        [s // c] if isinstance(s, int) else range(g)
        for s, c, g in zip(selection, array.chunk_shape, array.grid_shape, strict=True)
    ]
    grid = np.stack(np.meshgrid(*per_dim, indexing="ij"), -1).reshape(-1, len(per_dim))
    files.prefetch(array.chunk_key(tuple(coords)) for coords in grid.tolist())
    return array.read(selection)
