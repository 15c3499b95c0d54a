"""The sharding storage transformer (Zarr v3 editor's draft, 2022): chunk keys -> shard keys.

One array's chunk keys ``data/root/<array path>/c<i><sep><j>...`` are grouped by
``chunks_per_shard``: chunk ``[96, 18]`` with ``chunks_per_shard [32, 2]`` lives in shard
``data/root/<array path>/c3<sep>9``. Every other key passes through to the inner store unchanged.

A shard is its chunks (written in Morton order of their position in the shard) followed by the
index: ``16 * prod(chunks_per_shard)`` bytes of little-endian ``(offset, nbytes)`` uint64
pairs in C order, ``2**64 - 1`` twice for an absent chunk (the ``sharding.index`` format
without a checksum).

Reads cost two range reads per shard (index suffix, then the requested ranges, merged when close
and conditioned on the index's version). Writes rewrite the whole shard; the inner stores have no
conditional writes, so concurrent writers to *one shard* can lose each other's updates.
"""

from __future__ import annotations

import builtins
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from sharding.index import IndexCodecs, ShardFormatError, ShardIndex
from sharding.morton import morton_order_array
from sharding.store import KeyValueStore, RangeRead, VersionMismatch

__all__ = ["ListDirResult", "ShardFormatError", "ShardingTransformer"]

_INDEX_CODECS = IndexCodecs(crc32c=False)
_CANONICAL_INT = re.compile(r"0|[1-9][0-9]*")
# Ranges of one shard closer than this are fetched in one read (cheaper than a round trip).
_MERGE_GAP = 1 << 16
_RETRIES = 8

Coords = tuple[int, ...]
_Predicate = Callable[[Coords], bool]


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
    _order: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.array_path = self.array_path.strip("/")
        self.chunks_per_shard = tuple(int(n) for n in self.chunks_per_shard)
        if not self.chunks_per_shard or any(n < 1 for n in self.chunks_per_shard):
            raise ValueError(f"chunks_per_shard must be positive: {self.chunks_per_shard}")
        if self.separator not in ("/", "."):
            raise ValueError(f"chunk key separator must be '/' or '.', got {self.separator!r}")
        self._order = morton_order_array(self.chunks_per_shard)

    # --- keys ---

    @property
    def array_dir(self) -> str:
        return f"data/root/{self.array_path}/" if self.array_path else "data/root/"

    @property
    def chunk_prefix(self) -> str:
        return self.array_dir + "c"

    @property
    def ndim(self) -> int:
        return len(self.chunks_per_shard)

    @property
    def index_nbytes(self) -> int:
        return 16 * math.prod(self.chunks_per_shard)

    def parse_grid_key(self, key: str) -> Coords | None:
        """Grid coordinates of a chunk (or shard) key of this array, else None."""
        if not key.startswith(self.chunk_prefix):
            return None
        parts = key[len(self.chunk_prefix) :].split(self.separator)
        if len(parts) != self.ndim or not all(_CANONICAL_INT.fullmatch(p) for p in parts):
            return None
        return tuple(int(p) for p in parts)

    def grid_key(self, coords: Sequence[int]) -> str:
        return self.chunk_prefix + self.separator.join(str(int(c)) for c in coords)

    def shard_key(self, chunk_key: str) -> str | None:
        """The shard holding a chunk key, None for a pass-through key."""
        coords = self.parse_grid_key(chunk_key)
        return None if coords is None else self.grid_key(self._shard_of(coords)[0])

    def _shard_of(self, chunk: Coords) -> tuple[Coords, Coords]:
        """(shard coordinates, position of the chunk inside the shard)."""
        pairs = [divmod(c, n) for c, n in zip(chunk, self.chunks_per_shard, strict=True)]
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)

    def _chunk_of(self, shard: Coords, within: Sequence[int]) -> Coords:
        return tuple(
            s * n + int(w) for s, n, w in zip(shard, self.chunks_per_shard, within, strict=True)
        )

    def _group(self, keys: Iterable[str]) -> tuple[dict[Coords, dict[Coords, str]], list[str]]:
        """Chunk keys grouped by shard (shard -> position in shard -> key); pass-through keys."""
        shards: dict[Coords, dict[Coords, str]] = {}
        passthrough = []
        for key in keys:
            coords = self.parse_grid_key(key)
            if coords is None:
                passthrough.append(key)
                continue
            shard, within = self._shard_of(coords)
            shards.setdefault(shard, {})[within] = key
        return shards, passthrough

    def _translate_prefix(self, prefix: str) -> str:
        """The inner-store prefix under which every shard holding a matching chunk lies."""
        if not prefix.startswith(self.chunk_prefix):
            return prefix
        parts = prefix[len(self.chunk_prefix) :].split(self.separator)
        complete = parts[:-1]  # the last part may be cut short: "c96/1" could be 1, 10, 123...
        if len(complete) >= self.ndim or not all(_CANONICAL_INT.fullmatch(p) for p in complete):
            return prefix  # no chunk key can match; pass-through keys still may
        shard = [int(p) // n for p, n in zip(complete, self.chunks_per_shard, strict=False)]
        return self.chunk_prefix + "".join(f"{s}{self.separator}" for s in shard)

    # --- shard I/O ---

    def _read_index(self, shard_key: str) -> _Shard | None:
        read = self.inner.get_range(shard_key, -self.index_nbytes)
        if read is None:
            return None
        index = ShardIndex.decode(read.data, self.chunks_per_shard, _INDEX_CODECS)
        index.validate(0, None)
        return _Shard(index, read.version)

    def _decode_shard(self, shard_key: str, data: bytes) -> dict[Coords, bytes]:
        if len(data) < self.index_nbytes:
            raise ShardFormatError(
                f"shard {shard_key} of {len(data)} bytes is shorter than its "
                f"{self.index_nbytes}-byte index"
            )
        data_end = len(data) - self.index_nbytes
        index = ShardIndex.decode(data[data_end:], self.chunks_per_shard, _INDEX_CODECS)
        index.validate(0, data_end)
        chunks = {}
        for within in np.argwhere(index.present()).tolist():
            offset, nbytes = index.get(within) or (0, 0)
            chunks[tuple(within)] = data[offset : offset + nbytes]
        return chunks

    def _encode_shard(self, chunks: Mapping[Coords, bytes]) -> bytes:
        index = ShardIndex.empty(self.chunks_per_shard)
        parts = []
        offset = 0
        for row in self._order:
            within = tuple(int(c) for c in row)
            value = chunks.get(within)
            if value is None:
                continue
            index.set(within, offset, len(value))
            parts.append(value)
            offset += len(value)
        parts.append(index.encode(_INDEX_CODECS))
        return b"".join(parts)

    def _write_shard(self, shard_key: str, chunks: Mapping[Coords, bytes]) -> None:
        if chunks:
            self.inner.set(shard_key, self._encode_shard(chunks))
        else:
            self.inner.delete(shard_key)

    def _read_shard_chunks(self, shard_key: str) -> dict[Coords, bytes]:
        data = self.inner.get(shard_key)
        return {} if data is None else self._decode_shard(shard_key, data)

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
            coords = self.parse_grid_key(key)
            if coords is None:
                results[i] = self.inner.get_range(key, start, end, if_version=if_version)
                continue
            shard, within = self._shard_of(coords)
            by_shard.setdefault(shard, []).append((i, within, start, end))
        for shard, requests in by_shard.items():
            shard_key = self.grid_key(shard)
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
        shards, passthrough = self._group(values)
        for key in passthrough:
            self.inner.set(key, bytes(values[key]))
        for shard, members in shards.items():
            shard_key = self.grid_key(shard)
            if len(members) == math.prod(self.chunks_per_shard):
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
            coords = self.parse_grid_key(key)
            if coords is None:
                old = self.inner.get(key) or b""
                self.inner.set(key, _patch(old, start, bytes(value)))
                continue
            shard, within = self._shard_of(coords)
            by_shard.setdefault(shard, []).append((within, start, bytes(value)))
        for shard, patches in by_shard.items():
            shard_key = self.grid_key(shard)
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
        shards, passthrough = self._group(keys)
        for key in passthrough:
            self.inner.delete(key)
        for shard, members in shards.items():
            shard_key = self.grid_key(shard)
            if len(members) == math.prod(self.chunks_per_shard):
                self.inner.delete(shard_key)  # every chunk goes: no need to look
            else:
                self._erase_in_shard(shard_key, members.__contains__)

    def _erase_in_shard(self, shard_key: str, erase: _Predicate) -> None:
        for _attempt in range(_RETRIES):
            shard = self._read_index(shard_key)
            if shard is None:
                return
            present = [tuple(w) for w in np.argwhere(shard.index.present()).tolist()]
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
            chunks = self._decode_shard(shard_key, read.data)
            self._write_shard(shard_key, {w: v for w, v in chunks.items() if w not in doomed})
            return
        raise ShardFormatError(f"shard {shard_key} kept changing while being erased from")

    def erase_prefix(self, prefix: str) -> None:
        """Erase every key starting with ``prefix``; whole shards are deleted without reading."""
        for inner_key in builtins.list(self.inner.list_prefix(self._translate_prefix(prefix))):
            shard = self.parse_grid_key(inner_key)
            if shard is None:
                if inner_key.startswith(prefix):
                    self.inner.delete(inner_key)
            elif self._shard_within_prefix(shard, prefix):
                self.inner.delete(inner_key)
            else:
                self._erase_in_shard(inner_key, self._matcher(shard, prefix))

    def _matcher(self, shard: Coords, prefix: str) -> _Predicate:
        def matches(within: Coords) -> bool:
            return self.grid_key(self._chunk_of(shard, within)).startswith(prefix)

        return matches

    def _shard_within_prefix(self, shard: Coords, prefix: str) -> bool:
        """Whether every possible chunk key of the shard starts with ``prefix``."""
        if self.chunk_prefix.startswith(prefix):
            return True
        parts = prefix[len(self.chunk_prefix) :].split(self.separator)
        for d, part in enumerate(parts):
            if d >= self.ndim:
                return False
            low = shard[d] * self.chunks_per_shard[d]
            values = range(low, low + self.chunks_per_shard[d])
            complete = d < len(parts) - 1
            if not all((str(v) == part) if complete else str(v).startswith(part) for v in values):
                return False
        return True

    # --- listing ---

    def _chunk_keys_in(self, shard_key: str, shard: Coords) -> Iterator[str]:
        found = self._read_index(shard_key)
        if found is None:
            return
        for within in np.argwhere(found.index.present()).tolist():
            yield self.grid_key(self._chunk_of(shard, within))

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Keys starting with ``prefix``, sorted; chunks are listed from their shards' indexes."""
        keys = []
        for inner_key in self.inner.list_prefix(self._translate_prefix(prefix)):
            shard = self.parse_grid_key(inner_key)
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

        depth = self._grid_depth(prefix)
        for inner_key in self.inner.list_prefix(self._translate_prefix(prefix)):
            shard = self.parse_grid_key(inner_key)
            if shard is None:
                if inner_key.startswith(prefix):
                    add(inner_key)
            elif depth is None:
                add(inner_key)  # the prefix is above the array's chunks: same directories
            elif depth < self.ndim - 1 and self.separator == "/":
                low = shard[depth] * self.chunks_per_shard[depth]
                lead = "c" if depth == 0 else ""
                for c in range(low, low + self.chunks_per_shard[depth]):
                    prefixes.add(f"{prefix}{lead}{c}/")
            else:
                for key in self._chunk_keys_in(inner_key, shard):
                    if key.startswith(prefix):
                        add(key)
        return ListDirResult(sorted(keys), sorted(prefixes))

    def _grid_depth(self, prefix: str) -> int | None:
        """How many chunk-key components a ``/``-terminated prefix fixes; None above the array's
        directory."""
        if not prefix.startswith(self.array_dir):
            return None
        rest = prefix[len(self.array_dir) :]
        return rest.count("/") if self.separator == "/" else (0 if not rest else self.ndim)

    def list(self) -> Iterator[str]:
        return self.list_prefix("")


def _patch(old: bytes, start: int, value: bytes) -> bytes:
    if start > len(old):
        old = old + b"\x00" * (start - len(old))
    return old[:start] + value + old[start + len(value) :]
