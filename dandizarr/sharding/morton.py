"""Morton (Z-order) traversal of a shard's inner-chunk grid.

Writing inner chunks in Morton order keeps spatially close chunks close in the shard, so a
read of a small region touches few, nearby byte ranges (which then merge into one request).

The order is the one zarr-python and Neuroglancer use: the *compressed* Morton code, where
dimension ``d`` contributes ``bit_length(n_d - 1)`` bits, dimension 0 being the least
significant at each bit level; coordinates whose code falls outside the grid are skipped.
Sorting every in-range coordinate by its code gives exactly that sequence without walking the
(up to ``2**ndim`` times larger) power-of-two grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

__all__ = [
    "compressed_morton_bits",
    "morton_code",
    "morton_codes",
    "morton_decode",
    "morton_order",
    "morton_order_array",
    "morton_rank",
]


def compressed_morton_bits(shape: Sequence[int]) -> list[int]:
    """Bits per dimension of a compressed Morton code over a grid of ``shape``."""
    return [max(0, int(n) - 1).bit_length() for n in shape]


def morton_code(coords: Sequence[int], shape: Sequence[int]) -> int:
    """The compressed Morton code of one coordinate in a grid of ``shape``."""
    bits = compressed_morton_bits(shape)
    code = 0
    out_bit = 0
    for level in range(max(bits, default=0)):
        for dim, nbits in enumerate(bits):
            if level < nbits:
                code |= ((int(coords[dim]) >> level) & 1) << out_bit
                out_bit += 1
    return code


def morton_decode(code: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The coordinate whose compressed Morton code in a grid of ``shape`` is ``code``."""
    bits = compressed_morton_bits(shape)
    position = [0] * len(bits)
    out_bit = 0
    for level in range(max(bits, default=0)):
        for dim, nbits in enumerate(bits):
            if level < nbits:
                position[dim] |= ((code >> out_bit) & 1) << level
                out_bit += 1
    return tuple(position)


def morton_codes(positions: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Compressed Morton codes of ``[n, ndim]`` grid positions (vectorized, uint64)."""
    bits = compressed_morton_bits(shape)
    positions = positions.astype(np.uint64)
    codes = np.zeros(len(positions), dtype=np.uint64)
    out_bit = 0
    for level in range(max(bits, default=0)):
        for dim, nbits in enumerate(bits):
            if level < nbits:
                bit = (positions[:, dim] >> np.uint64(level)) & np.uint64(1)
                codes |= bit << np.uint64(out_bit)
                out_bit += 1
    return codes


def _codes(shape: tuple[int, ...]) -> np.ndarray:
    """Compressed Morton code of every coordinate of ``shape``, in C order (flat, uint64)."""
    if sum(compressed_morton_bits(shape)) > 64:
        raise ValueError(f"grid {shape} too large for 64-bit Morton codes")
    return morton_codes(np.indices(shape, dtype=np.uint64).reshape(len(shape), -1).T, shape)


@lru_cache(maxsize=64)
def _order(shape: tuple[int, ...]) -> np.ndarray:
    if any(n < 0 for n in shape):
        raise ValueError(f"negative grid shape {shape}")
    if 0 in shape:
        return np.zeros((0, len(shape)), dtype=np.intp)
    flat = np.argsort(_codes(shape), kind="stable")
    coords = np.stack(np.unravel_index(flat, shape), axis=1).astype(np.intp)
    coords.flags.writeable = False
    return coords


def morton_order_array(shape: Sequence[int]) -> np.ndarray:
    """All coordinates of ``shape`` in Morton order, as a read-only ``(n, ndim)`` intp array."""
    return _order(tuple(int(n) for n in shape))


def morton_order(shape: Sequence[int]) -> list[tuple[int, ...]]:
    """All coordinates of ``shape`` in Morton order, each exactly once."""
    return [tuple(int(c) for c in row) for row in morton_order_array(shape)]


@lru_cache(maxsize=64)
def _rank(shape: tuple[int, ...]) -> np.ndarray:
    order = _order(shape)
    rank = np.empty(int(np.prod(shape, dtype=np.int64)), dtype=np.intp)
    if len(order):
        rank[np.ravel_multi_index(tuple(order.T), shape)] = np.arange(len(order))
    rank.flags.writeable = False
    return rank


def morton_rank(shape: Sequence[int]) -> np.ndarray:
    """Position in Morton order of each coordinate, indexed by C-order flat index."""
    return _rank(tuple(int(n) for n in shape))
