"""Sharded archives (docs/sharded.md): where packed files live, and the work on shard objects.

``ShardMember`` rows say where a packed file's bytes are; a path without one is loose. Shard
objects are immutable: verification reads them, compaction and conversion write new ones and
swap rows in a transaction, and an object is deleted only once no row points into it. So a crash
at any point leaves every file readable, and a rerun finishes the job.

Lock order as in services: ZarrArchive -> TreeLock. Member rows are only changed with the
archive's TreeLock held (propagation, compaction, conversion), so those three never interleave.
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F

from checksums import FileState
from objectstore import ObjectNotFound
from sharding.packing import (
    MemberRecord,
    PackingError,
    ShardLayout,
    build_shard,
    default_chunks_per_shard,
    find_grids,
    member_problems,
    plan_shards,
    verify_members,
)
from zarr_api.models import Batch, BatchFile, Shard, ShardMember, TreeLock, ZarrArchive
from zarr_api.paths import etag_problem, path_problem
from zarr_api.selectors import files_below
from zarr_api.storage import get_store
from zarr_api.tree import storage_map

logger = logging.getLogger(__name__)

STREAM_BLOCK = 8 << 20


# --- Declarations of a pack batch ----------------------------------------------------------------


@dataclass(frozen=True)
class MemberDeclaration:
    path: str
    md5: str
    size: int
    offset: int
    slot: int | None


@dataclass(frozen=True)
class ShardDeclaration:
    name: str
    md5: str
    size: int
    members: tuple[MemberDeclaration, ...]
    chunks_per_shard: list[int] | None = None


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


def parse_shards(body: Any) -> tuple[list[ShardDeclaration], list[dict[str, Any]]]:
    """The shards of a pack batch, and every problem found (each naming a shard or path)."""
    problems: list[dict[str, Any]] = []
    raw_shards = body.get("shards")
    if not isinstance(raw_shards, list) or not raw_shards:
        return [], [{"path": "", "problem": '"shards" must be a non-empty list'}]
    declarations: list[ShardDeclaration] = []
    for index, raw in enumerate(raw_shards):
        if not isinstance(raw, dict):
            problems.append({"path": f"shards[{index}]", "problem": "must be an object"})
            continue
        name = raw.get("name")
        label = name if isinstance(name, str) else f"shards[{index}]"
        problem = path_problem(name)
        if problem:
            problems.append({"path": label, "problem": f"shard name {problem}"})
        md5_problem = etag_problem(raw.get("etag"))
        if md5_problem:
            problems.append({"path": label, "problem": f"etag {md5_problem}"})
        size: int = raw.get("size")  # type: ignore[assignment]
        if not _is_count(size):
            problems.append({"path": label, "problem": "size must be a non-negative integer"})
            size = 0
        cps = raw.get("chunks_per_shard")
        if cps is not None and not (
            isinstance(cps, list) and cps and all(type(c) is int and c > 0 for c in cps)
        ):
            problems.append(
                {"path": label, "problem": "chunks_per_shard must be a list of positive integers"}
            )
            cps = None
        raw_members = raw.get("members")
        if not isinstance(raw_members, list) or not raw_members:
            problems.append({"path": label, "problem": '"members" must be a non-empty list'})
            continue
        members = []
        for m_index, member in enumerate(raw_members):
            if not isinstance(member, dict):
                problems.append({"path": f"{label} members[{m_index}]", "problem": "not an object"})
                continue
            path = member.get("path")
            problem = path_problem(path)
            if problem or not isinstance(path, str):
                problems.append({"path": path, "problem": problem or "must be a string"})
                continue
            slot = member.get("slot")
            if slot is not None and not _is_count(slot):
                problems.append({"path": path, "problem": "slot must be a non-negative integer"})
            if not _is_count(member.get("offset")) or not _is_count(member.get("size")):
                problems.append(
                    {"path": path, "problem": "offset and size must be non-negative integers"}
                )
                continue
            members.append(
                MemberDeclaration(
                    path,
                    str(member.get("md5")),
                    member["size"],
                    member["offset"],
                    slot if _is_count(slot) else None,
                )
            )
        records = [MemberRecord(m.path, m.offset, m.size, m.md5, m.slot) for m in members]
        for found in member_problems(records, size):
            problems.append(
                {"path": found["path"], "problem": f"in shard {label}: " + found["problem"]}
            )
        if isinstance(name, str):
            declarations.append(
                ShardDeclaration(name, str(raw.get("etag")), size, tuple(members), cps)
            )
    names = Counter(d.name for d in declarations)
    problems += [
        {"path": n, "problem": "shard name appears more than once"}
        for n, c in names.items()
        if c > 1
    ]
    return declarations, problems


def new_shard_key(archive: ZarrArchive, name: str) -> str:
    # A fresh key per object: shard objects are never overwritten, so a reader holding a
    # location never reads another object's bytes.
    return f"{archive.shard_prefix}{name}.{uuid.uuid4().hex[:12]}"


def declare_shards(
    archive: ZarrArchive, batch: Batch, declarations: Sequence[ShardDeclaration]
) -> list[Shard]:
    shards = Shard.objects.bulk_create(
        Shard(
            archive=archive,
            batch=batch,
            name=d.name,
            key=new_shard_key(archive, d.name),
            size=d.size,
            md5=d.md5,
            chunks_per_shard=d.chunks_per_shard,
        )
        for d in declarations
    )
    BatchFile.objects.bulk_create(
        (
            BatchFile(
                batch=batch,
                path=m.path,
                md5=m.md5,
                size=m.size,
                shard=shard,
                offset=m.offset,
                slot=m.slot,
            )
            for shard, d in zip(shards, declarations, strict=True)
            for m in d.members
        ),
        batch_size=2000,
    )
    return shards


def discard_shards(shards: Iterable[Shard]) -> None:
    """Mark shards discarded and delete their objects (the rows stay, for the record)."""
    shards = list(shards)
    if not shards:
        return
    Shard.objects.filter(pk__in=[s.pk for s in shards]).update(state=Shard.State.DISCARDED)
    get_store().delete_many(s.key for s in shards)


# --- Verification of members ---------------------------------------------------------------------


def _members_of(shard: Shard) -> list[MemberRecord]:
    rows = BatchFile.objects.filter(shard=shard).values_list(
        "path", "offset", "size", "md5", "slot"
    )
    return [MemberRecord(p, o or 0, s or 0, m, slot) for p, o, s, m, slot in rows]


def verify_pending_pack_batches(archive_pk: int) -> None:
    """Read every unverified shard of the archive's pending pack batches once, streaming, and
    check each member's md5. A batch with a bad member fails: its shards are discarded and the
    error names the paths. Runs without locks (it may take long); idempotent."""
    store = get_store()
    batches = Batch.objects.filter(
        archive_id=archive_pk, kind=Batch.Kind.PACK, state=Batch.State.PENDING
    ).order_by("sequence")
    for batch in batches:
        bad: list[dict[str, str]] = []
        for shard in Shard.objects.filter(batch=batch, verified=False):
            try:
                found = verify_members(
                    store.iter_chunks(shard.key, STREAM_BLOCK), _members_of(shard)
                )
            except ObjectNotFound:
                found = [{"path": shard.name, "expected": shard.md5, "actual": "(object missing)"}]
            if found:
                bad += found
            else:
                Shard.objects.filter(pk=shard.pk).update(verified=True)
        if bad:
            _fail_batch(batch, bad)


def _fail_batch(batch: Batch, bad: list[dict[str, str]]) -> None:
    shown = ", ".join(
        f"{b['path']!r} (declared {b['expected']}, stored {b['actual'] or 'nothing'})"
        for b in bad[:10]
    )
    more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
    error = f"{len(bad)} member(s) do not match their declared md5: {shown}{more}"
    with transaction.atomic():
        locked = Batch.objects.select_for_update().get(pk=batch.pk)
        if locked.state != Batch.State.PENDING:
            return
        locked.state = Batch.State.FAILED
        locked.error = error
        locked.save(update_fields=["state", "error"])
        shards = list(Shard.objects.filter(batch=locked))
        transaction.on_commit(lambda: discard_shards(shards))
    logger.warning("pack batch %s of archive %s failed: %s", batch.pk, batch.archive_id, error)


def unverified_pack_batches(archive_pk: int) -> set[int]:
    return set(
        Shard.objects.filter(
            archive_id=archive_pk,
            batch__state=Batch.State.PENDING,
            batch__kind=Batch.Kind.PACK,
            verified=False,
        ).values_list("batch_id", flat=True)
    )


# --- Applying batches to member rows -------------------------------------------------------------


@dataclass
class LocationChanges:
    # Paths that became members: their loose objects (if any) are now stale.
    packed: list[str] = field(default_factory=list)
    # Shards whose dead share passed the threshold.
    to_compact: list[int] = field(default_factory=list)


def apply_locations(archive: ZarrArchive, batch_ids: Sequence[int]) -> LocationChanges:
    """Point member rows at the batches' final state of each path. Called in the propagation's
    transaction with the TreeLock held, so it commits or rolls back with the batches' state."""
    final: dict[str, tuple[int, int | None, int | None, str, int | None] | None] = {}
    rows = (
        BatchFile.objects.filter(batch_id__in=batch_ids)
        .order_by("batch__sequence", "id")
        .values_list("batch__kind", "path", "shard_id", "offset", "size", "md5", "slot")
    )
    touched_kinds: set[str] = set()
    for kind, path, shard_id, offset, size, md5, slot in rows.iterator(chunk_size=2000):
        touched_kinds.add(kind)
        final[path] = (shard_id, offset, size, md5, slot) if kind == Batch.Kind.PACK else None
    result = LocationChanges()
    if not final:
        return result
    has_members = (
        Batch.Kind.PACK in touched_kinds or ShardMember.objects.filter(archive=archive).exists()
    )
    if not has_members:
        return result
    dead: Counter[int] = Counter()
    paths = list(final)
    for start in range(0, len(paths), 1000):
        chunk = paths[start : start + 1000]
        old = ShardMember.objects.filter(archive=archive, path__in=chunk)
        for shard_id, length in old.values_list("shard_id", "length"):
            dead[shard_id] += length
        old.delete()
    ShardMember.objects.bulk_create(
        (
            ShardMember(
                archive=archive,
                path=path,
                shard_id=loc[0],
                offset=loc[1] or 0,
                length=loc[2] or 0,
                md5=loc[3],
                slot=loc[4],
            )
            for path, loc in final.items()
            if loc is not None
        ),
        batch_size=2000,
    )
    result.packed = [path for path, loc in final.items() if loc is not None]
    new_shards = {loc[0] for loc in final.values() if loc is not None}
    Shard.objects.filter(pk__in=new_shards).update(state=Shard.State.LIVE)
    for shard_id, length in dead.items():
        Shard.objects.filter(pk=shard_id).update(dead_bytes=F("dead_bytes") + length)
    result.to_compact = compaction_due(dead.keys())
    return result


def compaction_due(shard_ids: Iterable[int]) -> list[int]:
    percent = settings.DANDIZARR_SHARD_COMPACT_PERCENT
    return [
        pk
        for pk, size, dead_bytes in Shard.objects.filter(
            pk__in=list(shard_ids), state=Shard.State.LIVE
        ).values_list("pk", "size", "dead_bytes")
        if dead_bytes * 100 >= percent * max(size, 1)
    ]


def delete_stale_loose(archive_pk: int, paths: Sequence[str]) -> None:
    """Delete loose objects of paths that are now packed, unless a later batch (open or
    pending) is uploading the path loose again: then the loose object is that batch's."""
    if not paths:
        return
    with transaction.atomic():
        archive = ZarrArchive.objects.select_for_update().get(pk=archive_pk)
        busy = set(
            BatchFile.objects.filter(
                batch__archive=archive,
                batch__kind=Batch.Kind.UPLOAD,
                batch__state__in=[Batch.State.OPEN, Batch.State.PENDING],
                path__in=paths,
            ).values_list("path", flat=True)
        )
        packed = set(
            ShardMember.objects.filter(archive=archive, path__in=paths).values_list(
                "path", flat=True
            )
        )
        stale = [p for p in paths if p in packed and p not in busy]
        get_store().delete_many(archive.storage_prefix + p for p in stale)


# --- Reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberLocation:
    key: str
    offset: int
    length: int


def member_location(archive: ZarrArchive, path: str) -> MemberLocation | None:
    row = (
        ShardMember.objects.filter(archive=archive, path=path)
        .values_list("shard__key", "offset", "length")
        .first()
    )
    return MemberLocation(*row) if row else None


def packed_paths(archive: ZarrArchive, paths: Iterable[str]) -> set[str]:
    paths = list(paths)
    found: set[str] = set()
    for start in range(0, len(paths), 1000):
        found.update(
            ShardMember.objects.filter(
                archive=archive, path__in=paths[start : start + 1000]
            ).values_list("path", flat=True)
        )
    return found


def iter_member_bytes(location: MemberLocation) -> Iterator[bytes]:
    store = get_store()
    end = location.offset + location.length
    position = location.offset
    while position < end:
        stop = min(position + STREAM_BLOCK, end)
        yield store.get_range(location.key, position, stop)
        position = stop


# --- Writing new shards (conversion and compaction) ----------------------------------------------


@dataclass(frozen=True)
class _Piece:
    path: str
    slot: int | None
    data: bytes


def _write_shard(
    archive: ZarrArchive, name: str, chunks_per_shard: Sequence[int], pieces: Sequence[_Piece]
) -> tuple[Shard, list[MemberRecord]]:
    """Build the shard in memory (one shard: tens of MB), store it under a fresh key and check
    what storage holds; returns an unsaved Shard and the members' records."""
    buffer = io.BytesIO()
    built = build_shard(chunks_per_shard, ((p.path, p.slot, p.data) for p in pieces), buffer)
    key = new_shard_key(archive, name)
    info = get_store().put(key, buffer.getvalue())
    if info.etag != built.md5 or info.size != built.size:
        raise RuntimeError(
            f"shard {key}: storage holds {info.etag}/{info.size}, wrote {built.md5}/{built.size}"
        )
    shard = Shard(
        archive=archive,
        name=name,
        key=key,
        size=built.size,
        md5=built.md5,
        state=Shard.State.LIVE,
        verified=True,
        chunks_per_shard=list(chunks_per_shard),
    )
    return shard, list(built.members)


def shard_compact(shard_pk: int) -> bool:
    """Rewrite a shard with only its live members; the old object goes once nothing points in.

    The copy is checked member by member (md5) before the swap; members deleted or moved while
    copying stay as they are (the swap only repoints rows that still point at the old shard).
    """
    old = (
        Shard.objects.filter(pk=shard_pk, state=Shard.State.LIVE).select_related("archive").first()
    )
    if old is None:
        return False
    archive = old.archive
    live = list(ShardMember.objects.filter(shard=old).order_by("offset"))
    pieces = []
    store = get_store()
    for member in live:
        data = (
            store.get_range(old.key, member.offset, member.offset + member.length)
            if member.length
            else b""
        )
        if hashlib.md5(data, usedforsecurity=False).hexdigest() != member.md5:
            raise RuntimeError(
                f"shard {old.key}: member {member.path!r} does not match its md5; run the audit"
            )
        pieces.append(_Piece(member.path, member.slot, data))
    new: Shard | None = None
    records: list[MemberRecord] = []
    if pieces:
        cps = old.chunks_per_shard or [max([p.slot or 0 for p in pieces]) + 1]
        slots_ok = all(p.slot is not None and p.slot < math.prod(cps) for p in pieces)
        if not slots_ok:
            pieces = [_Piece(p.path, None, p.data) for p in pieces]
        new, records = _write_shard(archive, old.name, cps, pieces)
    with transaction.atomic():
        TreeLock.objects.select_for_update().get(archive=archive)
        current = {m.path: m for m in ShardMember.objects.filter(shard=old).select_for_update()}
        moved = 0
        if new is not None:
            new.save()
            by_path = {r.path: r for r in records}
            for path, member in current.items():
                record = by_path.get(path)
                if record is not None and record.md5 == member.md5:
                    ShardMember.objects.filter(pk=member.pk).update(shard=new, offset=record.offset)
                    moved += 1
            dead = sum(r.length for r in records if r.path not in current)
            Shard.objects.filter(pk=new.pk).update(dead_bytes=dead)
        if ShardMember.objects.filter(shard=old).exists():
            return False  # a member appeared meanwhile (cannot happen under the lock, but be safe)
        Shard.objects.filter(pk=old.pk).update(state=Shard.State.DISCARDED)
        transaction.on_commit(lambda: store.delete_many([old.key]))
    logger.info("compacted shard %s into %s (%d members)", old.key, new.key if new else None, moved)
    return True


# --- Converting a loose archive (POST pack/) ---------------------------------------------


@dataclass
class PackReport:
    shards_written: int = 0
    files_packed: int = 0
    skipped: list[str] = field(default_factory=list)


def _layouts(archive: ZarrArchive, files: dict[str, FileState]) -> list[ShardLayout]:
    store = get_store()
    metadata = {
        path: store.get(archive.storage_prefix + path)
        for path in files
        if path.rsplit("/", 1)[-1] in {".zarray", "zarr.json"}
    }
    layouts = []
    for grid in find_grids(metadata):
        cps = default_chunks_per_shard(grid, settings.DANDIZARR_SHARD_TARGET_BYTES)
        layouts.append(ShardLayout(grid, cps))
    return layouts


def archive_pack_run(archive_pk: int) -> PackReport:
    """Pack every chunk file of the archive's arrays into shards, one shard at a time.

    Each shard: read its loose chunks (checked against the tree's md5), write the shard, check
    storage's ETag, then commit its member rows (TreeLock held), then delete the loose objects.
    A rerun skips files already packed, so a crash anywhere loses nothing.
    """
    archive = ZarrArchive.objects.get(pk=archive_pk)
    report = PackReport()
    files = {node.path: FileState(node.size, node.md5) for node in files_below(archive, "")}
    try:
        layouts = _layouts(archive, files)
    except PackingError as error:
        logger.warning("archive %s: cannot pack: %s", archive.zarr_id, error)
        layouts = []
    already = packed_paths(archive, files)
    plans, _loose = plan_shards(layouts, [p for p in files if p not in already])
    store = get_store()
    for plan in plans:
        keys = [archive.storage_prefix + m.path for m in plan.members]
        datas = storage_map(_get_or_none(store), keys, parallel=store.remote)
        pieces = []
        for member, data in zip(plan.members, datas, strict=True):
            state = files[member.path]
            if data is None or hashlib.md5(data, usedforsecurity=False).hexdigest() != state.md5:
                report.skipped.append(member.path)  # drift: the audit will say; stays loose
                continue
            pieces.append(_Piece(member.path, member.slot, data))
        if not pieces:
            continue
        shard, records = _write_shard(archive, plan.name, plan.layout.chunks_per_shard, pieces)
        with transaction.atomic():
            TreeLock.objects.select_for_update().get(archive=archive)
            shard.save()
            ShardMember.objects.bulk_create(
                ShardMember(
                    archive=archive,
                    path=r.path,
                    shard=shard,
                    offset=r.offset,
                    length=r.length,
                    md5=r.md5,
                    slot=r.slot,
                )
                for r in records
            )
        store.delete_many(archive.storage_prefix + r.path for r in records)
        report.shards_written += 1
        report.files_packed += len(records)
    ZarrArchive.objects.filter(pk=archive_pk).update(packing=False)
    logger.info(
        "archive %s packed: %d shards, %d files, %d left loose (drift)",
        archive.zarr_id,
        report.shards_written,
        report.files_packed,
        len(report.skipped),
    )
    return report


def pack_abandon(archive_pk: int, error: Exception) -> None:
    ZarrArchive.objects.filter(pk=archive_pk).update(packing=False)
    logger.error("archive %s: packing abandoned after retries: %s", archive_pk, error)


def _get_or_none(store: Any) -> Any:
    def get(key: str) -> bytes | None:
        try:
            return bytes(store.get(key))
        except ObjectNotFound:
            return None

    return get


# --- Audit of members ----------------------------------------------------------------------------


@dataclass
class MemberAudit:
    entries: list[tuple[str, int, str]]  # (path, size, actual md5), sorted by path
    corrupted: list[dict[str, str]]
    orphan_shards: list[str]


def audit_members(archive: ZarrArchive) -> MemberAudit:
    """Read every live shard once and check each member's md5 against its row (the tree's
    md5); return the members as they really are, and shard objects no row knows of."""
    store = get_store()
    entries: list[tuple[str, int, str]] = []
    corrupted: list[dict[str, str]] = []
    known_keys: set[str] = set()
    for shard in Shard.objects.filter(archive=archive).exclude(state=Shard.State.DISCARDED):
        known_keys.add(shard.key)
        if shard.state != Shard.State.LIVE:
            continue
        members = [
            MemberRecord(m.path, m.offset, m.length, m.md5, m.slot)
            for m in ShardMember.objects.filter(shard=shard)
        ]
        if not members:
            continue
        actual = _actual_md5s(store, shard.key, members)
        for member in members:
            md5 = actual.get(member.path, "")
            if md5 != member.md5:
                corrupted.append({"path": member.path, "expected": member.md5, "actual": md5})
            if md5:
                entries.append((member.path, member.length, md5))
    orphans = [info.key for info in store.list(archive.shard_prefix) if info.key not in known_keys]
    entries.sort()
    return MemberAudit(entries, corrupted, orphans)


def _actual_md5s(store: Any, key: str, members: Sequence[MemberRecord]) -> dict[str, str]:
    """Each member's md5 as stored, streaming over the object once ("" when it is cut short)."""
    bad = {
        b["path"]: b["actual"]
        for b in (
            verify_members(store.iter_chunks(key, STREAM_BLOCK), members)
            if store.head(key) is not None
            else [{"path": m.path, "actual": ""} for m in members]
        )
    }
    return {m.path: bad.get(m.path, m.md5) for m in members}
