"""Cutting chunk grids into shards and grouping an upload's paths into shard plans."""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dandizarr.sharding.archive_packing.chunk_grids import ChunkGrid, PackingError, is_plain_int

__all__ = [
    "DEFAULT_SHARD_BYTES",
    "MAX_PLANNED_PATHS",
    "POSITION_TYPECODE",
    "IndexedShardPlan",
    "LayoutLookup",
    "PlannedMember",
    "ShardLayout",
    "ShardPlan",
    "default_chunks_per_shard",
    "plan_shard_indices",
    "plan_shard_positions",
    "plan_shards",
]

DEFAULT_SHARD_BYTES = 64 << 20
SHARD_SUFFIX = ".shard"
# Positions and slots in an ``IndexedShardPlan`` are 4-byte unsigned ints (a plan of 10,000,000
# chunk files holds 80 MB, not 160): a planned listing has at most this many paths.
POSITION_TYPECODE = "I"
MAX_PLANNED_PATHS = (1 << (8 * array(POSITION_TYPECODE).itemsize)) - 1


@dataclass(frozen=True)
class ShardLayout:
    """A grid cut into shards of ``chunks_per_shard`` chunk files each."""

    grid: ChunkGrid
    chunks_per_shard: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.chunks_per_shard) != self.grid.ndim or any(
            not is_plain_int(n) or n < 1 for n in self.chunks_per_shard
        ):
            raise PackingError(
                f"chunks_per_shard {self.chunks_per_shard} must be {self.grid.ndim} positive "
                "integers"
            )

    def shard_of(self, coords: Sequence[int]) -> tuple[tuple[int, ...], int]:
        """(shard coordinates, C-order slot of the chunk in its shard: its index entry)."""
        if len(coords) != self.grid.ndim:
            raise PackingError(f"{len(coords)} coordinates for a {self.grid.ndim}-d grid")
        shard = tuple(int(c) // n for c, n in zip(coords, self.chunks_per_shard, strict=True))
        slot = 0
        for c, n in zip(coords, self.chunks_per_shard, strict=True):
            slot = slot * n + int(c) % n
        return shard, slot

    def shard_name(self, shard_coords: Sequence[int]) -> str:
        """A readable name: the shard coordinates as a chunk key plus ``.shard``, so it can
        never be mistaken for a chunk file of the array."""
        return self.grid.chunk_key(shard_coords) + SHARD_SUFFIX

    def slots(self) -> int:
        return math.prod(self.chunks_per_shard)


def default_chunks_per_shard(
    grid: ChunkGrid, target_bytes: int = DEFAULT_SHARD_BYTES
) -> tuple[int, ...]:
    """Chunks per shard for about ``target_bytes`` of uncompressed chunk data per shard.

    Dimensions double in turn from the last (contiguous in C order, so a shard is a compact
    block), each capped at the grid's extent; the last step grows only as far as the target
    needs, so shards land near the target rather than up to twice it.
    """
    unit = grid.chunk_nbytes()
    limits = [max(1, g) for g in grid.grid_shape()]
    cps = [1] * grid.ndim

    def size() -> int:
        return math.prod(cps) * unit

    while size() < target_bytes:
        grew = False
        for d in reversed(range(grid.ndim)):
            if cps[d] >= limits[d]:
                continue
            others = size() // cps[d]
            needed = -(-target_bytes // others)  # this dimension alone reaches the target
            cps[d] = min(limits[d], cps[d] * 2, max(needed, cps[d] + 1))
            grew = True
            if size() >= target_bytes:
                break
        if not grew:
            break
    return tuple(cps)


@dataclass(frozen=True, slots=True)  # one per file: no __dict__
class PlannedMember:
    path: str
    slot: int


@dataclass(frozen=True)
class ShardPlan:
    name: str
    layout: ShardLayout
    members: tuple[PlannedMember, ...]


def _ancestors(path: str) -> Iterable[str]:
    """``"a/b/c"`` -> ``""``, ``"a"``, ``"a/b"``: the directories an array could sit in."""
    yield ""
    parts = path.split("/")
    for i in range(1, len(parts)):
        yield "/".join(parts[:i])


class LayoutLookup:
    """Which of ``layouts`` a path is a chunk file of. The layouts a path may belong to (those
    of arrays in its ancestor directories, in layout order) depend on its directory only, so
    they are found once per directory: an upload asks this of every one of its paths."""

    def __init__(self, layouts: Sequence[ShardLayout]) -> None:
        self.layouts = layouts
        self._by_dir: dict[str, list[int]] = {}
        for i, layout in enumerate(layouts):
            self._by_dir.setdefault(layout.grid.array_path, []).append(i)
        self._by_parent: dict[str, list[int]] = {}

    def chunk_of(self, path: str) -> tuple[int, tuple[int, ...]] | None:
        """(the layout's index, the chunk's grid coordinates), or None: not a chunk file."""
        parent = path.rpartition("/")[0]
        candidates = self._by_parent.get(parent)
        if candidates is None:
            candidates = self._by_parent[parent] = sorted(
                i for d in _ancestors(path) for i in self._by_dir.get(d, ())
            )
        for i in candidates:
            coords = self.layouts[i].grid.chunk_coords(path)
            if coords is not None:
                return i, coords
        return None


@dataclass(frozen=True)
class IndexedShardPlan:
    """A shard plan without an object per member (for listings of millions of files): the
    members' positions in the planned paths and their slots, both by slot."""

    name: str
    layout: ShardLayout
    positions: array[int]
    slots: array[int]


def plan_shard_indices(
    layouts: Sequence[ShardLayout], paths: Iterable[str]
) -> tuple[list[IndexedShardPlan], array[int]]:
    """Group chunk files into shards (plans sorted by name), members as positions in
    ``paths``; the positions of the rest (loose), in input order. A path claimed by two layouts
    goes to the first; of two paths landing in one slot (a repeated path) the first counts."""
    return plan_shard_positions(layouts, enumerate(paths))


def plan_shard_positions(
    layouts: Sequence[ShardLayout], entries: Iterable[tuple[int, str]]
) -> tuple[list[IndexedShardPlan], array[int]]:
    """``plan_shard_indices`` of (position, path) entries: the positions are the caller's
    (a listing's, say, of which only some paths are planned)."""
    lookup = LayoutLookup(layouts)
    shards: dict[tuple[int, tuple[int, ...]], tuple[array[int], array[int]]] = {}
    loose = array(POSITION_TYPECODE)
    for position, path in entries:
        chunk = lookup.chunk_of(path)
        if chunk is None:
            loose.append(position)
            continue
        i, coords = chunk
        shard, slot = layouts[i].shard_of(coords)
        found = shards.get((i, shard))
        if found is None:
            found = shards[(i, shard)] = (array(POSITION_TYPECODE), array(POSITION_TYPECODE))
        found[0].append(position)
        found[1].append(slot)
    plans = []
    for (i, shard), (positions, slots) in shards.items():
        by_slot, kept_slots = array(POSITION_TYPECODE), array(POSITION_TYPECODE)
        # Stable: of positions sharing a slot, the first comes first and is the one kept.
        for k in sorted(range(len(slots)), key=slots.__getitem__):
            if kept_slots and kept_slots[-1] == slots[k]:
                continue
            by_slot.append(positions[k])
            kept_slots.append(slots[k])
        del positions[:], slots[:]
        plans.append(
            IndexedShardPlan(layouts[i].shard_name(shard), layouts[i], by_slot, kept_slots)
        )
    plans.sort(key=lambda p: p.name)
    for a, b in itertools.pairwise(plans):
        if a.name == b.name:
            raise PackingError(f"two arrays' layouts give the same shard name {a.name!r}")
    return plans, loose


def plan_shards(
    layouts: Sequence[ShardLayout], paths: Iterable[str]
) -> tuple[list[ShardPlan], list[str]]:
    """``plan_shard_indices`` with the members as paths: the rest stay loose, in input order;
    a repeated path counts once."""
    unique = list(dict.fromkeys(paths))
    indexed, loose = plan_shard_indices(layouts, unique)
    plans = [
        ShardPlan(
            name=plan.name,
            layout=plan.layout,
            members=tuple(
                PlannedMember(unique[p], s) for p, s in zip(plan.positions, plan.slots, strict=True)
            ),
        )
        for plan in indexed
    ]
    return plans, [unique[p] for p in loose]
