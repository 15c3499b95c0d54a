"""Reading chunks of a sharded precomputed scale through a ``KeyValueStore``, with cached
minishard indexes whose reads are conditioned on the shard's version."""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from dandizarr.sharding.neuroglancer import (
    ShardingError,
    ShardingSpec,
    check_minishard_range,
    decode_minishard_index,
    decode_payload,
    decode_shard,
)
from dandizarr.sharding.store import KeyValueStore, VersionMismatch

__all__ = ["ShardedReader"]


@dataclass
class _CachedMinishard:
    version: str
    entries: dict[int, tuple[int, int]]  # chunk id -> absolute [start, end)


@dataclass
class ShardedReader:
    """Reads chunks of one sharded precomputed scale from a KeyValueStore.

    Minishard indexes are cached per ``(shard key, minishard)`` together with the shard's
    version; every later read is conditioned on that version and a mismatch drops the shard's
    cached indexes and retries from the shard index.
    """

    store: KeyValueStore
    spec: ShardingSpec
    prefix: str = ""
    cache_size: int = 1024
    _cache: OrderedDict[tuple[str, int], _CachedMinishard] = field(
        default_factory=OrderedDict, init=False, repr=False
    )

    def shard_key(self, chunk_id: int) -> str:
        return self.prefix + self.spec.shard_name(self.spec.locate(chunk_id).shard)

    def get(self, chunk_id: int) -> bytes | None:
        """The decoded data of one chunk, or None when absent."""
        location = self.spec.locate(chunk_id)
        key = self.prefix + self.spec.shard_name(location.shard)
        for _attempt in range(8):
            try:
                return self._get(key, location.minishard, chunk_id)
            except VersionMismatch:
                self._drop(key)
        raise ShardingError(f"shard {key} kept changing while being read")

    def get_many(self, chunk_ids: Iterable[int]) -> dict[int, bytes]:
        """The present chunks among ``chunk_ids``."""
        found = {}
        for chunk_id in chunk_ids:
            data = self.get(chunk_id)
            if data is not None:
                found[chunk_id] = data
        return found

    def _drop(self, key: str) -> None:
        for cache_key in [k for k in self._cache if k[0] == key]:
            del self._cache[cache_key]

    def _get(self, key: str, minishard: int, chunk_id: int) -> bytes | None:
        cached = self._cache.get((key, minishard))
        fresh = cached is None
        if cached is None:
            cached = self._load_minishard(key, minishard)
            if cached is None:
                return None
        else:
            self._cache.move_to_end((key, minishard))
        span = cached.entries.get(chunk_id)
        if span is None:
            # Absent from a cached index: confirm the shard has not changed since (one request).
            if not fresh and self.store.get_range(key, 0, 1, if_version=cached.version) is None:
                self._drop(key)
            return None
        start, end = span
        read = self.store.get_range(key, start, end, if_version=cached.version)
        if read is None:
            self._drop(key)
            return None
        if len(read.data) != end - start:
            raise ShardingError(f"chunk {chunk_id} range [{start}, {end}) is past the end of {key}")
        return decode_payload(read.data, self.spec.data_encoding, "chunk data")

    def _load_minishard(self, key: str, minishard: int) -> _CachedMinishard | None:
        index_size = self.spec.shard_index_size
        read = self.store.get_range(key, 16 * minishard, 16 * minishard + 16)
        if read is None:
            return None
        if len(read.data) != 16:
            raise ShardingError(f"shard index of {key} is truncated")
        version = read.version
        if version is None:
            raise ShardingError(f"the store gives no version for {key}; cannot validate reads")
        for (other_key, _m), other in list(self._cache.items()):
            if other_key == key and other.version != version:
                self._drop(key)
                break
        relative_start, relative_end = struct.unpack("<QQ", read.data)
        start, end = check_minishard_range(relative_start, relative_end, index_size, None)
        entries: dict[int, tuple[int, int]] = {}
        if start != end:
            index = self.store.get_range(key, start, end, if_version=version)
            if index is None:
                raise VersionMismatch(key)
            if len(index.data) != end - start:
                raise ShardingError(
                    f"minishard index range [{start}, {end}) is past the end of {key}"
                )
            decoded = decode_payload(
                index.data, self.spec.minishard_index_encoding, "minishard index"
            )
            for entry in decode_minishard_index(decoded, index_size):
                entries[entry.chunk_id] = (entry.start, entry.end)
        cached = _CachedMinishard(version, entries)
        self._cache[(key, minishard)] = cached
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return cached

    def iter_shard_chunks(self, shard: int) -> Iterator[tuple[int, bytes]]:
        """Every chunk of one shard (one whole-object read)."""
        data = self.store.get(self.prefix + self.spec.shard_name(shard))
        if data is not None:
            yield from sorted(decode_shard(self.spec, data).items())
