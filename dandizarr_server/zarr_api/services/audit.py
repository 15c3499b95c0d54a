"""The audit: an archive's tree recomputed from a storage listing (and packed members from
their shards' bytes), whatever differs rewritten or deleted, and the drift reported."""

from __future__ import annotations

import heapq
import posixpath
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from dandizarr.checksums import DirectoryListing, FileState, TreeSummary, compute_tree
from dandizarr.objectstore import ListingOrderError, ObjectInfo, ObjectStore
from dandizarr.sharding.archive_packing import MemberRecord, verify_members
from dandizarr_server.zarr_api.exceptions import Conflict
from dandizarr_server.zarr_api.keys import ARCHIVE_ROOTS
from dandizarr_server.zarr_api.models import (
    ArchiveVersion,
    Batch,
    Shard,
    ShardMember,
    ZarrArchive,
)
from dandizarr_server.zarr_api.selectors.archive_contents import archive_tree
from dandizarr_server.zarr_api.selectors.shard_members import live_members
from dandizarr_server.zarr_api.selectors.version_trees import version_tree
from dandizarr_server.zarr_api.services.archive_locks import (
    has_open_batch,
    lock_archive,
    lock_tree,
)
from dandizarr_server.zarr_api.services.batch_endings import batch_endings_settle
from dandizarr_server.zarr_api.services.file_history import replaced_record
from dandizarr_server.zarr_api.services.tree_updates import tree_update_apply
from dandizarr_server.zarr_api.storage import STREAM_BLOCK, get_store
from dandizarr_server.zarr_api.tree import StorageChecksumTree


@dataclass
class AuditReport:
    zarr_id: str
    checksum_before: str
    checksum_after: str
    file_count: int
    size: int
    directories_rewritten: list[str] = field(default_factory=list)
    stale_checksum_files_deleted: list[str] = field(default_factory=list)
    # Sharded archives: members whose bytes do not match their md5 (the tree now has the md5
    # of what is stored), loose copies of packed files and shard objects no row knows, deleted.
    corrupted_members: list[dict[str, str]] = field(default_factory=list)
    stale_loose_copies_deleted: list[str] = field(default_factory=list)
    orphan_shards_deleted: list[str] = field(default_factory=list)
    # Archive versions whose tree (the draft's with FileHistory applied) does not hash to their
    # published checksum: a version lost exactness (never expected; reported, not repaired).
    versions_mismatched: list[int] = field(default_factory=list)

    @property
    def drift(self) -> bool:
        return bool(
            self.directories_rewritten
            or self.stale_checksum_files_deleted
            or self.corrupted_members
            or self.stale_loose_copies_deleted
            or self.orphan_shards_deleted
            or self.versions_mismatched
            or self.checksum_before != self.checksum_after
        )


def archive_audit(archive: ZarrArchive, *, repair: bool = True) -> AuditReport:
    """Recompute the whole tree from a storage listing, rewrite what differs, report drift;
    with ``repair=False`` report only, changing nothing (after restoring a backup, say).

    Streams the listing when storage lists in byte order (else sorts it in memory); each
    directory's .checksum is compared as soon as it is finished, and the ones that differ are
    written once the whole listing has been read.
    """
    store = get_store()
    sharded = archive.shards.exists()
    if sharded:
        # Settle pending batches first: a pending member or loose overwrite is not yet in the
        # rows the audit reads the archive from.
        tree_update_apply(archive.pk)
    with transaction.atomic():
        locked = lock_archive(archive)
        if has_open_batch(locked):
            raise Conflict(
                f"zarr archive {locked.zarr_id} has an upload batch in progress; cancel it first"
            )
        batch_endings_settle(locked)
        if sharded and Batch.objects.filter(archive=locked, state=Batch.State.PENDING).exists():
            raise Conflict(
                f"zarr archive {locked.zarr_id} has checksum updates pending; audit it again "
                "once its checksum_status is complete"
            )
        lock_tree(locked.pk)
        tree = archive_tree(locked)
        report = AuditReport(str(locked.zarr_id), locked.checksum, "", 0, 0)
        prefix = locked.storage_prefix
        members = _audit_members(locked) if locked.shards.exists() else None
        try:
            # Streams while storage lists in byte order (S3 does)...
            recomputed = _recompute(tree, prefix, store.list_ordered(prefix), members)
        except ListingOrderError:
            # ...and a server that lists otherwise (SeaweedFS) has its listing sorted here.
            recomputed = _recompute(tree, prefix, store.list_sorted(prefix), members)
        report.directories_rewritten = list(recomputed.rewrites)
        seen, summary = recomputed.seen, recomputed.summary
        if members is not None:
            report.corrupted_members = members.corrupted
            report.stale_loose_copies_deleted = recomputed.stale_loose_copies
            report.orphan_shards_deleted = members.orphan_shards
        stale = [
            directory
            for info in store.list(locked.checksum_prefix)
            if (directory := posixpath.dirname(info.key[len(locked.checksum_prefix) :])) not in seen
            or (directory == "" and summary.count == 0)
        ]
        report.stale_checksum_files_deleted = stale
        report.checksum_after = summary.digest
        report.file_count = summary.count
        report.size = summary.size
        if not repair:
            report.versions_mismatched = versions_verify(locked)
            return report
        if locked.generation > 1:
            # What the repair changes in the draft, recorded for its versions first.
            replaced_record(locked, _file_changes(tree, recomputed.rewrites, stale))
        tree.write_many(recomputed.rewrites)
        store.delete_many(prefix + p for p in report.stale_loose_copies_deleted)
        store.delete_many(report.orphan_shards_deleted)
        for bad in report.corrupted_members:
            rows = ShardMember.objects.filter(archive=locked, path=bad["path"])
            if bad["actual"]:
                rows.update(md5=bad["actual"])  # storage is the truth, as for loose files
            else:
                rows.delete()  # its bytes are gone
        tree.delete_many(stale)
        now = timezone.now()
        ZarrArchive.objects.filter(pk=locked.pk).update(
            checksum=summary.digest, file_count=summary.count, size=summary.size, modified=now
        )
        # Storage is the truth now: pending batches are reflected in the listing.
        Batch.objects.filter(archive=locked, state=Batch.State.PENDING).update(
            state=Batch.State.APPLIED, applied=now, note="applied by audit"
        )
    report.versions_mismatched = versions_verify(ZarrArchive.objects.get(pk=archive.pk))
    return report


def _file_changes(
    tree: StorageChecksumTree, rewrites: dict[str, DirectoryListing], stale: list[str]
) -> dict[str, FileState | None]:
    """The files a repair changes: each rewritten or deleted directory's files, before and
    after."""
    changes: dict[str, FileState | None] = {}
    before = tree.read_many(sorted({*rewrites, *stale}))
    for directory, old in before.items():
        new = rewrites.get(directory)
        prefix = f"{directory}/" if directory else ""
        old_files = old.files if old is not None else {}
        new_files = new.files if new is not None else {}
        for name in old_files.keys() | new_files.keys():
            was, now = old_files.get(name), new_files.get(name)
            if was != now:
                changes[prefix + name] = (
                    None if now is None else FileState(size=now.size, md5=now.digest)
                )
    return changes


def versions_verify(archive: ZarrArchive) -> list[int]:
    """The numbers of the archive's versions whose tree does not hash to their checksum."""
    return [
        version.number
        for version in ArchiveVersion.objects.filter(archive=archive).order_by("number")
        if version_tree(archive, version).summary().digest != version.checksum
    ]


@dataclass
class Recomputed:
    summary: TreeSummary
    rewrites: dict[str, DirectoryListing]  # directories whose .checksum differs, children first
    seen: set[str]
    stale_loose_copies: list[str]  # loose objects of packed files


def _recompute(
    tree: StorageChecksumTree,
    prefix: str,
    listing: Iterable[ObjectInfo],
    members: MemberAudit | None,
) -> Recomputed:
    """The tree of the listed loose files plus the packed members, compared with ``tree``.

    Writes nothing, so a listing that turns out to be out of order (ListingOrderError) leaves
    no trace. ``listing`` in byte order; the members are sorted by path.
    """
    result = Recomputed(TreeSummary("", 0, 0), {}, set(), [])

    def on_directory(directory: str, listing: DirectoryListing) -> None:
        result.seen.add(directory)
        if tree.read(directory) != listing:
            result.rewrites[directory] = listing

    entries: Iterator[tuple[str, int, str]] = (
        (info.key[len(prefix) :], info.size, info.etag) for info in listing
    )
    if members is not None:
        packed = {path for path, _, _ in members.entries}
        listed = entries

        def loose_only() -> Iterator[tuple[str, int, str]]:
            for entry in listed:
                if entry[0] in packed:
                    result.stale_loose_copies.append(entry[0])
                else:
                    yield entry

        # Both sorted by path (code point order, which is UTF-8 byte order: S3's).
        entries = heapq.merge(loose_only(), members.entries)
    result.summary = compute_tree(entries, on_directory=on_directory)
    return result


@dataclass
class MemberAudit:
    entries: list[tuple[str, int, str]]  # (path, size, actual md5), sorted by path
    corrupted: list[dict[str, str]]
    orphan_shards: list[str]


def _audit_members(archive: ZarrArchive) -> MemberAudit:
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
        members = live_members(shard)
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


def _actual_md5s(store: ObjectStore, key: str, members: Sequence[MemberRecord]) -> dict[str, str]:
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


def unreferenced_archives(known: set[str]) -> dict[str, int]:
    """Archives storage holds that the database does not know (a backup restored from before
    they were made, a write behind the service): zarr id -> objects under its prefixes. Lists
    every key of the three layouts' prefixes: an audit's cost, once."""
    store = get_store()
    found: dict[str, int] = {}
    for top in ARCHIVE_ROOTS:
        for info in store.list(top):
            zarr_id = info.key[len(top) :].split("/", 1)[0]
            if zarr_id and zarr_id not in known:
                found[zarr_id] = found.get(zarr_id, 0) + 1
    return found
