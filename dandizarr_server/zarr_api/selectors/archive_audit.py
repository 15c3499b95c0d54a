"""The audit's report: an archive's tree recomputed from a storage listing (and packed members
from their shards' bytes), compared with its .checksum tree. Reads only, and with no database
lock held: listing a large archive takes minutes. What it found is written by the repair
(services.audit), which re-checks under its locks that nothing moved meanwhile."""

from __future__ import annotations

import heapq
import posixpath
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Max, Q

from dandizarr.checksums import DirectoryListing, TreeSummary, compute_tree, is_md5
from dandizarr.objectstore import ListingOrderError, ObjectInfo, ObjectStore
from dandizarr.sharding.archive_packing import MemberRecord, verify_members
from dandizarr_server.zarr_api.domain.keys import ARCHIVE_ROOTS
from dandizarr_server.zarr_api.models import (
    BUSY_STATES,
    Batch,
    Shard,
    ZarrArchive,
)
from dandizarr_server.zarr_api.runtime.storage import STREAM_BLOCK, get_store
from dandizarr_server.zarr_api.runtime.tree import StorageChecksumTree
from dandizarr_server.zarr_api.selectors.archive_versions import archive_versions
from dandizarr_server.zarr_api.selectors.draft_trees import archive_tree
from dandizarr_server.zarr_api.selectors.shard_members import live_members
from dandizarr_server.zarr_api.selectors.stored_md5s import UNPROVEN, stored_md5
from dandizarr_server.zarr_api.selectors.version_trees import version_tree
from dandizarr_server.zarr_api.selectors.write_sessions import staged_keys


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


@dataclass(frozen=True)
class AuditBasis:
    """What every change of an archive's files through the service moves: its row's
    ``modified`` (a tree update, a reset, a conversion), its newest batch (a batch started),
    its unfinished batches' states (completed, cancelled, applied) and its shards (the newest,
    how many are live: a compaction's swap). Unchanged between the report and the repair,
    nothing but drift changed the archive meanwhile."""

    modified: datetime
    newest_batch: int | None
    unfinished_batches: tuple[tuple[int, str], ...]
    newest_shard: int | None
    live_shards: int


def audit_basis(archive: ZarrArchive) -> AuditBasis:
    """Read from the database as it is now (``archive``'s row read again)."""
    batches = Batch.objects.filter(archive_id=archive.pk)
    shards = Shard.objects.filter(archive_id=archive.pk).aggregate(
        newest=Max("pk"), live=Count("pk", filter=Q(state=Shard.State.LIVE))
    )
    return AuditBasis(
        ZarrArchive.objects.values_list("modified", flat=True).get(pk=archive.pk),
        batches.aggregate(newest=Max("pk"))["newest"],
        tuple(batches.filter(state__in=BUSY_STATES).order_by("pk").values_list("pk", "state")),
        shards["newest"],
        shards["live"],
    )


@dataclass
class AuditFindings:
    """The report, and what its repair writes and re-checks."""

    report: AuditReport
    basis: AuditBasis
    rewrites: dict[str, DirectoryListing]  # directories whose .checksum differs, children first
    stale_directories: list[str]  # .checksum files of directories storage no longer has
    # The tree's listings of the rewritten and stale directories as the report read them: the
    # repair finds them the same under its lock, and records what it changes from them.
    listings_before: dict[str, DirectoryListing | None]


def archive_audit_report(archive: ZarrArchive) -> AuditFindings:
    """Recompute the whole tree from a storage listing and compare it with the archive's
    .checksum tree; no lock held, nothing written.

    Streams the listing when storage lists in byte order (else sorts it in memory); each
    directory's .checksum is compared as soon as it is finished.
    """
    store = get_store()
    basis = audit_basis(archive)  # before anything is read: a change after it moves it
    archive = ZarrArchive.objects.get(pk=archive.pk)
    tree = archive_tree(archive)
    report = AuditReport(str(archive.zarr_id), archive.checksum, "", 0, 0)
    prefix = archive.storage_prefix
    members = _audit_members(archive) if archive.shards.exists() else None
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
        for info in store.list(archive.checksum_prefix)
        if (directory := posixpath.dirname(info.key[len(archive.checksum_prefix) :])) not in seen
        or (directory == "" and summary.count == 0)
    ]
    report.stale_checksum_files_deleted = stale
    report.checksum_after = summary.digest
    report.file_count = summary.count
    report.size = summary.size
    before = {**recomputed.before, **tree.read_many(sorted(set(stale) - recomputed.before.keys()))}
    return AuditFindings(report, basis, recomputed.rewrites, stale, before)


def versions_verify(archive: ZarrArchive) -> list[int]:
    """The numbers of the archive's versions whose tree does not hash to their checksum."""
    return [
        version.number
        for version in archive_versions(archive)
        if version_tree(archive, version).summary().digest != version.checksum
    ]


@dataclass
class Recomputed:
    summary: TreeSummary
    rewrites: dict[str, DirectoryListing]  # directories whose .checksum differs, children first
    before: dict[str, DirectoryListing | None]  # the tree's listing of each rewritten one
    seen: set[str]
    stale_loose_copies: list[str]  # loose objects of packed files


def _recompute(
    tree: StorageChecksumTree,
    prefix: str,
    listing: Iterable[ObjectInfo],
    members: MemberAudit | None,
) -> Recomputed:
    """The tree of the listed loose files plus the packed members, compared with ``tree``.

    A listing that turns out to be out of order (ListingOrderError) leaves nothing behind.
    ``listing`` in byte order; the members are sorted by path.
    """
    result = Recomputed(TreeSummary("", 0, 0), {}, {}, set(), [])

    def on_directory(directory: str, listing: DirectoryListing) -> None:
        result.seen.add(directory)
        if (held := tree.read(directory)) != listing:
            result.rewrites[directory] = listing
            result.before[directory] = held

    entries: Iterator[tuple[str, int, str]] = (
        (info.key[len(prefix) :], info.size, md5)
        for info in listing
        if (md5 := _listed_md5(info)) is not None
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


def _listed_md5(info: ObjectInfo) -> str | None:
    """The md5 a listed object counts with: its ETag, or for one sent in parts the md5 proven
    of its bytes; None (left out of the tree) for parts never proven, which no checksum may
    take (docs/api.md, "Big files")."""
    if is_md5(info.etag):
        return info.etag
    md5 = stored_md5(info.key, info.etag)
    return None if md5 in (None, UNPROVEN) else md5


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
    listed = [info.key for info in store.list(archive.shard_prefix) if info.key not in known_keys]
    # Read after the listing: a file staged meanwhile was recorded before its URL was made.
    staged = staged_keys(archive, listed)
    orphans = [key for key in listed if key not in staged]
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
