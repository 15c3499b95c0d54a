"""Neuroglancer precomputed metadata: the ``info`` JSON, its scales and their chunk grid.

``VolumeInfo`` and ``Scale`` read and write the ``info`` JSON (validating it) and answer the
grid questions of a scale: a chunk's voxel box and name, its compressed Morton id, its shard,
every shard's chunks. No I/O: ``dandizarr.sharding.precomputed`` reads and writes the volume.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dandizarr.sharding.morton import morton_codes
from dandizarr.sharding.neuroglancer import (
    ShardingSpec,
    compressed_morton_code,
    murmurhash3_x86_128_low64,
)

VOLUME_TYPE = "neuroglancer_multiscale_volume"
DATA_TYPES = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "float32")

Box = tuple[tuple[int, int], ...]  # per dimension [start, stop)


class PrecomputedError(ValueError):
    """Invalid ``info`` metadata or chunk data."""


def _int_triple(value: Any, what: str, minimum: int | None = None) -> tuple[int, int, int]:
    if (
        not isinstance(value, list | tuple)
        or len(value) != 3
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        or (minimum is not None and any(v < minimum for v in value))
    ):
        bound = "" if minimum is None else f" >= {minimum}"
        raise PrecomputedError(f"{what} must be 3 integers{bound}, got {value!r}")
    return (value[0], value[1], value[2])


@dataclass(frozen=True)
class Scale:
    key: str
    size: tuple[int, int, int]
    chunk_size: tuple[int, int, int]
    resolution: tuple[float, float, float] = (1.0, 1.0, 1.0)
    voxel_offset: tuple[int, int, int] = (0, 0, 0)
    encoding: str = "raw"
    sharding: ShardingSpec | None = None

    @classmethod
    def from_json(cls, config: Any) -> Scale:
        if not isinstance(config, Mapping):
            raise PrecomputedError(f"a scale must be a JSON object, got {config!r}")
        key = config.get("key")
        if not isinstance(key, str) or not key:
            raise PrecomputedError(f"scale 'key' must be a non-empty string, got {key!r}")
        chunk_sizes = config.get("chunk_sizes")
        if not isinstance(chunk_sizes, list) or not chunk_sizes:
            raise PrecomputedError(f"scale {key!r}: 'chunk_sizes' must be a non-empty list")
        resolution = config.get("resolution", [1, 1, 1])
        if not (
            isinstance(resolution, list)
            and len(resolution) == 3
            and all(isinstance(r, int | float) for r in resolution)
        ):
            raise PrecomputedError(f"scale {key!r}: bad 'resolution' {resolution!r}")
        encoding = config.get("encoding")
        if not isinstance(encoding, str):
            raise PrecomputedError(f"scale {key!r}: 'encoding' must be a string")
        sharding = config.get("sharding")
        return cls(
            key=key,
            size=_int_triple(config.get("size"), f"scale {key!r} 'size'", 1),
            # Several chunk sizes are allowed; the first is the storage layout we use.
            chunk_size=_int_triple(chunk_sizes[0], f"scale {key!r} 'chunk_sizes'", 1),
            resolution=(float(resolution[0]), float(resolution[1]), float(resolution[2])),
            voxel_offset=_int_triple(config.get("voxel_offset", [0, 0, 0]), "'voxel_offset'"),
            encoding=encoding,
            sharding=None if sharding is None else ShardingSpec.from_json(sharding),
        )

    def to_json(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "key": self.key,
            "size": list(self.size),
            "voxel_offset": list(self.voxel_offset),
            "resolution": list(self.resolution),
            "chunk_sizes": [list(self.chunk_size)],
            "encoding": self.encoding,
        }
        if self.sharding is not None:
            config["sharding"] = self.sharding.to_json()
        return config

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(-(-s // c) for s, c in zip(self.size, self.chunk_size, strict=True))

    def chunk_box(self, position: Sequence[int]) -> Box:
        """The voxels ``[start, stop)`` per dimension of a chunk, clipped to the volume."""
        return tuple(
            (p * c, min((p + 1) * c, s))
            for p, c, s in zip(position, self.chunk_size, self.size, strict=True)
        )

    def chunk_id(self, position: Sequence[int]) -> int:
        return compressed_morton_code(position, self.grid_shape)

    def unsharded_chunk_name(self, position: Sequence[int]) -> str:
        """``x0-x1_y0-y1_z0-z1`` in absolute voxel coordinates."""
        box = self.chunk_box(position)
        return "_".join(
            f"{o + a}-{o + b}" for o, (a, b) in zip(self.voxel_offset, box, strict=True)
        )

    def chunks_in(self, box: Box) -> Iterator[tuple[int, ...]]:
        """Grid positions of the chunks intersecting ``box``, in C order."""
        ranges = [range(a // c, -(-b // c)) for (a, b), c in zip(box, self.chunk_size, strict=True)]
        return itertools.product(*ranges)

    def shard_of(self, position: Sequence[int]) -> int:
        if self.sharding is None:
            raise PrecomputedError(f"scale {self.key!r} is not sharded")
        return self.sharding.locate(self.chunk_id(position)).shard

    def shard_groups(self) -> dict[int, np.ndarray]:
        """Shard number -> grid positions (an ``[n, 3]`` array) of every chunk of the scale.

        Vectorized: the codes of all chunks are computed at once, so a million-chunk grid
        takes a fraction of a second (murmur hashing one id at a time is the slow part).
        """
        if self.sharding is None:
            raise PrecomputedError(f"scale {self.key!r} is not sharded")
        positions = np.indices(self.grid_shape, dtype=np.uint64).reshape(3, -1).T
        codes = morton_codes(positions, self.grid_shape)
        spec = self.sharding
        # numpy leaves a shift by 64 undefined; the ids are all 0 then.
        shifted = codes >> np.uint64(spec.preshift_bits) if spec.preshift_bits < 64 else codes * 0
        if spec.hash == "identity":
            hashed = shifted
        else:
            hashed = np.array(
                [murmurhash3_x86_128_low64(int(v)) for v in shifted.tolist()], dtype=np.uint64
            )
        shards = (hashed >> np.uint64(spec.minishard_bits)) & np.uint64((1 << spec.shard_bits) - 1)
        order = np.argsort(shards, kind="stable")
        shards, positions = shards[order], positions[order]
        boundaries = np.flatnonzero(np.diff(shards)) + 1
        return {
            int(group_shards[0]): group_positions.astype(np.int64)
            for group_shards, group_positions in zip(
                np.split(shards, boundaries), np.split(positions, boundaries), strict=True
            )
            if len(group_shards)
        }


@dataclass(frozen=True)
class VolumeInfo:
    data_type: str
    num_channels: int
    scales: tuple[Scale, ...]
    type: str = "image"
    extra: Mapping[str, Any] = field(default_factory=dict)  # other keys, kept on rewrite

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(self.data_type).newbyteorder("<")

    @classmethod
    def from_json(cls, config: Any) -> VolumeInfo:
        if not isinstance(config, Mapping):
            raise PrecomputedError("info must be a JSON object")
        if config.get("@type", VOLUME_TYPE) != VOLUME_TYPE:
            raise PrecomputedError(f"info '@type' must be {VOLUME_TYPE!r}")
        data_type = config.get("data_type")
        if data_type not in DATA_TYPES:
            raise PrecomputedError(f"info 'data_type' must be one of {DATA_TYPES}")
        channels = config.get("num_channels")
        if not isinstance(channels, int) or isinstance(channels, bool) or channels < 1:
            raise PrecomputedError(f"info 'num_channels' must be a positive integer: {channels!r}")
        scales = config.get("scales")
        if not isinstance(scales, list) or not scales:
            raise PrecomputedError("info 'scales' must be a non-empty list")
        known = {"@type", "data_type", "num_channels", "scales", "type"}
        return cls(
            data_type=data_type,
            num_channels=channels,
            scales=tuple(Scale.from_json(s) for s in scales),
            type=str(config.get("type", "image")),
            extra={k: v for k, v in config.items() if k not in known},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "@type": VOLUME_TYPE,
            "type": self.type,
            "data_type": self.data_type,
            "num_channels": self.num_channels,
            "scales": [s.to_json() for s in self.scales],
            **self.extra,
        }


def make_info(
    shape: Sequence[int],
    dtype: Any,
    chunk_size: Sequence[int],
    *,
    num_channels: int = 1,
    sharding: ShardingSpec | None = None,
    resolution: Sequence[float] = (1.0, 1.0, 1.0),
    voxel_offset: Sequence[int] = (0, 0, 0),
    key: str | None = None,
    type: str = "image",
) -> VolumeInfo:
    """A single-scale raw volume description."""
    data_type = np.dtype(dtype).name
    if data_type not in DATA_TYPES:
        raise PrecomputedError(f"data type {data_type} is not supported by precomputed volumes")
    r = tuple(float(v) for v in resolution)
    scale = Scale(
        key=key or "_".join(f"{v:g}" for v in r),
        size=_int_triple(list(shape), "size", 1),
        chunk_size=_int_triple(list(chunk_size), "chunk size", 1),
        resolution=(r[0], r[1], r[2]),
        voxel_offset=_int_triple(list(voxel_offset), "voxel offset"),
        sharding=sharding,
    )
    return VolumeInfo(data_type=data_type, num_channels=num_channels, scales=(scale,), type=type)


def with_sharding(info: VolumeInfo, sharding: ShardingSpec | None, scale: int = 0) -> VolumeInfo:
    scales = list(info.scales)
    scales[scale] = replace(scales[scale], sharding=sharding)
    return replace(info, scales=tuple(scales))


def iter_chunk_positions(grid_shape: Iterable[int]) -> Iterator[tuple[int, ...]]:
    return itertools.product(*(range(g) for g in grid_shape))
