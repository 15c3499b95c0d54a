"""The sharding storage transformer (Zarr v3 editor's draft, 2022): a KeyValueStore that keeps
one array's chunks in shards of an inner store.

Which shard holds a chunk is ``dandizarr.sharding.transformer_keys``; a shard's bytes,
``dandizarr.sharding.transformer_shards``. This module owns the store: reading, writing, erasing and
listing through the shards.

Reads cost two range reads per shard (index suffix, then the requested ranges, merged when close
and conditioned on the index's version). Writes rewrite the whole shard; the inner stores have no
conditional writes, so concurrent writers to *one shard* can lose each other's updates.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from dandizarr.sharding.index import ShardFormatError, ShardIndex
from dandizarr.sharding.store import KeyValueStore, RangeRead, VersionMismatch
from dandizarr.sharding.transformer_keys import ChunkPredicate, Coords, ShardKeyMap
from dandizarr.sharding.transformer_shards import ShardLayout, present_positions

__all__ = ["ListDirResult", "ShardFormatError", "ShardingTransformer"]

# Ranges of one shard closer than this are fetched in one read (cheaper than a round trip).
_MERGE_GAP = 1 << 16
_RETRIES = 8


@dataclass(frozen=True, slots=True)
class ListDirResult:
    keys: builtins.list[str]
    prefixes: builtins.list[str]


@dataclass
class _Shard:
    index: ShardIndex
    version: str | None


@dataclass
class ShardingTransformer:
    """A KeyValueStore that stores one array's chunks in shards of ``inner``.

    ``array_path`` is the array's path below ``data/root`` (``"foo/baz"``); ``separator`` is its
    chunk-key separator (``"/"`` or ``"."``).
    """

    inner: KeyValueStore
    array_path: str
    chunks_per_shard: Sequence[int]
    separator: str = "/"
    key_map: ShardKeyMap = field(init=False, repr=False)
    _layout: ShardLayout = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.key_map = ShardKeyMap.of(self.array_path, self.chunks_per_shard, self.separator)
        self.array_path = self.key_map.array_path
        self.chunks_per_shard = self.key_map.chunks_per_shard
        self._layout = ShardLayout(self.key_map.chunks_per_shard)

    # --- keys (see ShardKeyMap) ---

    @property
    def array_dir(self) -> str:
        return self.key_map.array_dir

    @property
    def chunk_prefix(self) -> str:
        return self.key_map.chunk_prefix

    @property
    def ndim(self) -> int:
        return self.key_map.ndim

    @property
    def index_nbytes(self) -> int:
        return self._layout.index_nbytes

    def parse_grid_key(self, key: str) -> Coords | None:
        """Grid coordinates of a chunk (or shard) key of this array, else None."""
        return self.key_map.parse_grid_key(key)

    def grid_key(self, coords: Sequence[int]) -> str:
        return self.key_map.grid_key(coords)

    def shard_key(self, chunk_key: str) -> str | None:
        """The shard holding a chunk key, None for a pass-through key."""
        return self.key_map.shard_key(chunk_key)

    # --- shard I/O ---

    def _read_index(self, shard_key: str) -> _Shard | None:
        read = self.inner.get_range(shard_key, -self._layout.index_nbytes)
        if read is None:
            return None
        return _Shard(self._layout.decode_index(read.data, None), read.version)

    def _write_shard(self, shard_key: str, chunks: Mapping[Coords, bytes]) -> None:
        if chunks:
            self.inner.set(shard_key, self._layout.encode(chunks))
        else:
            self.inner.delete(shard_key)

    def _read_shard_chunks(self, shard_key: str) -> dict[Coords, bytes]:
        data = self.inner.get(shard_key)
        return {} if data is None else self._layout.decode(shard_key, data)

    # --- reads ---

    def get_partial_values(
        self, key_ranges: Sequence[tuple[str, int, int | None]]
    ) -> builtins.list[bytes | None]:
        """``(key, start, end)`` -> bytes ``[start, end)`` of each value (``end`` None: to the
        end; negative ``start`` with ``end`` None: a suffix), None for absent keys."""
        return [r.data if r is not None else None for r in self._read_ranges(key_ranges)]

    def _read_ranges(
        self, key_ranges: Sequence[tuple[str, int, int | None]], if_version: str | None = None
    ) -> builtins.list[RangeRead | None]:
        results: builtins.list[RangeRead | None] = [None] * len(key_ranges)
        by_shard: dict[Coords, builtins.list[tuple[int, Coords, int, int | None]]] = {}
        for i, (key, start, end) in enumerate(key_ranges):
            if (start < 0 and end is not None) or (end is not None and end < start):
                raise ValueError(f"invalid byte range [{start}, {end}) of {key}")
            coords = self.key_map.parse_grid_key(key)
            if coords is None:
                results[i] = self.inner.get_range(key, start, end, if_version=if_version)
                continue
            shard, within = self.key_map.shard_of(coords)
            by_shard.setdefault(shard, []).append((i, within, start, end))
        for shard, requests in by_shard.items():
            shard_key = self.key_map.grid_key(shard)
            for _attempt in range(_RETRIES):
                try:
                    self._read_shard_ranges(shard_key, requests, results, if_version)
                    break
                except VersionMismatch:
                    if if_version is not None:
                        raise
            else:
                raise ShardFormatError(f"shard {shard_key} kept changing while being read")
        return results

    def _read_shard_ranges(
        self,
        shard_key: str,
        requests: Sequence[tuple[int, Coords, int, int | None]],
        results: builtins.list[RangeRead | None],
        if_version: str | None,
    ) -> None:
        shard = self._read_index(shard_key)
        if shard is None:
            return
        if if_version is not None and shard.version != if_version:
            raise VersionMismatch(shard_key)
        # Absolute byte ranges in the shard of each request.
        spans: builtins.list[tuple[int, int, int]] = []
        for i, within, start, end in requests:
            entry = shard.index.get(within)
            if entry is None:
                results[i] = None
                continue
            offset, nbytes = entry
            lo, hi, _ = slice(start, end).indices(nbytes)
            spans.append((i, offset + lo, offset + max(lo, hi)))
        # One read per group of nearby ranges, conditioned on the index's version.
        spans.sort(key=lambda s: s[1])
        group: builtins.list[tuple[int, int, int]] = []
        for span in [*spans, None]:
            if group and (span is None or span[1] > max(s[2] for s in group) + _MERGE_GAP):
                lo, hi = group[0][1], max(s[2] for s in group)
                read = self.inner.get_range(shard_key, lo, hi, if_version=shard.version)
                if read is None:
                    raise VersionMismatch(shard_key)  # deleted since the index read
                if len(read.data) != hi - lo:
                    raise ShardFormatError(
                        f"chunk range [{lo}, {hi}) is past the end of {shard_key}"
                    )
                for i, a, b in group:
                    results[i] = RangeRead(read.data[a - lo : b - lo], read.version)
                group = []
            if span is not None:
                group.append(span)

    def get(self, key: str) -> bytes | None:
        return self.get_partial_values([(key, 0, None)])[0]

    def get_range(
        self, key: str, start: int, end: int | None = None, *, if_version: str | None = None
    ) -> RangeRead | None:
        """A range of one value; a chunk's version is its shard's version."""
        return self._read_ranges([(key, start, end)], if_version)[0]

    # --- writes ---

    def set(self, key: str, value: bytes) -> None:
        self.set_values({key: value})

    def set_values(self, values: Mapping[str, bytes]) -> None:
        """Set whole values; a shard whose every chunk is given is written without reading."""
        shards, passthrough = self.key_map.group(values)
        for key in passthrough:
            self.inner.set(key, bytes(values[key]))
        for shard, members in shards.items():
            shard_key = self.key_map.grid_key(shard)
            if len(members) == self.key_map.chunks_in_shard:
                chunks = {}
            else:
                chunks = self._read_shard_chunks(shard_key)
            for within, key in members.items():
                chunks[within] = bytes(values[key])
            self._write_shard(shard_key, chunks)

    def set_partial_values(self, key_start_values: Sequence[tuple[str, int, bytes]]) -> None:
        """Write ``value`` at byte ``start`` of each key's value (zero padded if it was shorter,
        created if absent); each affected shard is read and written once."""
        by_shard: dict[Coords, builtins.list[tuple[Coords, int, bytes]]] = {}
        for key, start, value in key_start_values:
            if start < 0:
                raise ValueError(f"negative start {start} for {key}")
            coords = self.key_map.parse_grid_key(key)
            if coords is None:
                old = self.inner.get(key) or b""
                self.inner.set(key, _patch(old, start, bytes(value)))
                continue
            shard, within = self.key_map.shard_of(coords)
            by_shard.setdefault(shard, []).append((within, start, bytes(value)))
        for shard, patches in by_shard.items():
            shard_key = self.key_map.grid_key(shard)
            chunks = self._read_shard_chunks(shard_key)
            for within, start, value in patches:
                chunks[within] = _patch(chunks.get(within, b""), start, value)
            self._write_shard(shard_key, chunks)

    # --- erasing ---

    def delete(self, key: str) -> None:
        self.erase_values([key])

    def erase(self, key: str) -> None:
        self.erase_values([key])

    def erase_values(self, keys: Iterable[str]) -> None:
        """Erase keys (absent ones are fine); a shard left without chunks is deleted."""
        shards, passthrough = self.key_map.group(keys)
        for key in passthrough:
            self.inner.delete(key)
        for shard, members in shards.items():
            shard_key = self.key_map.grid_key(shard)
            if len(members) == self.key_map.chunks_in_shard:
                self.inner.delete(shard_key)  # every chunk goes: no need to look
            else:
                self._erase_in_shard(shard_key, members.__contains__)

    def _erase_in_shard(self, shard_key: str, erase: ChunkPredicate) -> None:
        for _attempt in range(_RETRIES):
            shard = self._read_index(shard_key)
            if shard is None:
                return
            present = present_positions(shard.index)
            doomed = {w for w in present if erase(w)}
            if not doomed:
                return
            if len(doomed) == len(present):
                self.inner.delete(shard_key)
                return
            # Rewrite without the erased chunks (reclaiming their bytes), from the shard the
            # index was read from.
            try:
                read = self.inner.get_range(shard_key, 0, None, if_version=shard.version)
            except VersionMismatch:
                continue
            if read is None:
                continue
            chunks = self._layout.decode(shard_key, read.data)
            self._write_shard(shard_key, {w: v for w, v in chunks.items() if w not in doomed})
            return
        raise ShardFormatError(f"shard {shard_key} kept changing while being erased from")

    def erase_prefix(self, prefix: str) -> None:
        """Erase every key starting with ``prefix``; whole shards are deleted without reading."""
        for inner_key in builtins.list(
            self.inner.list_prefix(self.key_map.translate_prefix(prefix))
        ):
            shard = self.key_map.parse_grid_key(inner_key)
            if shard is None:
                if inner_key.startswith(prefix):
                    self.inner.delete(inner_key)
            elif self.key_map.shard_within_prefix(shard, prefix):
                self.inner.delete(inner_key)
            else:
                self._erase_in_shard(inner_key, self.key_map.matcher(shard, prefix))

    # --- listing ---

    def _chunk_keys_in(self, shard_key: str, shard: Coords) -> Iterator[str]:
        found = self._read_index(shard_key)
        if found is None:
            return
        for within in present_positions(found.index):
            yield self.key_map.grid_key(self.key_map.chunk_of(shard, within))

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Keys starting with ``prefix``, sorted; chunks are listed from their shards' indexes."""
        keys = []
        for inner_key in self.inner.list_prefix(self.key_map.translate_prefix(prefix)):
            shard = self.key_map.parse_grid_key(inner_key)
            if shard is None:
                if inner_key.startswith(prefix):
                    keys.append(inner_key)
            else:
                keys.extend(
                    k for k in self._chunk_keys_in(inner_key, shard) if k.startswith(prefix)
                )
        return iter(sorted(keys))

    def list_dir(self, prefix: str) -> ListDirResult:
        """The keys and sub-prefixes (ending in ``/``) directly below ``prefix``.

        As the draft allows, a sub-prefix inside the chunk grid is listed for every chunk
        position its shard covers without checking that a chunk exists there; full keys are
        always exact (read from the shard indexes).
        """
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        keys: builtins.set[str] = builtins.set()
        prefixes: builtins.set[str] = builtins.set()

        def add(key: str) -> None:
            rest = key[len(prefix) :]
            if "/" in rest:
                prefixes.add(prefix + rest.split("/", 1)[0] + "/")
            else:
                keys.add(key)

        depth = self.key_map.grid_depth(prefix)
        for inner_key in self.inner.list_prefix(self.key_map.translate_prefix(prefix)):
            shard = self.key_map.parse_grid_key(inner_key)
            if shard is None:
                if inner_key.startswith(prefix):
                    add(inner_key)
            elif depth is None:
                add(inner_key)  # the prefix is above the array's chunks: same directories
            elif depth < self.key_map.ndim - 1 and self.key_map.separator == "/":
                low = shard[depth] * self.key_map.chunks_per_shard[depth]
                lead = "c" if depth == 0 else ""
                for c in range(low, low + self.key_map.chunks_per_shard[depth]):
                    prefixes.add(f"{prefix}{lead}{c}/")
            else:
                for key in self._chunk_keys_in(inner_key, shard):
                    if key.startswith(prefix):
                        add(key)
        return ListDirResult(sorted(keys), sorted(prefixes))

    def list(self) -> Iterator[str]:
        return self.list_prefix("")


def _patch(old: bytes, start: int, value: bytes) -> bytes:
    if start > len(old):
        old = old + b"\x00" * (start - len(old))
    return old[:start] + value + old[start + len(value) :]
