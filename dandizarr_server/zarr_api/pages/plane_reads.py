"""Reading what a preview draws from an array (within the budget ``pages.arrays`` checks from the
metadata): the middle plane, whole or strided, or any selection of whole dimensions and single
indices (an OME image's plane), reading only the chunks the pixels fall in."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dandizarr.sharding.array import Array
from dandizarr.sharding.parallel import parallel_map
from dandizarr_server.zarr_api.pages.arrays import (
    ArrayInfo,
    Unsupported,
    plane_plan,
    read_geometry,
)
from dandizarr_server.zarr_api.pages.reader import ArchiveFiles


def plane_selection(shape: Sequence[int]) -> tuple[int | slice, ...]:
    """The middle plane of the last two dimensions."""
    return (*(n // 2 for n in shape[:-2]), slice(None), slice(None))


def read_plane(files: ArchiveFiles, info: ArrayInfo) -> np.ndarray:
    """The middle plane of ``info``'s array, or its strided pixels (``plane_plan``), reading
    only the chunks they fall in."""
    if info.metadata is None:
        raise Unsupported(info.preview_problem or "no preview")
    plan = plane_plan(info.metadata)
    if plan is None:
        raise Unsupported(info.preview_problem or "its middle plane is more than a preview reads")
    if plan.whole:
        return read_selection(files, info, plane_selection(info.metadata.shape))
    array = Array(files, info.path, info.metadata)
    # One read per block of strided pixels that share a decoded chunk.
    chunk = read_geometry(info.metadata).chunk
    lead = tuple(n // 2 for n in array.shape[:-2])  # the middle plane's index, as selected

    def by_chunk(pixels: Sequence[int], size: int) -> list[list[tuple[int, int]]]:
        groups: dict[int, list[tuple[int, int]]] = {}
        for out, pixel in enumerate(pixels):
            groups.setdefault(pixel // size, []).append((out, pixel))
        return list(groups.values())

    blocks = [
        (rows, cols)
        for rows in by_chunk(plan.rows, chunk[-2])
        for cols in by_chunk(plan.cols, chunk[-1])
    ]
    files.prefetch(
        {
            array.chunk_key(
                tuple(
                    int(i) // c
                    for i, c in zip((*lead, rows[0][1], cols[0][1]), array.chunk_shape, strict=True)
                )
            )
            for rows, cols in blocks
        }
    )
    out = np.empty((len(plan.rows), len(plan.cols)), dtype=array.dtype)

    def fill(block: tuple[list[tuple[int, int]], list[tuple[int, int]]]) -> None:
        rows, cols = block
        top, left = rows[0][1], cols[0][1]
        part = array.read((*lead, slice(top, rows[-1][1] + 1), slice(left, cols[-1][1] + 1)))
        out[np.ix_([i for i, _ in rows], [j for j, _ in cols])] = part[
            np.ix_([r - top for _, r in rows], [c - left for _, c in cols])
        ]

    parallel_map(fill, blocks)
    return out


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
