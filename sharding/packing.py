"""Planning and building shards of a whole Zarr archive (see ``docs/sharded.md``).

The archive keeps its files exactly as written; the chunk files of each array are stored in
shard objects laid out as ``sharding_indexed`` shards of that array's chunk grid (member bytes,
then the index with crc32c). Everything here is pure (no Django, no network), so the server,
the client and the tests share one notion of what a chunk file is and where its bytes live.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from sharding.array import DATA_TYPES, ChunkKeyEncoding
from sharding.index import IndexCodecs, ShardIndex
from sharding.transformer import _CANONICAL_INT

__all__ = [
    "DEFAULT_SHARD_BYTES",
    "BuiltShard",
    "ChunkGrid",
    "MemberRecord",
    "PackingError",
    "PlannedMember",
    "ShardLayout",
    "ShardPlan",
    "build_shard",
    "default_chunks_per_shard",
    "find_grids",
    "grid_from_metadata",
    "member_problems",
    "plan_shards",
    "verify_members",
]

DEFAULT_SHARD_BYTES = 64 << 20
SHARD_SUFFIX = ".shard"
METADATA_NAMES = (".zarray", "zarr.json")
# The index of every shard this module writes: the sharding_indexed default (little, crc32c).
_INDEX_CODECS = IndexCodecs()
_MD5_HEX = re.compile(r"[0-9a-f]{32}")


class PackingError(ValueError):
    """Malformed metadata or an inconsistent shard request (a caller's error, not a bug)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------------------------------------
# Chunk grids


@dataclass(frozen=True)
class ChunkGrid:
    """Which archive paths are an array's chunk files, and their grid coordinates.

    ``chunks`` is the shape of one chunk *file*: for a v3 array with ``sharding_indexed`` that
    is the shard shape.
    """

    array_path: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    separator: str
    prefix: str
    itemsize: int

    def __post_init__(self) -> None:
        if self.array_path.startswith("/") or self.array_path.endswith("/"):
            raise PackingError(f"array path {self.array_path!r} must be relative, no trailing /")
        if self.array_path and "" in self.array_path.split("/"):
            raise PackingError(f"array path {self.array_path!r} has an empty segment")
        if len(self.shape) != len(self.chunks):
            raise PackingError(f"chunk shape {self.chunks} does not match shape {self.shape}")
        if any(s < 0 for s in self.shape) or any(c < 1 for c in self.chunks):
            raise PackingError(
                f"shape {self.shape} must be non-negative and chunks {self.chunks} positive"
            )
        if self.separator not in ("/", "."):
            raise PackingError(f"chunk key separator must be '/' or '.', got {self.separator!r}")
        if self.prefix not in ("", "c"):
            raise PackingError(f"chunk key prefix must be '' or 'c', got {self.prefix!r}")
        if self.itemsize < 1:
            raise PackingError(f"itemsize must be positive, got {self.itemsize}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def _encoding(self) -> ChunkKeyEncoding:
        return ChunkKeyEncoding(
            "default" if self.prefix == "c" else "v2",
            "/" if self.separator == "/" else ".",
        )

    @property
    def _dir(self) -> str:
        return f"{self.array_path}/" if self.array_path else ""

    def grid_shape(self) -> tuple[int, ...]:
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunks, strict=True))

    def chunk_coords(self, path: str) -> tuple[int, ...] | None:
        """Grid coordinates when ``path`` (archive-relative) is exactly one of this array's chunk
        keys inside the grid, else None: only canonical integers, the right number of them."""
        if not path.startswith(self._dir):
            return None
        key = path[len(self._dir) :]
        if self.prefix:
            if key == self.prefix:
                parts: list[str] = []
            elif key.startswith(self.prefix + self.separator):
                parts = key[len(self.prefix) + 1 :].split(self.separator)
            else:
                return None
        elif self.ndim == 0:
            return () if key == "0" else None  # zarr v2's key for the one chunk of a 0-d array
        else:
            parts = key.split(self.separator)
        if len(parts) != self.ndim or not all(_CANONICAL_INT.fullmatch(p) for p in parts):
            return None
        coords = tuple(int(p) for p in parts)
        if any(c >= g for c, g in zip(coords, self.grid_shape(), strict=True)):
            return None
        return coords

    def chunk_key(self, coords: Sequence[int]) -> str:
        if len(coords) != self.ndim:
            raise PackingError(f"{len(coords)} coordinates for a {self.ndim}-d grid")
        return self._dir + self._encoding.key(coords)

    def chunk_nbytes(self) -> int:
        return self.itemsize * math.prod(self.chunks)


def _int_tuple(value: Any, what: str, source: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(_is_int(v) for v in value):
        raise PackingError(f"{source}: {what} must be a list of integers, got {value!r}")
    return tuple(value)


def _v2_itemsize(dtype: Any, source: str) -> int:
    if not isinstance(dtype, str | list):
        raise PackingError(f"{source}: dtype must be a string or a list, got {dtype!r}")
    try:
        parsed = np.dtype([tuple(f) for f in dtype] if isinstance(dtype, list) else dtype)
    except (TypeError, ValueError):
        return 1  # a dtype numpy doesn't know still has chunks; only size estimates suffer
    return parsed.itemsize if parsed.kind != "O" and parsed.itemsize > 0 else 1


def _v3_itemsize(data_type: Any) -> int:
    if isinstance(data_type, str):
        if data_type in DATA_TYPES:
            return DATA_TYPES[data_type].itemsize
        raw = re.fullmatch(r"r([1-9][0-9]*)", data_type)
        if raw and int(raw.group(1)) % 8 == 0:
            return int(raw.group(1)) // 8
    return 1  # strings, extension types: unknown per-element size


def grid_from_metadata(array_path: str, metadata_name: str, data: bytes) -> ChunkGrid | None:
    """The chunk grid an array's ``.zarray`` / ``zarr.json`` declares; None for a group."""
    source = f"{array_path}/{metadata_name}" if array_path else metadata_name
    if metadata_name in (".zgroup", ".zattrs", ".zmetadata"):
        return None
    if metadata_name not in METADATA_NAMES:
        raise PackingError(f"{source}: not a Zarr metadata file name")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as error:
        raise PackingError(f"{source}: not valid JSON ({error})") from None
    if not isinstance(doc, dict):
        raise PackingError(f"{source}: metadata must be a JSON object")
    if metadata_name == ".zarray":
        return _grid_v2(array_path, doc, source)
    return _grid_v3(array_path, doc, source)


def _grid_v2(array_path: str, doc: Mapping[str, Any], source: str) -> ChunkGrid:
    if doc.get("zarr_format", 2) != 2:
        raise PackingError(f"{source}: zarr_format must be 2, got {doc.get('zarr_format')!r}")
    for name in ("shape", "chunks", "dtype"):
        if name not in doc:
            raise PackingError(f"{source}: missing {name!r}")
    separator = doc.get("dimension_separator") or "."
    if separator not in ("/", "."):
        raise PackingError(f"{source}: dimension_separator must be '/' or '.', got {separator!r}")
    return _make_grid(
        source,
        array_path=array_path,
        shape=_int_tuple(doc["shape"], "shape", source),
        chunks=_int_tuple(doc["chunks"], "chunks", source),
        separator=separator,
        prefix="",
        itemsize=_v2_itemsize(doc["dtype"], source),
    )


def _grid_v3(array_path: str, doc: Mapping[str, Any], source: str) -> ChunkGrid | None:
    if doc.get("zarr_format") != 3:
        raise PackingError(f"{source}: zarr_format must be 3, got {doc.get('zarr_format')!r}")
    node_type = doc.get("node_type")
    if node_type == "group":
        return None
    if node_type != "array":
        raise PackingError(f"{source}: node_type must be 'array' or 'group', got {node_type!r}")
    if "shape" not in doc:
        raise PackingError(f"{source}: missing 'shape'")
    grid = doc.get("chunk_grid")
    if not isinstance(grid, Mapping) or grid.get("name") != "regular":
        raise PackingError(f"{source}: only a 'regular' chunk_grid is supported, got {grid!r}")
    config = grid.get("configuration")
    if not isinstance(config, Mapping) or "chunk_shape" not in config:
        raise PackingError(f"{source}: chunk_grid has no configuration.chunk_shape")
    encoding_json = doc.get("chunk_key_encoding") or {"name": "default"}
    if not isinstance(encoding_json, Mapping | str) or (
        isinstance(encoding_json, Mapping)
        and not isinstance(encoding_json.get("configuration") or {}, Mapping)
    ):
        raise PackingError(f"{source}: invalid chunk_key_encoding {encoding_json!r}")
    try:
        encoding = ChunkKeyEncoding.from_json(encoding_json)
    except (AttributeError, TypeError, ValueError) as error:
        raise PackingError(f"{source}: {error}") from None
    return _make_grid(
        source,
        array_path=array_path,
        shape=_int_tuple(doc["shape"], "shape", source),
        chunks=_int_tuple(config["chunk_shape"], "chunk_shape", source),
        separator=encoding.separator,
        prefix="c" if encoding.kind == "default" else "",
        itemsize=_v3_itemsize(doc.get("data_type")),
    )


def _make_grid(source: str, **fields: Any) -> ChunkGrid:
    try:
        return ChunkGrid(**fields)
    except PackingError as error:
        raise PackingError(f"{source}: {error}") from None


def find_grids(files: Mapping[str, bytes]) -> list[ChunkGrid]:
    """The chunk grids of every array among ``{archive path: bytes}`` metadata files, sorted by
    array path; other names (``.zgroup``, ``.zattrs``...) and groups are skipped."""
    grids = []
    for path, data in files.items():
        directory, _, name = path.rpartition("/")
        if name not in METADATA_NAMES:
            continue
        grid = grid_from_metadata(directory, name, data)
        if grid is not None:
            grids.append(grid)
    return sorted(grids, key=lambda g: g.array_path)


# ---------------------------------------------------------------------------------------------
# Shard layouts and plans


@dataclass(frozen=True)
class ShardLayout:
    """A grid cut into shards of ``chunks_per_shard`` chunk files each."""

    grid: ChunkGrid
    chunks_per_shard: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.chunks_per_shard) != self.grid.ndim or any(
            not _is_int(n) or n < 1 for n in self.chunks_per_shard
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


@dataclass(frozen=True)
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


def plan_shards(
    layouts: Sequence[ShardLayout], paths: Iterable[str]
) -> tuple[list[ShardPlan], list[str]]:
    """Group chunk files into shards (plans sorted by name); the rest stay loose, in input
    order. A path claimed by two layouts goes to the first; a repeated path counts once."""
    by_dir: dict[str, list[int]] = {}
    for i, layout in enumerate(layouts):
        by_dir.setdefault(layout.grid.array_path, []).append(i)
    shards: dict[tuple[int, tuple[int, ...]], dict[int, str]] = {}
    loose: list[str] = []
    seen: set[str] = set()
    for path in paths:
        if path in seen:
            continue
        seen.add(path)
        placed = False
        candidates = sorted(i for d in _ancestors(path) for i in by_dir.get(d, ()))
        for i in candidates:
            coords = layouts[i].grid.chunk_coords(path)
            if coords is not None:
                shard, slot = layouts[i].shard_of(coords)
                shards.setdefault((i, shard), {})[slot] = path
                placed = True
                break
        if not placed:
            loose.append(path)
    plans = []
    for (i, shard), members in shards.items():
        plans.append(
            ShardPlan(
                name=layouts[i].shard_name(shard),
                layout=layouts[i],
                members=tuple(PlannedMember(members[s], s) for s in sorted(members)),
            )
        )
    plans.sort(key=lambda p: p.name)
    for a, b in itertools.pairwise(plans):
        if a.name == b.name:
            raise PackingError(f"two arrays' layouts give the same shard name {a.name!r}")
    return plans, loose


# ---------------------------------------------------------------------------------------------
# Building and checking shard objects


@dataclass(frozen=True)
class MemberRecord:
    path: str
    offset: int
    length: int
    md5: str
    slot: int | None


@dataclass(frozen=True)
class BuiltShard:
    size: int
    md5: str
    members: tuple[MemberRecord, ...]


def build_shard(
    chunks_per_shard: Sequence[int],
    members: Iterable[tuple[str, int | None, bytes]],
    sink: BinaryIO,
) -> BuiltShard:
    """Write members' bytes in the given order, then the ``sharding_indexed`` index, to ``sink``.

    Holds one member at a time, so ``members`` can be a generator reading files. Members with
    slot None are stored but not indexed (files packed alongside that aren't chunks).
    """
    cps = tuple(int(n) for n in chunks_per_shard)
    if any(n < 1 for n in cps):
        raise PackingError(f"chunks_per_shard {cps} must be positive")
    slots = math.prod(cps)
    index = ShardIndex.empty(cps)
    whole = hashlib.md5(usedforsecurity=False)
    records: list[MemberRecord] = []
    paths: set[str] = set()
    used: dict[int, str] = {}
    offset = 0
    for path, slot, data in members:
        if path in paths:
            raise PackingError(f"{path!r} given twice")
        paths.add(path)
        if slot is not None:
            if not _is_int(slot) or not 0 <= slot < slots:
                raise PackingError(f"{path!r}: slot {slot!r} outside 0..{slots - 1}")
            if slot in used:
                raise PackingError(f"{path!r} and {used[slot]!r} both have slot {slot}")
            used[slot] = path
        view = memoryview(data).cast("B")
        sink.write(view)
        whole.update(view)
        length = len(view)
        if slot is not None:
            index.set(_unravel(slot, cps), offset, length)
        records.append(
            MemberRecord(
                path, offset, length, hashlib.md5(view, usedforsecurity=False).hexdigest(), slot
            )
        )
        offset += length
    encoded = index.encode(_INDEX_CODECS)
    sink.write(encoded)
    whole.update(encoded)
    return BuiltShard(offset + len(encoded), whole.hexdigest(), tuple(records))


def _unravel(slot: int, shape: Sequence[int]) -> tuple[int, ...]:
    coords = []
    for n in reversed(shape):
        slot, c = divmod(slot, n)
        coords.append(c)
    return tuple(reversed(coords))


def _field(member: MemberRecord | Mapping[str, Any], *names: str) -> Any:
    if isinstance(member, MemberRecord):
        return getattr(member, names[0])
    for name in names:
        if name in member:
            return member[name]
    return None


def member_problems(
    members: Sequence[MemberRecord] | Sequence[Mapping[str, Any]], object_size: int
) -> list[dict[str, str]]:
    """What is wrong with declared members of an object of ``object_size`` bytes, as
    ``{"path", "problem"}`` (empty when every range is inside the object, disjoint, and has a
    well-formed md5). Checked before trusting the ranges for reads or ``verify_members``."""
    problems: list[dict[str, str]] = []
    ranges: list[tuple[int, int, str]] = []
    seen: set[str] = set()
    for member in members:
        path = _field(member, "path")
        offset = _field(member, "offset")
        length = _field(member, "length", "size")
        md5 = _field(member, "md5")
        name = path if isinstance(path, str) else repr(path)

        def problem(text: str, name: str = name) -> None:
            problems.append({"path": name, "problem": text})

        if not isinstance(path, str) or not path:
            problem("path must be a non-empty string")
        elif path in seen:
            problem("duplicate path")
        else:
            seen.add(path)
        if not isinstance(md5, str) or not _MD5_HEX.fullmatch(md5):
            problem(f"md5 must be 32 lowercase hex digits, got {md5!r}")
        if not _is_int(offset) or not _is_int(length):
            problem(f"offset and length must be integers, got {offset!r} and {length!r}")
            continue
        if offset < 0:
            problem(f"negative offset {offset}")
        if length < 0:
            problem(f"negative length {length}")
        if offset < 0 or length < 0:
            continue
        if offset + length > object_size:
            problem(f"range {offset}..{offset + length} is past the object's {object_size} bytes")
        ranges.append((offset, length, name))
    # Zero-length ranges sort first at equal offsets, so they never count as overlapping.
    ranges.sort(key=lambda r: (r[0], r[1]))
    end, owner = 0, ""
    for offset, length, name in ranges:
        if offset < end and length > 0:
            problems.append(
                {"path": name, "problem": f"range {offset}..{offset + length} overlaps {owner!r}"}
            )
        if offset + length > end:
            end, owner = offset + length, name
    return problems


def verify_members(
    blocks: Iterable[bytes], members: Sequence[MemberRecord]
) -> list[dict[str, str]]:
    """Stream over a whole object once, checking each member's md5 as its bytes pass.

    ``blocks`` are consecutive pieces of the object, of any sizes. Members must not overlap
    (``member_problems`` first). Returns ``{"path", "expected", "actual"}`` per mismatch;
    ``actual`` is ``""`` when the object ended before the member's range did.
    """
    pending = sorted(members, key=lambda m: (m.offset, m.length))
    mismatches: list[dict[str, str]] = []
    hashers: dict[int, Any] = {}
    next_member = 0
    position = 0

    def finish(i: int) -> None:
        member = pending[i]
        digest = hashers.pop(i, None) or hashlib.md5(usedforsecurity=False)
        actual = digest.hexdigest()
        if actual != member.md5.lower():
            mismatches.append({"path": member.path, "expected": member.md5, "actual": actual})

    for block in blocks:
        view = memoryview(block).cast("B")
        start, end = position, position + len(view)
        position = end
        i = next_member
        while i < len(pending):
            member = pending[i]
            member_end = member.offset + member.length
            if member.offset > end or (member.offset == end and member.length > 0):
                break
            lo, hi = max(member.offset, start), min(member_end, end)
            if hi > lo:
                if i not in hashers:
                    hashers[i] = hashlib.md5(usedforsecurity=False)
                hashers[i].update(view[lo - start : hi - start])
            if member_end > end:
                break  # continues in the next block; later members start after it
            finish(i)
            i += 1
        next_member = i
    for i in range(next_member, len(pending)):
        member = pending[i]
        if member.offset + member.length <= position:
            finish(i)
        else:
            hashers.pop(i, None)
            mismatches.append({"path": member.path, "expected": member.md5, "actual": ""})
    return mismatches
