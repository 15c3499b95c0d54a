"""Writing a shard object (member bytes, then a ``sharding_indexed`` index) and checking the
members a shard object declares against its bytes."""

from __future__ import annotations

import hashlib
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from dandizarr.checksums import is_md5
from dandizarr.sharding.archive_packing.chunk_grids import PackingError, is_plain_int
from dandizarr.sharding.index import IndexCodecs, ShardIndex

__all__ = ["BuiltShard", "MemberRecord", "build_shard", "member_problems", "verify_members"]

# The index of every shard this module writes: the sharding_indexed default (little, crc32c).
_INDEX_CODECS = IndexCodecs()


@dataclass(frozen=True, slots=True)  # one per file: no __dict__
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
            if not is_plain_int(slot) or not 0 <= slot < slots:
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
    members: Iterable[MemberRecord] | Iterable[Mapping[str, Any]], object_size: int
) -> list[dict[str, str]]:
    """What is wrong with declared members of an object of ``object_size`` bytes, as
    ``{"path", "problem"}`` (empty when every range is inside the object, disjoint, and has a
    well-formed md5). Checked before trusting the ranges for reads or ``verify_members``.

    ``members`` is read once (a generator will do): a pack batch declares 100,000 of them, and
    the ranges are kept as two integer arrays (16 bytes a member) instead of a tuple each."""
    problems: list[dict[str, str]] = []
    offsets: array[int] = array("q")
    lengths: array[int] = array("q")
    names: list[str] = []
    in_order = True  # the ranges came sorted (a client writes members in offset order)
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
        if not is_md5(md5):
            problem(f"md5 must be 32 lowercase hex digits, got {md5!r}")
        if not is_plain_int(offset) or not is_plain_int(length):
            problem(f"offset and length must be integers, got {offset!r} and {length!r}")
            continue
        if offset < 0:
            problem(f"negative offset {offset}")
        if length < 0:
            problem(f"negative length {length}")
        if offset < 0 or length < 0:
            continue
        if offset + length >= 1 << 63:  # past the arrays' 8-byte integers, and any object
            problem(f"range {offset}..{offset + length} is past any object's size")
            continue
        if offset + length > object_size:
            problem(f"range {offset}..{offset + length} is past the object's {object_size} bytes")
        if offsets and (offset, length) < (offsets[-1], lengths[-1]):
            in_order = False
        offsets.append(offset)
        lengths.append(length)
        names.append(name)
    # Zero-length ranges sort first at equal offsets, so they never count as overlapping.
    order: Iterable[int] = range(len(offsets))
    if not in_order:
        order = sorted(order, key=lambda i: (offsets[i], lengths[i]))
    end, owner = 0, ""
    for i in order:
        offset, length, name = offsets[i], lengths[i], names[i]
        if offset < end and length > 0:
            problems.append(
                {"path": name, "problem": f"range {offset}..{offset + length} overlaps {owner!r}"}
            )
        if offset + length > end:
            end, owner = offset + length, name
    return problems


def verify_members(
    blocks: Iterable[bytes], members: Iterable[MemberRecord], *, ordered: bool = False
) -> list[dict[str, str]]:
    """Stream over a whole object once, checking each member's md5 as its bytes pass.

    ``blocks`` are consecutive pieces of the object, of any sizes. Members must not overlap
    (``member_problems`` first); ``ordered``: they come sorted by offset and length already,
    and are read as they are needed instead of sorted into a list (a shard's 100,000 members
    streamed from the database). Returns ``{"path", "expected", "actual"}`` per mismatch;
    ``actual`` is ``""`` when the object ended before the member's range did.
    """
    pending = iter(members if ordered else sorted(members, key=lambda m: (m.offset, m.length)))
    mismatches: list[dict[str, str]] = []
    # Members do not overlap: at most one (the one a block ends inside) is hashed at a time.
    hasher: Any = None
    member = next(pending, None)
    position = 0

    def finish(member: MemberRecord) -> None:
        actual = (hasher or hashlib.md5(usedforsecurity=False)).hexdigest()
        if actual != member.md5.lower():
            mismatches.append({"path": member.path, "expected": member.md5, "actual": actual})

    for block in blocks:
        view = memoryview(block).cast("B")
        start, end = position, position + len(view)
        position = end
        while member is not None:
            member_end = member.offset + member.length
            if member.offset > end or (member.offset == end and member.length > 0):
                break
            lo, hi = max(member.offset, start), min(member_end, end)
            if hi > lo:
                if hasher is None:
                    hasher = hashlib.md5(usedforsecurity=False)
                hasher.update(view[lo - start : hi - start])
            if member_end > end:
                break  # continues in the next block; later members start after it
            finish(member)
            hasher = None
            member = next(pending, None)
    while member is not None:
        if member.offset + member.length <= position:
            finish(member)
        else:
            mismatches.append({"path": member.path, "expected": member.md5, "actual": ""})
        hasher = None
        member = next(pending, None)
    return mismatches
