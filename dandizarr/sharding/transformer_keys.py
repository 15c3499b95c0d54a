"""The sharding storage transformer's key translation: chunk keys -> shard keys, and prefixes.

One array's chunk keys ``data/root/<array path>/c<i><sep><j>...`` are grouped by
``chunks_per_shard``: chunk ``[96, 18]`` with ``chunks_per_shard [32, 2]`` lives in shard
``data/root/<array path>/c3<sep>9``. Every other key passes through to the inner store unchanged.

Pure key arithmetic (no I/O): ``dandizarr.sharding.transformer`` does the reading and writing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from dandizarr.sharding.array_metadata import CANONICAL_INT

Coords = tuple[int, ...]
ChunkPredicate = Callable[[Coords], bool]


@dataclass(frozen=True)
class ShardKeyMap:
    """Where the chunks of one array go: ``array_path`` below ``data/root`` (stripped of
    ``/``), ``chunks_per_shard`` (positive ints) and the chunk-key ``separator`` (``/``, ``.``).
    """

    array_path: str
    chunks_per_shard: Coords
    separator: str

    @classmethod
    def of(cls, array_path: str, chunks_per_shard: Sequence[int], separator: str) -> ShardKeyMap:
        """The map with its arguments normalized; ValueError when they are not valid."""
        shape = tuple(int(n) for n in chunks_per_shard)
        if not shape or any(n < 1 for n in shape):
            raise ValueError(f"chunks_per_shard must be positive: {shape}")
        if separator not in ("/", "."):
            raise ValueError(f"chunk key separator must be '/' or '.', got {separator!r}")
        return cls(array_path.strip("/"), shape, separator)

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
    def chunks_in_shard(self) -> int:
        return math.prod(self.chunks_per_shard)

    def parse_grid_key(self, key: str) -> Coords | None:
        """Grid coordinates of a chunk (or shard) key of this array, else None."""
        if not key.startswith(self.chunk_prefix):
            return None
        parts = key[len(self.chunk_prefix) :].split(self.separator)
        if len(parts) != self.ndim or not all(CANONICAL_INT.fullmatch(p) for p in parts):
            return None
        return tuple(int(p) for p in parts)

    def grid_key(self, coords: Sequence[int]) -> str:
        return self.chunk_prefix + self.separator.join(str(int(c)) for c in coords)

    def shard_key(self, chunk_key: str) -> str | None:
        """The shard holding a chunk key, None for a pass-through key."""
        coords = self.parse_grid_key(chunk_key)
        return None if coords is None else self.grid_key(self.shard_of(coords)[0])

    def shard_of(self, chunk: Coords) -> tuple[Coords, Coords]:
        """(shard coordinates, position of the chunk inside the shard)."""
        pairs = [divmod(c, n) for c, n in zip(chunk, self.chunks_per_shard, strict=True)]
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)

    def chunk_of(self, shard: Coords, within: Sequence[int]) -> Coords:
        """Grid coordinates of the chunk at position ``within`` of ``shard``."""
        return tuple(
            s * n + int(w) for s, n, w in zip(shard, self.chunks_per_shard, within, strict=True)
        )

    def group(self, keys: Iterable[str]) -> tuple[dict[Coords, dict[Coords, str]], list[str]]:
        """Chunk keys grouped by shard (shard -> position in shard -> key); pass-through keys."""
        shards: dict[Coords, dict[Coords, str]] = {}
        passthrough = []
        for key in keys:
            coords = self.parse_grid_key(key)
            if coords is None:
                passthrough.append(key)
                continue
            shard, within = self.shard_of(coords)
            shards.setdefault(shard, {})[within] = key
        return shards, passthrough

    def translate_prefix(self, prefix: str) -> str:
        """The inner-store prefix under which every shard holding a matching chunk lies."""
        if not prefix.startswith(self.chunk_prefix):
            return prefix
        parts = prefix[len(self.chunk_prefix) :].split(self.separator)
        complete = parts[:-1]  # the last part may be cut short: "c96/1" could be 1, 10, 123...
        if len(complete) >= self.ndim or not all(CANONICAL_INT.fullmatch(p) for p in complete):
            return prefix  # no chunk key can match; pass-through keys still may
        shard = [int(p) // n for p, n in zip(complete, self.chunks_per_shard, strict=False)]
        return self.chunk_prefix + "".join(f"{s}{self.separator}" for s in shard)

    def matcher(self, shard: Coords, prefix: str) -> ChunkPredicate:
        """Whether the chunk at a position of ``shard`` has a key starting with ``prefix``."""

        def matches(within: Coords) -> bool:
            return self.grid_key(self.chunk_of(shard, within)).startswith(prefix)

        return matches

    def shard_within_prefix(self, shard: Coords, prefix: str) -> bool:
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

    def grid_depth(self, prefix: str) -> int | None:
        """How many chunk-key components a ``/``-terminated prefix fixes; None above the array's
        directory."""
        if not prefix.startswith(self.array_dir):
            return None
        rest = prefix[len(self.array_dir) :]
        return rest.count("/") if self.separator == "/" else (0 if not rest else self.ndim)
