"""Convert a local array (Zarr v2/v3, sharded or not, or a precomputed volume) to a sharded
Zarr v3 array or a sharded precomputed volume, one output shard at a time.

Memory stays bounded by a few shards whatever the array size: for each output shard only the
source region it covers is read (or, for a hashed precomputed shard whose chunks are scattered,
one chunk at a time), encoded, written, and dropped.

Axis convention for precomputed: a 3-d array ``[i, j, k]`` is the volume ``[x, y, z]``; a 4-d
one has its channels last; a 2-d one becomes ``[x, y, 1]``. That is the axis order tensorstore's
``neuroglancer_precomputed`` driver exposes, so ``ts[..., 0]`` equals the source array.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tqdm import tqdm

from dandizarr.sharding.array import Array, sharding_codec
from dandizarr.sharding.array_metadata import DATA_TYPES as ZARR_DATA_TYPES
from dandizarr.sharding.convert_sources import ConvertError, Source, open_source
from dandizarr.sharding.morton import compressed_morton_bits
from dandizarr.sharding.neuroglancer import ShardingError, ShardingSpec
from dandizarr.sharding.precomputed import PrecomputedVolume
from dandizarr.sharding.precomputed_info import DATA_TYPES as PRECOMPUTED_DATA_TYPES
from dandizarr.sharding.precomputed_info import PrecomputedError, make_info
from dandizarr.sharding.store import DirectoryStore

__all__ = [
    "ConvertError",
    "ConvertResult",
    "PrecomputedShardedOptions",
    "Source",
    "Zarr3ShardedOptions",
    "convert",
    "convert_to_precomputed_sharded",
    "convert_to_zarr3_sharded",
    "default_sharding_spec",
    "open_source",
]

Codec = Literal["zstd", "gzip", "blosc", "none"]
Target = Literal["zarr3-sharded", "precomputed-sharded"]
TARGETS: tuple[Target, ...] = ("zarr3-sharded", "precomputed-sharded")

# Uncompressed bytes per output shard that the defaults aim for: large enough that a shard is
# one efficient object, small enough that a few fit in memory.
TARGET_SHARD_BYTES = 64 << 20


# --- geometry helpers --------------------------------------------------------------------------


def _grid(shape: Sequence[int], block: Sequence[int]) -> tuple[int, ...]:
    return tuple(-(-s // b) for s, b in zip(shape, block, strict=True))


def _blocks(shape: Sequence[int], block: Sequence[int]) -> Iterator[tuple[slice, ...]]:
    """The regions of a block grid over ``shape`` (clipped at the edges), in C order."""
    for position in itertools.product(*(range(g) for g in _grid(shape, block))):
        yield tuple(
            slice(p * b, min((p + 1) * b, s))
            for p, b, s in zip(position, block, shape, strict=True)
        )


def _progress(total: int, enabled: bool, description: str) -> tqdm[Any]:
    return tqdm(total=total, unit="shard", desc=description, file=sys.stderr, disable=not enabled)


@dataclass(frozen=True)
class ConvertResult:
    target: Target
    shape: tuple[int, ...]
    shards_written: int
    details: dict[str, Any]


def _prepare_destination(path: Path) -> DirectoryStore:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ConvertError(f"destination {str(path)!r} exists and is not an empty directory")
    path.mkdir(parents=True, exist_ok=True)
    return DirectoryStore(path)


# --- Zarr v3 sharded ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Zarr3ShardedOptions:
    shard_shape: tuple[int, ...] | None = None
    chunk_shape: tuple[int, ...] | None = None
    codec: Codec = "zstd"
    level: int | None = None
    index_location: Literal["start", "end"] = "end"
    index_crc32c: bool = True


def _inner_codecs(codec: Codec, level: int | None, dtype: np.dtype[Any]) -> list[dict[str, Any]]:
    codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if codec == "zstd":
        codecs.append({"name": "zstd", "configuration": {"level": 3 if level is None else level}})
    elif codec == "gzip":
        codecs.append({"name": "gzip", "configuration": {"level": 5 if level is None else level}})
    elif codec == "blosc":
        codecs.append(
            {
                "name": "blosc",
                "configuration": {
                    "cname": "zstd",
                    "clevel": 5 if level is None else level,
                    "shuffle": "shuffle" if dtype.itemsize > 1 else "bitshuffle",
                    "typesize": dtype.itemsize,
                    "blocksize": 0,
                },
            }
        )
    elif codec != "none":
        raise ConvertError(f"unknown codec {codec!r} (zstd, gzip, blosc or none)")
    return codecs


def _grow_to_target(shape: Sequence[int], unit: Sequence[int], unit_bytes: int) -> tuple[int, ...]:
    """Multiples of ``unit`` doubled round-robin until ``TARGET_SHARD_BYTES`` or the array's
    extent is reached."""
    block = list(unit)
    grew = True
    while grew and math.prod(block) // math.prod(unit) * unit_bytes < TARGET_SHARD_BYTES:
        grew = False
        for d in reversed(range(len(block))):  # last axes first: contiguous in C order
            if block[d] < shape[d]:
                block[d] *= 2
                grew = True
                if math.prod(block) // math.prod(unit) * unit_bytes >= TARGET_SHARD_BYTES:
                    break
    # No point in a shard far beyond the array: round the extent up to a chunk multiple.
    return tuple(min(b, -(-s // u) * u) for b, s, u in zip(block, shape, unit, strict=True))


def zarr3_layout(
    source: Source, options: Zarr3ShardedOptions
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shard shape, inner chunk shape) from the options, with defaults from the source."""
    ndim = len(source.shape)
    for name, value in (("shard shape", options.shard_shape), ("chunk shape", options.chunk_shape)):
        if value is not None and (len(value) != ndim or any(v < 1 for v in value)):
            raise ConvertError(f"{name} {list(value)} must be {ndim} positive integers")
    chunk = options.chunk_shape
    if chunk is None:
        chunk = tuple(
            min(c, max(s, 1)) for c, s in zip(source.chunk_shape, source.shape, strict=True)
        )
    if options.shard_shape is None:
        shard = _grow_to_target(source.shape, chunk, math.prod(chunk) * source.dtype.itemsize)
    else:
        shard = options.shard_shape
    if any(s % c for s, c in zip(shard, chunk, strict=True)):
        raise ConvertError(
            f"shard shape {list(shard)} must be a multiple of the chunk shape {list(chunk)}"
        )
    return shard, chunk


def convert_to_zarr3_sharded(
    source: Source, destination: Path, options: Zarr3ShardedOptions, *, progress: bool = False
) -> ConvertResult:
    if str(source.dtype) not in ZARR_DATA_TYPES:
        raise ConvertError(f"data type {source.dtype} is not supported by the Zarr v3 writer")
    shard, chunk = zarr3_layout(source, options)
    codecs = _inner_codecs(options.codec, options.level, source.dtype)
    store = _prepare_destination(destination)
    array = Array.create(
        store,
        shape=source.shape,
        dtype=source.dtype,
        chunk_shape=shard,
        codecs=[
            sharding_codec(
                chunk,
                codecs,
                index_crc32c=options.index_crc32c,
                index_location=options.index_location,
            )
        ],
        fill_value=source.fill_value,
        attributes=getattr(source, "attributes", None),
    )
    regions = list(_blocks(source.shape, shard)) if math.prod(source.shape) else []
    written = 0
    with _progress(len(regions), progress, "zarr3 shards") as bar:
        for region in regions:
            # One shard-aligned region per write: the array encodes and stores it as one shard
            # (or nothing when all of it is fill value).
            array.write(source.read(region), region)
            written += 1
            bar.update()
    return ConvertResult(
        "zarr3-sharded",
        source.shape,
        written,
        {"shard_shape": list(shard), "chunk_shape": list(chunk), "codec": options.codec},
    )


# --- precomputed sharded -----------------------------------------------------------------------


@dataclass(frozen=True)
class PrecomputedShardedOptions:
    chunk_shape: tuple[int, int, int] | None = None
    preshift_bits: int | None = None
    minishard_bits: int | None = None
    shard_bits: int | None = None
    hash: Literal["identity", "murmurhash3_x86_128"] = "identity"
    minishard_index_encoding: Literal["raw", "gzip"] = "raw"
    data_encoding: Literal["raw", "gzip"] = "raw"
    resolution: tuple[float, float, float] = (1.0, 1.0, 1.0)


def default_sharding_spec(
    grid_shape: Sequence[int], chunk_bytes: int, options: PrecomputedShardedOptions
) -> ShardingSpec:
    """Sharding bits for a chunk grid; any bits given in ``options`` are kept.

    The Morton ids of ``2**k`` consecutive chunks form a compact block, so with identity hashing
    ``preshift_bits + minishard_bits = k`` makes every shard a block of ``2**k`` chunks (about
    ``TARGET_SHARD_BYTES``), each minishard 8 consecutive chunks (a 2x2x2 block), and
    ``shard_bits`` covers the rest of the ids.
    """
    total_bits = sum(compressed_morton_bits(grid_shape))
    per_shard = max(0, int(math.log2(max(1, TARGET_SHARD_BYTES // max(1, chunk_bytes)))))
    per_shard = min(per_shard, total_bits)
    preshift = options.preshift_bits
    if preshift is None:
        preshift = min(3, per_shard)
    minishard = options.minishard_bits
    if minishard is None:
        minishard = max(0, per_shard - preshift)
    shard = options.shard_bits
    if shard is None:
        shard = max(0, total_bits - preshift - minishard)
    try:
        return ShardingSpec(
            preshift_bits=preshift,
            minishard_bits=minishard,
            shard_bits=shard,
            hash=options.hash,
            minishard_index_encoding=options.minishard_index_encoding,
            data_encoding=options.data_encoding,
        )
    except ShardingError as error:
        raise ConvertError(str(error)) from None


def convert_to_precomputed_sharded(
    source: Source,
    destination: Path,
    options: PrecomputedShardedOptions,
    *,
    progress: bool = False,
) -> ConvertResult:
    ndim = len(source.shape)
    if not 2 <= ndim <= 4:
        raise ConvertError(f"a precomputed volume needs a 2-, 3- or 4-d array, not {ndim}-d")
    if str(source.dtype) not in PRECOMPUTED_DATA_TYPES:
        raise ConvertError(
            f"data type {source.dtype} is not supported by precomputed volumes "
            f"({', '.join(PRECOMPUTED_DATA_TYPES)})"
        )
    size = tuple(source.shape[:3]) if ndim >= 3 else (*source.shape, 1)
    channels = source.shape[3] if ndim == 4 else 1
    if options.chunk_shape is not None:
        if len(options.chunk_shape) != 3 or any(c < 1 for c in options.chunk_shape):
            raise ConvertError(
                f"chunk shape {list(options.chunk_shape)} must be 3 positive integers"
            )
        chunk = tuple(options.chunk_shape)
    else:
        chunk = tuple(min(64, s) for s in size)
    grid = _grid(size, chunk)
    chunk_bytes = math.prod(chunk) * channels * source.dtype.itemsize
    spec = default_sharding_spec(grid, chunk_bytes, options)
    try:
        info = make_info(
            size,
            source.dtype,
            chunk,
            num_channels=channels,
            sharding=spec,
            resolution=options.resolution,
        )
    except PrecomputedError as error:
        raise ConvertError(str(error)) from None
    store = _prepare_destination(destination)
    volume = PrecomputedVolume.create(store, info)
    scale = volume.scale(0)

    def read(box: Sequence[tuple[int, int]]) -> np.ndarray:
        """Source voxels of a 3-d box as ``[x, y, z, channel]``."""
        region = [slice(a, b) for a, b in box]
        if ndim == 4:
            return source.read([*region, slice(0, channels)])
        data = source.read(region[:ndim])
        return data.reshape(*(b - a for a, b in box), 1)

    groups = scale.shard_groups()
    written = 0
    with _progress(len(groups), progress, "precomputed shards") as bar:
        for positions in groups.values():
            chunks = {}
            for position, block in _shard_blocks(scale.chunk_size, size, positions, read):
                if np.any(block):  # absent chunks read as 0: skip the all-zero ones
                    chunks[position] = block
            if volume.write_shard(chunks) is not None:
                written += 1
            bar.update()
    return ConvertResult(
        "precomputed-sharded",
        source.shape,
        written,
        {"chunk_shape": list(chunk), "sharding": spec.to_json()},
    )


def _shard_blocks(
    chunk: Sequence[int],
    size: Sequence[int],
    positions: np.ndarray,
    read: Any,
) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """Each chunk of one shard with its data. The shard's chunks are read in one region when
    they fill most of their bounding box (identity hashing); otherwise one at a time (hashed
    shards scatter their chunks over the whole volume)."""
    low = positions.min(axis=0)
    high = positions.max(axis=0) + 1
    boxes = {
        tuple(p): tuple(
            (int(q) * c, min((int(q) + 1) * c, s)) for q, c, s in zip(p, chunk, size, strict=True)
        )
        for p in positions.tolist()
    }
    if math.prod((high - low).tolist()) <= 2 * len(positions):
        origin = [int(q) * c for q, c in zip(low, chunk, strict=True)]
        end = [min(int(q) * c, s) for q, c, s in zip(high, chunk, size, strict=True)]
        region = read(list(zip(origin, end, strict=True)))
        for position, box in boxes.items():
            local = tuple(slice(a - o, b - o) for (a, b), o in zip(box, origin, strict=True))
            yield position, region[local]
    else:
        for position, box in boxes.items():
            yield position, read(box)


# --- entry point -------------------------------------------------------------------------------


def convert(
    source_path: str | Path,
    destination_path: str | Path,
    target: str,
    options: Zarr3ShardedOptions | PrecomputedShardedOptions | None = None,
    *,
    progress: bool = False,
) -> ConvertResult:
    if target not in TARGETS:
        raise ConvertError(f"unknown target {target!r} (one of {', '.join(TARGETS)})")
    source = open_source(source_path)
    destination = Path(destination_path)
    if destination.resolve() == Path(source_path).resolve():
        raise ConvertError("source and destination are the same directory")
    if target == "zarr3-sharded":
        if options is None:
            options = Zarr3ShardedOptions()
        if not isinstance(options, Zarr3ShardedOptions):
            raise ConvertError("zarr3-sharded needs Zarr3ShardedOptions")
        return convert_to_zarr3_sharded(source, destination, options, progress=progress)
    if options is None:
        options = PrecomputedShardedOptions()
    if not isinstance(options, PrecomputedShardedOptions):
        raise ConvertError("precomputed-sharded needs PrecomputedShardedOptions")
    return convert_to_precomputed_sharded(source, destination, options, progress=progress)


def describe(result: ConvertResult) -> str:
    return json.dumps(
        {"target": result.target, "shape": list(result.shape), "shards": result.shards_written}
        | result.details
    )
