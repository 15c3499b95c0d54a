"""Cutting a rectangular region of an array into the parts that fall in each chunk.

Shared by the array (chunks of the array) and the sharding codec (inner chunks of a shard).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

__all__ = ["ChunkPart", "Region", "chunk_parts"]

Region = tuple[slice, ...]


@dataclass(frozen=True, slots=True)
class ChunkPart:
    coords: tuple[int, ...]  # the chunk's grid position
    region: Region  # inside the chunk
    out_sel: Region  # inside the selection
    covers: bool  # region covers the chunk's whole in-bounds part


def chunk_parts(
    slices: Region, shape: tuple[int, ...], chunk_shape: tuple[int, ...]
) -> list[ChunkPart]:
    """The parts of the unit-step region ``slices`` of an array of ``shape``, one per chunk
    it touches, in C order of the chunks."""
    per_dim = []
    for sel, size, c in zip(slices, shape, chunk_shape, strict=True):
        items = []
        if sel.stop > sel.start:
            for i in range(sel.start // c, (sel.stop - 1) // c + 1):
                lo, hi = max(sel.start - i * c, 0), min(sel.stop - i * c, c)
                in_bounds = min(c, size - i * c)  # an edge chunk sticks out of the array
                out = slice(i * c + lo - sel.start, i * c + hi - sel.start)
                items.append((i, slice(lo, hi), out, lo == 0 and hi >= in_bounds))
        per_dim.append(items)
    return [
        ChunkPart(
            tuple(d[0] for d in combo),
            tuple(d[1] for d in combo),
            tuple(d[2] for d in combo),
            all(d[3] for d in combo),
        )
        for combo in itertools.product(*per_dim)
    ]
