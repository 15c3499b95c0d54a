"""Business logic: every write to dandisets, archives and batches goes through here.

Locking (Zulip's rules): whatever reads state and then writes based on it holds a row lock, and
locks are always taken in one order: Dandiset -> ZarrArchive -> TreeLock. Batch operations lock
the archive row; the tree update locks the archive's TreeLock row, so a batch may be started or
completed while the previous one is being applied.
"""

from __future__ import annotations

import heapq
import logging
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Max
from django.utils import timezone

from checksums import TreeSummary, apply_changes, compute_tree
from objectstore import ObjectInfo
from zarr_api import shards
from zarr_api.exceptions import Conflict, Forbidden, NotFound, ValidationFailed
from zarr_api.models import (
    Asset,
    Batch,
    BatchFile,
    Dandiset,
    ShardMember,
    TreeLock,
    Version,
    ZarrArchive,
)
from zarr_api.paths import etag_problem, path_problem
from zarr_api.selectors import (
    ArchiveView,
    archive_tree,
    archive_tree_cached,
    archive_view,
    parse_zarr_id,
    pending_changes,
    user_can_write,
)
from zarr_api.storage import get_store
from zarr_api.tree import storage_map, tree_version

logger = logging.getLogger(__name__)


# --- Dandisets and archives ------------------------------------------------------------------


def dandiset_create(*, user: Any, name: str) -> Dandiset:
    with transaction.atomic():
        dandiset = Dandiset.objects.create(name=name)
        dandiset.owners.add(user)
        Version.objects.create(dandiset=dandiset, version=Version.DRAFT)
    return dandiset


def _require_writer(user: Any, dandiset: Dandiset) -> None:
    if not user_can_write(user, dandiset):
        raise Forbidden(f"only owners of dandiset {dandiset.identifier} (or staff) may do this")


def _require_unfrozen(archive: ZarrArchive) -> None:
    if archive.frozen:
        raise Forbidden(
            f"zarr archive {archive.zarr_id} is frozen: a published version of dandiset "
            f"{archive.dandiset.identifier} contains it, so it can no longer change"
        )


def archive_create(
    *, user: Any, dandiset: Dandiset, name: str, layout: str = ZarrArchive.Layout.LOOSE
) -> ZarrArchive:
    _require_writer(user, dandiset)
    problem = path_problem(name) if "/" not in name else "must be a single name without '/'"
    if problem:
        raise ValidationFailed(f"archive name {name!r} {problem}")
    if layout not in ZarrArchive.Layout.values:
        raise ValidationFailed(
            f"layout {layout!r} is not one of {', '.join(ZarrArchive.Layout.values)}"
        )
    try:
        with transaction.atomic():
            archive = ZarrArchive.objects.create(dandiset=dandiset, name=name, layout=layout)
            TreeLock.objects.create(archive=archive)
    except IntegrityError as error:
        raise Conflict(
            f"dandiset {dandiset.identifier} already has a zarr archive named {name!r}"
        ) from error
    return archive


def _lock_archive(archive: ZarrArchive) -> ZarrArchive:
    return ZarrArchive.objects.select_for_update().select_related("dandiset").get(pk=archive.pk)


# --- Upload batches --------------------------------------------------------------------------


@dataclass(frozen=True)
class UploadTarget:
    path: str
    upload_url: str


def _invalid(what: str, problems: list[dict[str, Any]]) -> ValidationFailed:
    """A 400 naming the first few offending paths in its message and all of them in ``paths``."""
    shown = "; ".join(f"{p['path']!r} {p['problem']}" for p in problems[:5])
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return ValidationFailed(f"invalid {what}: {shown}{more}", paths=problems)


def _heads(archive: ZarrArchive, paths: Sequence[str]) -> dict[str, ObjectInfo | None]:
    """Size and ETag of each path of the archive in storage, requested concurrently."""
    prefix = archive.storage_prefix
    infos = get_store().head_many([prefix + p for p in paths], mapper=storage_map)
    return {p: infos[prefix + p] for p in paths}


def _check_batch_size(count: int) -> None:
    limit = settings.DANDIZARR_BATCH_LIMIT
    if count == 0:
        raise ValidationFailed("the batch is empty: give at least one file")
    if count > limit:
        raise ValidationFailed(f"the batch has {count} files; at most {limit} are allowed")


def _validate_paths(paths: Sequence[Any]) -> None:
    problems = [{"path": p, "problem": problem} for p in paths if (problem := path_problem(p))]
    seen: set[str] = set()
    for path in paths:
        if path in seen:
            problems.append({"path": path, "problem": "appears more than once in the batch"})
        seen.add(path)
    if problems:
        raise _invalid("paths", problems)


def _check_file_directory_clashes(paths: Sequence[str], view: ArchiveView) -> None:
    """A file may not share its path with a directory, in the batch or in the archive."""
    batch = set(paths)
    ancestors = {a for p in paths for a in _ancestors(p)}
    problems = []
    for path in paths:
        if path in ancestors:
            problems.append({"path": path, "problem": "is also a directory in this batch"})
    view.load({posixpath.dirname(p) for p in paths} | {posixpath.dirname(a) for a in ancestors})
    for path in paths:
        if view.is_directory(path):
            problems.append({"path": path, "problem": "is a directory in the archive"})
    for ancestor in sorted(ancestors - batch):
        if view.file_state(ancestor) is not None:
            clashing = next(p for p in paths if p.startswith(ancestor + "/"))
            problems.append(
                {"path": clashing, "problem": f"would be inside {ancestor!r}, which is a file"}
            )
    if problems:
        raise _invalid("paths", problems)


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _require_idle(archive: ZarrArchive) -> None:
    if archive.packing:
        raise Conflict(
            f"zarr archive {archive.zarr_id} is being converted into shards; try again when "
            "its detail shows packing: false"
        )


def _open_batch_exists(archive: ZarrArchive) -> None:
    if Batch.objects.filter(archive=archive, state=Batch.State.OPEN).exists():
        raise Conflict(
            f"zarr archive {archive.zarr_id} already has an upload batch in progress; "
            "complete or cancel it first"
        )


def _create_open_batch(archive: ZarrArchive, user: Any, kind: str) -> Batch:
    try:
        with transaction.atomic():
            return Batch.objects.create(
                archive=archive, kind=kind, state=Batch.State.OPEN, user=user
            )
    except IntegrityError as error:  # the unique constraint caught a concurrent start
        raise Conflict(
            f"zarr archive {archive.zarr_id} already has an upload batch in progress"
        ) from error


@dataclass(frozen=True)
class PackTargets:
    batch: Batch
    shards: list[UploadTarget]


def pack_batch_start(*, user: Any, archive: ZarrArchive, body: Any) -> PackTargets:
    """Start a pack batch: shard objects to PUT, each declaring its member files."""
    declarations, problems = shards.parse_shards(body)
    if problems:
        raise _invalid("shards", problems)
    limit = settings.DANDIZARR_BATCH_LIMIT
    if len(declarations) > limit:
        raise ValidationFailed(
            f"the batch has {len(declarations)} shards; at most {limit} are allowed"
        )
    members = [m for d in declarations for m in d.members]
    member_limit = settings.DANDIZARR_PACK_MEMBER_LIMIT
    if len(members) > member_limit:
        raise ValidationFailed(
            f"the batch declares {len(members)} member files; at most {member_limit} are allowed"
        )
    paths = [m.path for m in members]
    _validate_paths(paths)
    with transaction.atomic():
        archive = _lock_archive(archive)
        _require_writer(user, archive.dandiset)
        _require_unfrozen(archive)
        _require_idle(archive)
        if archive.layout != ZarrArchive.Layout.SHARDED:
            raise Conflict(
                f"zarr archive {archive.zarr_id} is loose; shards can only be uploaded into an "
                'archive created with "layout": "sharded" (or converted with POST pack/)'
            )
        _open_batch_exists(archive)
        _check_file_directory_clashes(paths, archive_view(archive, cached=True))
        batch = _create_open_batch(archive, user, Batch.Kind.PACK)
        created = shards.declare_shards(archive, batch, declarations)
    urls = get_store().presigned_put_urls(
        [(s.key, s.md5) for s in created],
        expires_in=settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS,
    )
    return PackTargets(
        batch, [UploadTarget(s.name, url) for s, url in zip(created, urls, strict=True)]
    )


def batch_start(*, user: Any, archive: ZarrArchive, files: Any) -> list[UploadTarget]:
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise ValidationFailed('the body must be a list of {"path": ..., "etag": ...} objects')
    _check_batch_size(len(files))
    paths = [f.get("path") for f in files]
    _validate_paths(paths)
    bad_etags = [
        {"path": f["path"], "problem": f"etag {problem}"}
        for f in files
        if (problem := etag_problem(f.get("etag")))
    ]
    if bad_etags:
        raise _invalid("etags", bad_etags)

    with transaction.atomic():
        archive = _lock_archive(archive)
        _require_writer(user, archive.dandiset)
        _require_unfrozen(archive)
        _require_idle(archive)
        _open_batch_exists(archive)
        _check_file_directory_clashes(paths, archive_view(archive, cached=True))
        batch = _create_open_batch(archive, user, Batch.Kind.UPLOAD)
        BatchFile.objects.bulk_create(
            BatchFile(batch=batch, path=f["path"], md5=f["etag"]) for f in files
        )
    urls = get_store().presigned_put_urls(
        [(archive.storage_prefix + f["path"], f["etag"]) for f in files],
        expires_in=settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS,
    )
    return [UploadTarget(f["path"], url) for f, url in zip(files, urls, strict=True)]


def _open_batch(archive: ZarrArchive) -> Batch:
    batch = Batch.objects.filter(archive=archive, state=Batch.State.OPEN).first()
    if batch is None:
        raise NotFound(f"zarr archive {archive.zarr_id} has no upload batch in progress")
    return batch


def _next_sequence(archive: ZarrArchive) -> int:
    # Called with the archive row locked, so sequences are assigned one at a time.
    current = Batch.objects.filter(archive=archive).aggregate(m=Max("sequence"))["m"]
    return (current or 0) + 1


@dataclass
class Verification:
    missing: list[str] = field(default_factory=list)
    mismatched: list[dict[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.mismatched


def batch_complete(*, user: Any, archive: ZarrArchive) -> Batch:
    """Verify every file of the open batch in storage; on success queue its tree update."""
    with transaction.atomic():
        archive = _lock_archive(archive)
        _require_writer(user, archive.dandiset)
        _require_unfrozen(archive)
        batch = _open_batch(archive)
        result = Verification()
        files: list[BatchFile] = []
        if batch.kind == Batch.Kind.PACK:
            # The shard objects here; their members' md5s are checked by the worker, which
            # reads every shard (too long for a request).
            batch_shards = list(batch.shards.all())
            infos = get_store().head_many([s.key for s in batch_shards], mapper=storage_map)
            for shard in batch_shards:
                info = infos[shard.key]
                if info is None:
                    result.missing.append(shard.name)
                elif info.etag != shard.md5 or info.size != shard.size:
                    result.mismatched.append(
                        {
                            "path": shard.name,
                            "expected": f"{shard.md5} ({shard.size} bytes)",
                            "actual": f"{info.etag} ({info.size} bytes)",
                        }
                    )
        else:
            files = list(batch.files.all())
            heads = _heads(archive, [f.path for f in files])
            for f in files:
                info = heads[f.path]
                if info is None:
                    result.missing.append(f.path)
                elif info.etag != f.md5:
                    result.mismatched.append(
                        {"path": f.path, "expected": f.md5, "actual": info.etag}
                    )
                else:
                    f.size = info.size
        if not result.ok:
            parts = []
            if result.missing:
                parts.append(f"{len(result.missing)} missing ({', '.join(result.missing[:5])})")
            if result.mismatched:
                names = ", ".join(m["path"] for m in result.mismatched[:5])
                parts.append(f"{len(result.mismatched)} with another md5 ({names})")
            raise ValidationFailed(
                "the batch is not complete: " + "; ".join(parts) + ". Upload them again and "
                "complete again, or cancel the batch",
                verified=False,
                missing=result.missing,
                mismatched=result.mismatched,
            )
        if files:
            _record_sizes(files)
        batch.state = Batch.State.PENDING
        batch.sequence = _next_sequence(archive)
        batch.completed = timezone.now()
        batch.save(update_fields=["state", "sequence", "completed"])
        _schedule_propagation(archive)
    return batch


def _record_sizes(files: Sequence[BatchFile]) -> None:
    """Store verified sizes in one statement per 1000 rows (bulk_update's CASE per row costs
    more than the whole tree update of a 500-file batch)."""
    table = BatchFile._meta.db_table
    with connection.cursor() as cursor:
        for start in range(0, len(files), 1000):
            chunk = files[start : start + 1000]
            values = ", ".join(["(%s, %s)"] * len(chunk))
            params = [value for f in chunk for value in (f.pk, f.size)]
            # VALUES columns are named column1, column2 in both PostgreSQL and SQLite.
            cursor.execute(
                f"UPDATE {table} SET size = v.column2 FROM (VALUES {values}) AS v "
                f"WHERE {table}.id = v.column1",
                params,
            )


def batch_cancel(*, user: Any | None, archive: ZarrArchive, reason: str = "cancelled") -> Batch:
    """Cancel the open batch: delete what it uploaded, and keep the tree equal to storage.

    A path the batch did not change (storage still holds the archive's version of it) is kept.
    Anything else the batch uploaded is deleted; where that was an overwrite, the old content
    is gone from storage too, so the path is removed from the archive by a deletion batch.
    """
    with transaction.atomic():
        archive = _lock_archive(archive)
        batch = _open_batch(archive)
        if user is not None and user != batch.user:
            _require_writer(user, archive.dandiset)
        _require_unfrozen(archive)
        if batch.kind == Batch.Kind.PACK:
            # Nothing of a pack batch is in the archive before it is applied: drop its shards.
            shards.discard_shards(batch.shards.all())
            batch.state = Batch.State.CANCELLED
            batch.completed = timezone.now()
            batch.note = reason
            batch.save(update_fields=["state", "completed", "note"])
            return batch
        paths = list(batch.files.values_list("path", flat=True))
        # A packed file's bytes are in its shard, whatever happened to its loose key.
        packed = shards.packed_paths(archive, paths)
        committed = archive_view(archive).files_state(paths)
        heads = _heads(archive, paths)
        to_delete: list[str] = []
        to_unlist: list[str] = []
        for path in paths:
            info = heads[path]
            known = committed[path]
            # A packed file has no loose object: one at its key is this batch's, whatever its md5.
            if (
                path not in packed
                and info is not None
                and known is not None
                and info.etag == known.md5
            ):
                continue  # storage still holds the archive's version
            if info is not None:
                to_delete.append(path)
            if known is not None and path not in packed:
                to_unlist.append(path)
        get_store().delete_many(archive.storage_prefix + p for p in to_delete)
        batch.state = Batch.State.CANCELLED
        batch.completed = timezone.now()
        batch.note = reason
        batch.save(update_fields=["state", "completed", "note"])
        if to_unlist:
            _create_deletion(
                archive, user, to_unlist, note=f"overwritten by cancelled batch {batch.pk}"
            )
    return batch


def _create_deletion(archive: ZarrArchive, user: Any | None, paths: list[str], note: str) -> Batch:
    deletion = Batch.objects.create(
        archive=archive,
        kind=Batch.Kind.DELETE,
        state=Batch.State.PENDING,
        user=user if user is not None and user.is_authenticated else None,
        sequence=_next_sequence(archive),
        completed=timezone.now(),
        note=note,
    )
    BatchFile.objects.bulk_create(BatchFile(batch=deletion, path=p) for p in paths)
    _schedule_propagation(archive)
    return deletion


def files_delete(*, user: Any, archive: ZarrArchive, entries: Any) -> Batch:
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValidationFailed('the body must be a list of {"path": ...} objects')
    _check_batch_size(len(entries))
    paths = [e.get("path") for e in entries]
    _validate_paths(paths)
    with transaction.atomic():
        archive = _lock_archive(archive)
        _require_writer(user, archive.dandiset)
        _require_unfrozen(archive)
        if Batch.objects.filter(archive=archive, state=Batch.State.OPEN).exists():
            raise Conflict(
                f"zarr archive {archive.zarr_id} has an upload batch in progress; complete or "
                "cancel it before deleting files"
            )
        state = archive_view(archive).files_state(paths)
        missing = [p for p in paths if state[p] is None]
        if missing:
            raise NotFound(
                f"{len(missing)} of the paths are not in zarr archive {archive.zarr_id}, so "
                f"nothing was deleted: {', '.join(repr(p) for p in missing[:5])}",
                missing=missing,
            )
        deletion = _create_deletion(archive, user, paths, note="deleted by request")
        # Storage deletes last: if they fail, the transaction rolls back and nothing changed
        # in the database; objects already deleted are absent, as the tree will say once retried.
        get_store().delete_many(archive.storage_prefix + p for p in paths)
    return deletion


# --- Tree propagation --------------------------------------------------------------------------


def _schedule_compaction(shard_pk: int) -> None:
    from zarr_api.tasks import compact_shard

    transaction.on_commit(lambda: compact_shard.delay(shard_pk))


def _schedule_propagation(archive: ZarrArchive) -> None:
    from zarr_api.tasks import propagate_archive

    archive_pk = archive.pk
    transaction.on_commit(lambda: propagate_archive.delay(archive_pk))


def archive_propagate(archive_pk: int) -> TreeSummary | None:
    """Apply every pending batch of the archive to its .checksum tree; idempotent.

    Holds the archive's TreeLock for the whole update, so two updates of one archive never run
    at once. Changes are absolute (a path's new state, or removed), so a rerun after a crash
    half-way rewrites the same tree and counts nothing twice.
    """
    # Pack batches: every member checked against the shard's bytes first (long; no locks).
    shards.verify_pending_pack_batches(archive_pk)
    with transaction.atomic():
        try:
            TreeLock.objects.select_for_update().get(archive_id=archive_pk)
        except TreeLock.DoesNotExist:
            return None  # the archive was deleted
        archive = ZarrArchive.objects.get(pk=archive_pk)
        pending = Batch.objects.filter(archive=archive, state=Batch.State.PENDING)
        unverified = shards.unverified_pack_batches(archive_pk)
        batch_ids = []
        # In sequence order, up to a pack batch completed after the verification above (its
        # own task will verify and apply it and whatever follows).
        for pk in pending.order_by("sequence").values_list("pk", flat=True):
            if pk in unverified:
                break
            batch_ids.append(pk)
        if not batch_ids:
            return None
        changes = pending_changes(archive, batch_ids)
        # Read under the TreeLock: the row names the tree's committed version.
        tree = archive_tree_cached(archive)
        summary = apply_changes(tree, changes)
        locations = shards.apply_locations(archive, batch_ids)
        if locations.packed:
            packed = locations.packed
            transaction.on_commit(lambda: shards.delete_stale_loose(archive_pk, packed))
        for shard_pk in locations.to_compact:
            _schedule_compaction(shard_pk)
        now = timezone.now()
        ZarrArchive.objects.filter(pk=archive_pk).update(
            checksum=summary.digest, file_count=summary.count, size=summary.size, modified=now
        )
        Batch.objects.filter(pk__in=batch_ids).update(state=Batch.State.APPLIED, applied=now)
        transaction.on_commit(lambda: tree.remember(tree_version(now, summary.digest)))
    logger.info(
        "archive %s: applied %d batch(es), %s", archive.zarr_id, len(batch_ids), summary.digest
    )
    return summary


def archive_pack(*, user: Any, archive: ZarrArchive) -> ZarrArchive:
    """Start converting the archive's chunk files into shards (a Celery task does the work)."""
    with transaction.atomic():
        archive = _lock_archive(archive)
        _require_writer(user, archive.dandiset)
        _require_unfrozen(archive)
        if archive.packing:
            raise Conflict(f"zarr archive {archive.zarr_id} is already being packed")
        if Batch.objects.filter(
            archive=archive, state__in=[Batch.State.OPEN, Batch.State.PENDING]
        ).exists():
            raise Conflict(
                f"zarr archive {archive.zarr_id} has an upload in progress or checksums pending; "
                "pack it once its upload is done and checksum_status is complete"
            )
        archive.layout = ZarrArchive.Layout.SHARDED
        archive.packing = True
        archive.save(update_fields=["layout", "packing", "modified"])
        archive_pk = archive.pk

        def start() -> None:
            from zarr_api.tasks import pack_archive

            pack_archive.delay(archive_pk)

        transaction.on_commit(start)
    return archive


# --- Audit ---------------------------------------------------------------------------------------


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

    @property
    def drift(self) -> bool:
        return bool(
            self.directories_rewritten
            or self.stale_checksum_files_deleted
            or self.corrupted_members
            or self.stale_loose_copies_deleted
            or self.orphan_shards_deleted
            or self.checksum_before != self.checksum_after
        )


def archive_audit(archive: ZarrArchive) -> AuditReport:
    """Recompute the whole tree from a storage listing, rewrite what differs, report drift.

    Streams: the listing comes sorted from storage and each directory's .checksum is compared
    and written as soon as it is finished.
    """
    store = get_store()
    sharded = archive.shards.exists()
    if sharded:
        # Settle pending batches first: a pending member or loose overwrite is not yet in the
        # rows the audit reads the archive from.
        archive_propagate(archive.pk)
    with transaction.atomic():
        locked = _lock_archive(archive)
        if Batch.objects.filter(archive=locked, state=Batch.State.OPEN).exists():
            raise Conflict(
                f"zarr archive {locked.zarr_id} has an upload batch in progress; cancel it first"
            )
        if sharded and Batch.objects.filter(archive=locked, state=Batch.State.PENDING).exists():
            raise Conflict(
                f"zarr archive {locked.zarr_id} has checksum updates pending; audit it again "
                "once its checksum_status is complete"
            )
        TreeLock.objects.select_for_update().get(archive=locked)
        tree = archive_tree(locked)
        report = AuditReport(str(locked.zarr_id), locked.checksum, "", 0, 0)
        seen: set[str] = set()

        def on_directory(directory: str, listing: Any) -> None:
            seen.add(directory)
            if tree.read(directory) != listing:
                tree.write_many({directory: listing})
                report.directories_rewritten.append(directory)

        prefix = locked.storage_prefix
        listed = ((info.key[len(prefix) :], info.size, info.etag) for info in store.list(prefix))
        entries: Iterator[tuple[str, int, str]] = listed
        if locked.shards.exists():
            members = shards.audit_members(locked)
            report.corrupted_members = members.corrupted
            packed = {path for path, _, _ in members.entries}
            report.stale_loose_copies_deleted = []

            def loose_only() -> Iterator[tuple[str, int, str]]:
                for entry in listed:
                    if entry[0] in packed:
                        report.stale_loose_copies_deleted.append(entry[0])
                    else:
                        yield entry

            # Both sorted by path (code point order, which is UTF-8 byte order: S3's).
            entries = heapq.merge(loose_only(), members.entries)
            report.orphan_shards_deleted = members.orphan_shards
        summary = compute_tree(entries, on_directory=on_directory)
        store.delete_many(prefix + p for p in report.stale_loose_copies_deleted)
        store.delete_many(report.orphan_shards_deleted)
        for bad in report.corrupted_members:
            rows = ShardMember.objects.filter(archive=locked, path=bad["path"])
            if bad["actual"]:
                rows.update(md5=bad["actual"])  # storage is the truth, as for loose files
            else:
                rows.delete()  # its bytes are gone
        stale = []
        for info in store.list(locked.checksum_prefix):
            directory = posixpath.dirname(info.key[len(locked.checksum_prefix) :])
            if directory not in seen or (directory == "" and summary.count == 0):
                stale.append(directory)
        tree.delete_many(stale)
        report.stale_checksum_files_deleted = stale
        report.checksum_after = summary.digest
        report.file_count = summary.count
        report.size = summary.size
        now = timezone.now()
        ZarrArchive.objects.filter(pk=locked.pk).update(
            checksum=summary.digest, file_count=summary.count, size=summary.size, modified=now
        )
        # Storage is the truth now: pending batches are reflected in the listing.
        Batch.objects.filter(archive=locked, state=Batch.State.PENDING).update(
            state=Batch.State.APPLIED, applied=now, note="applied by audit"
        )
    return report


def stale_batches_cancel() -> int:
    cutoff = timezone.now() - timedelta(seconds=settings.DANDIZARR_STALE_BATCH_SECONDS)
    cancelled = 0
    for archive_pk in Batch.objects.filter(state=Batch.State.OPEN, created__lt=cutoff).values_list(
        "archive_id", flat=True
    ):
        archive = ZarrArchive.objects.get(pk=archive_pk)
        try:
            batch_cancel(user=None, archive=archive, reason="stale: open past its URLs' expiry")
        except (NotFound, Forbidden):
            continue
        cancelled += 1
    return cancelled


def archives_with_stalled_propagation(older_than_seconds: int = 60) -> list[int]:
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    return list(
        Batch.objects.filter(state=Batch.State.PENDING, completed__lt=cutoff)
        .values_list("archive_id", flat=True)
        .distinct()
    )


# --- Assets and publishing -----------------------------------------------------------------------


def _draft(dandiset: Dandiset) -> Version:
    return Version.objects.get(dandiset=dandiset, version=Version.DRAFT)


def asset_create(*, user: Any, dandiset: Dandiset, path: str, zarr_id: Any, metadata: Any) -> Asset:
    _require_writer(user, dandiset)
    problem = path_problem(path)
    if problem:
        raise ValidationFailed(f"asset path {path!r} {problem}")
    if not isinstance(metadata, dict):
        raise ValidationFailed("metadata must be a JSON object")
    parsed = parse_zarr_id(zarr_id)
    archive = ZarrArchive.objects.filter(zarr_id=parsed).first() if parsed else None
    if archive is None:
        raise ValidationFailed(f"no zarr archive with zarr_id {zarr_id}")
    if archive.dandiset_id != dandiset.pk:
        raise ValidationFailed(
            f"zarr archive {zarr_id} belongs to dandiset {archive.dandiset.identifier}, "
            f"not {dandiset.identifier}"
        )
    try:
        with transaction.atomic():
            return Asset.objects.create(
                version=_draft(dandiset), path=path, zarr=archive, metadata=metadata
            )
    except IntegrityError as error:
        raise Conflict(
            f"the draft of {dandiset.identifier} already has an asset at {path!r}"
        ) from error


def asset_update(*, user: Any, asset: Asset, path: str | None, metadata: Any | None) -> Asset:
    if not asset.version.is_draft:
        raise Forbidden("assets of a published version are read-only")
    _require_writer(user, asset.version.dandiset)
    if path is not None:
        problem = path_problem(path)
        if problem:
            raise ValidationFailed(f"asset path {path!r} {problem}")
        asset.path = path
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise ValidationFailed("metadata must be a JSON object")
        asset.metadata = metadata
    try:
        with transaction.atomic():
            asset.save()
    except IntegrityError as error:
        raise Conflict(f"the draft already has an asset at {path!r}") from error
    return asset


def asset_delete(*, user: Any, asset: Asset) -> None:
    if not asset.version.is_draft:
        raise Forbidden("assets of a published version are read-only")
    _require_writer(user, asset.version.dandiset)
    asset.delete()


def version_publish(*, user: Any, dandiset: Dandiset) -> Version:
    """Copy the draft into a new read-only version; its zarr archives become frozen."""
    _require_writer(user, dandiset)
    with transaction.atomic():
        dandiset = Dandiset.objects.select_for_update().get(pk=dandiset.pk)
        draft = _draft(dandiset)
        assets = list(draft.assets.all())
        if not assets:
            raise ValidationFailed(f"the draft of dandiset {dandiset.identifier} has no assets")
        archive_pks = sorted({a.zarr_id for a in assets})
        archives = list(
            ZarrArchive.objects.select_for_update().filter(pk__in=archive_pks).order_by("pk")
        )
        busy = Batch.objects.filter(
            archive__in=archives, state__in=[Batch.State.OPEN, Batch.State.PENDING]
        ).values_list("archive__zarr_id", flat=True)
        if busy:
            raise Conflict(
                "cannot publish while an upload is in progress or checksums are pending for "
                f"zarr archive(s) {', '.join(str(z) for z in sorted(set(busy)))}"
            )
        now = timezone.now()
        name = f"0.{now:%y%m%d.%H%M%S}"
        suffix = 0
        while Version.objects.filter(dandiset=dandiset, version=name).exists():
            suffix += 1
            name = f"0.{now:%y%m%d.%H%M%S}.{suffix}"
        version = Version.objects.create(dandiset=dandiset, version=name)
        Asset.objects.bulk_create(
            Asset(version=version, path=a.path, zarr_id=a.zarr_id, metadata=a.metadata)
            for a in assets
        )
        ZarrArchive.objects.filter(pk__in=archive_pks).update(frozen=True, modified=now)
    return version
