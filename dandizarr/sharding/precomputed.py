"""Neuroglancer precomputed volumes: reading and writing raw chunks, sharded or not.

Arrays here are indexed ``[x, y, z, channel]`` like tensorstore's ``neuroglancer_precomputed``
driver, with coordinates relative to the scale's ``voxel_offset``. A raw chunk is its voxels in
Fortran order over ``(x, y, z, channel)``, little-endian, clipped to the volume at the upper
edges. In a sharded scale a chunk's id is its compressed Morton code over the chunk grid.

This module owns the chunk I/O (``PrecomputedVolume``, the raw chunk encoding); the ``info``
metadata and the chunk grid are ``dandizarr.sharding.precomputed_info``, whose public names it
re-exports.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dandizarr.sharding.neuroglancer import ShardingError, encode_shard
from dandizarr.sharding.neuroglancer_reader import ShardedReader
from dandizarr.sharding.precomputed_info import (
    Box,
    PrecomputedError,
    Scale,
    VolumeInfo,
    iter_chunk_positions,
    make_info,
    with_sharding,
)
from dandizarr.sharding.store import KeyValueStore


def encode_raw_chunk(array: np.ndarray, dtype: np.dtype[Any]) -> bytes:
    """``[x, y, z, channel]`` voxels as a raw chunk (Fortran order, little-endian)."""
    return np.asarray(array, dtype=dtype).tobytes(order="F")


def decode_raw_chunk(
    data: bytes, shape: Sequence[int], dtype: np.dtype[Any], full_shape: Sequence[int]
) -> np.ndarray:
    """A raw chunk as ``[x, y, z, channel]``; accepts the clipped or the full chunk shape."""
    for candidate in (tuple(shape), tuple(full_shape)):
        if len(data) == math.prod(candidate) * dtype.itemsize:
            array = np.frombuffer(data, dtype=dtype).reshape(candidate, order="F")
            return array[tuple(slice(0, s) for s in shape)]
    raise PrecomputedError(
        f"raw chunk of {len(data)} bytes does not match shape {tuple(shape)} of {dtype}"
    )


@dataclass
class PrecomputedVolume:
    """A precomputed volume under ``prefix`` in a KeyValueStore (``prefix`` ends with ``/``
    or is empty)."""

    store: KeyValueStore
    info: VolumeInfo
    prefix: str = ""
    _readers: dict[str, ShardedReader] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def open(cls, store: KeyValueStore, prefix: str = "") -> PrecomputedVolume:
        raw = store.get(prefix + "info")
        if raw is None:
            raise PrecomputedError(f"no precomputed volume at {prefix!r}: 'info' is missing")
        try:
            config = json.loads(raw)
        except ValueError as error:
            raise PrecomputedError(f"info is not JSON: {error}") from error
        return cls(store, VolumeInfo.from_json(config), prefix)

    @classmethod
    def create(cls, store: KeyValueStore, info: VolumeInfo, prefix: str = "") -> PrecomputedVolume:
        store.set(prefix + "info", json.dumps(info.to_json(), indent=1).encode())
        return cls(store, info, prefix)

    def scale(self, scale: int | str = 0) -> Scale:
        if isinstance(scale, int):
            return self.info.scales[scale]
        for candidate in self.info.scales:
            if candidate.key == scale:
                return candidate
        raise KeyError(scale)

    def _check_encoding(self, scale: Scale) -> None:
        if scale.encoding != "raw":
            raise PrecomputedError(f"encoding {scale.encoding!r} is not supported (only 'raw')")

    def _reader(self, scale: Scale) -> ShardedReader:
        assert scale.sharding is not None
        reader = self._readers.get(scale.key)
        if reader is None or reader.spec != scale.sharding:
            reader = ShardedReader(self.store, scale.sharding, f"{self.prefix}{scale.key}/")
            self._readers[scale.key] = reader
        return reader

    def _chunk_shape(self, scale: Scale, box: Box) -> tuple[int, ...]:
        return (*(b - a for a, b in box), self.info.num_channels)

    def read_chunk(self, position: Sequence[int], scale: int | str = 0) -> np.ndarray | None:
        """One chunk ``[x, y, z, channel]`` (clipped to the volume), or None when absent."""
        s = self.scale(scale)
        self._check_encoding(s)
        if s.sharding is not None:
            data = self._reader(s).get(s.chunk_id(position))
        else:
            data = self.store.get(f"{self.prefix}{s.key}/{s.unsharded_chunk_name(position)}")
        if data is None:
            return None
        box = s.chunk_box(position)
        try:
            return decode_raw_chunk(
                data,
                self._chunk_shape(s, box),
                self.info.dtype,
                (*s.chunk_size, self.info.num_channels),
            )
        except PrecomputedError as error:
            raise PrecomputedError(f"chunk {tuple(position)} of scale {s.key!r}: {error}") from None

    def read(self, box: Box | None = None, scale: int | str = 0) -> np.ndarray:
        """Voxels of ``box`` (0-based, relative to ``voxel_offset``); absent chunks read as 0."""
        s = self.scale(scale)
        if box is None:
            box = tuple((0, n) for n in s.size)
        for (a, b), n in zip(box, s.size, strict=True):
            if not 0 <= a <= b <= n:
                raise ValueError(f"region {box} is outside the volume {s.size}")
        out = np.zeros(self._chunk_shape(s, box), dtype=self.info.dtype)
        if any(a == b for a, b in box):
            return out
        for position in s.chunks_in(box):
            chunk = self.read_chunk(position, scale)
            if chunk is None:
                continue
            cbox = s.chunk_box(position)
            src, dst = [], []
            for (a, b), (ca, cb) in zip(box, cbox, strict=True):
                lo, hi = max(a, ca), min(b, cb)
                src.append(slice(lo - ca, hi - ca))
                dst.append(slice(lo - a, hi - a))
            out[tuple(dst)] = chunk[tuple(src)]
        return out

    def encode_chunk(self, position: Sequence[int], array: np.ndarray, scale: Scale) -> bytes:
        expected = self._chunk_shape(scale, scale.chunk_box(position))
        array = np.asarray(array)
        if array.ndim == 3:
            array = array[..., np.newaxis]
        if array.shape != expected:
            raise ValueError(f"chunk {tuple(position)} must have shape {expected}: {array.shape}")
        return encode_raw_chunk(array, self.info.dtype)

    def write_chunk(self, position: Sequence[int], array: np.ndarray, scale: int | str = 0) -> None:
        """Write one chunk of an unsharded scale."""
        s = self.scale(scale)
        self._check_encoding(s)
        if s.sharding is not None:
            raise PrecomputedError("write whole shards of a sharded scale with write_shard")
        key = f"{self.prefix}{s.key}/{s.unsharded_chunk_name(position)}"
        self.store.set(key, self.encode_chunk(position, array, s))

    def write_shard(
        self, chunks: Mapping[tuple[int, ...], np.ndarray], scale: int | str = 0
    ) -> str | None:
        """Write (replace) one shard of a sharded scale from its chunks, all of that shard,
        given by grid position. Returns the shard key, None if ``chunks`` is empty."""
        s = self.scale(scale)
        self._check_encoding(s)
        if s.sharding is None:
            raise PrecomputedError(f"scale {s.key!r} is not sharded")
        if not chunks:
            return None
        encoded = {
            s.chunk_id(position): self.encode_chunk(position, array, s)
            for position, array in chunks.items()
        }
        try:
            data = encode_shard(s.sharding, encoded)
        except ValueError as error:
            raise ValueError(f"chunks do not belong to one shard: {error}") from None
        shard = s.sharding.locate(next(iter(encoded))).shard
        key = f"{self.prefix}{s.key}/{s.sharding.shard_name(shard)}"
        self.store.set(key, data)
        return key


__all__ = [
    "PrecomputedError",
    "PrecomputedVolume",
    "Scale",
    "ShardingError",
    "VolumeInfo",
    "decode_raw_chunk",
    "encode_raw_chunk",
    "iter_chunk_positions",
    "make_info",
    "with_sharding",
]
