"""The audit: an archive's tree recomputed from a storage listing (the report,
selectors.archive_audit, read with no lock held), then whatever differs rewritten or deleted
(the repair, under the archive's and tree's locks, briefly) and the drift reported."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from dandizarr.checksums import DirectoryListing, FileState
from dandizarr_server.zarr_api.edge.exceptions import Conflict
from dandizarr_server.zarr_api.models import Batch, ShardMember, ZarrArchive
from dandizarr_server.zarr_api.runtime.crash import crash_point
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_audit import (
    AuditFindings,
    AuditReport,
    archive_audit_report,
    audit_basis,
    versions_verify,
)
from dandizarr_server.zarr_api.selectors.batch_states import has_open_batch
from dandizarr_server.zarr_api.selectors.draft_trees import archive_tree
from dandizarr_server.zarr_api.services.archive_locks import (
    lock_archive,
    lock_tree,
)
from dandizarr_server.zarr_api.services.batch_endings import batch_endings_settle
from dandizarr_server.zarr_api.services.file_history import history_needed, replaced_record
from dandizarr_server.zarr_api.services.tree_updates import tree_update_apply

# How many times an audit reads the archive again when it changed between the report and the
# repair (a batch started, a tree update applied) before it gives up.
AUDIT_ATTEMPTS = 3


class _ChangedMeanwhile(Exception):
    """The archive changed between the report and the repair: the report is read again."""


def archive_audit(archive: ZarrArchive, *, repair: bool = True) -> AuditReport:
    """Report the archive's drift from storage and, with ``repair`` (the default), rewrite
    what differs; ``repair=False`` changes nothing (after restoring a backup, say).

    The report lists storage with no lock held; the repair then takes the archive's and tree's
    locks and writes what the report found, unless the archive changed meanwhile: then the
    report is read again (``AUDIT_ATTEMPTS`` in all)."""
    sharded = archive.shards.exists()
    if sharded:
        # Settle pending batches first: a pending member or loose overwrite is not yet in the
        # rows the audit reads the archive from.
        tree_update_apply(archive.pk)
    for _ in range(AUDIT_ATTEMPTS):
        _audit_admit(archive, sharded=sharded)
        findings = archive_audit_report(archive)
        if not repair:
            findings.report.versions_mismatched = versions_verify(archive)
            return findings.report
        try:
            archive_audit_repair(archive, findings)
        except _ChangedMeanwhile:
            continue
        report = findings.report
        report.versions_mismatched = versions_verify(ZarrArchive.objects.get(pk=archive.pk))
        return report
    raise Conflict(
        f"zarr archive {archive.zarr_id} changed while it was audited, {AUDIT_ATTEMPTS} times; "
        "audit it again when it is quiet",
        code="archive_changed",
    )


def _audit_admit(archive: ZarrArchive, *, sharded: bool) -> None:
    """Refuse an archive with a batch open (its uploads are not in the tree yet, and are in
    storage), or a sharded one with checksum updates pending; finish cancels and deletions."""
    with transaction.atomic():
        locked = lock_archive(archive)
        _require_no_open_batch(locked)
        batch_endings_settle(locked)
        if sharded:
            _require_nothing_pending(locked)


def _require_no_open_batch(locked: ZarrArchive) -> None:
    if has_open_batch(locked):
        raise Conflict(
            f"zarr archive {locked.zarr_id} has an upload batch in progress; cancel it first",
            code="open_batch_exists",
        )


def _require_nothing_pending(locked: ZarrArchive) -> None:
    if Batch.objects.filter(archive=locked, state=Batch.State.PENDING).exists():
        raise Conflict(
            f"zarr archive {locked.zarr_id} has checksum updates pending; audit it again "
            "once its checksum_status is complete",
            code="batch_pending",
        )


def _replaced_files_commit(archive: ZarrArchive, findings: AuditFindings) -> int:
    """What the repair will change in the draft, recorded for its versions and committed before
    any listing is written (storage shows a write at once, a transaction's rows only once it
    commits): a reader of a version, in any process, sees the row of every change it can see
    (docs/versions.md, "Why a version never changes"). Rows are facts about the past: true
    whether or not the repair follows. The generation they were recorded for."""
    with transaction.atomic():
        lock_tree(archive.pk)  # the one lock order: the tree's, then the archive's row
        locked = lock_archive(archive)
        if audit_basis(locked) != findings.basis:
            raise _ChangedMeanwhile
        if history_needed(locked):
            replaced_record(locked, _file_changes(findings))
        return locked.generation


def archive_audit_repair(archive: ZarrArchive, findings: AuditFindings) -> None:
    """Write what ``findings`` found, in one short transaction under the archive's and tree's
    locks, once what it replaces is recorded for the versions; _ChangedMeanwhile (nothing
    written) when the archive is not as the report read it: a batch started, ended or was
    applied, the tree's listings it rewrites changed, or a publish came in between."""
    store = get_store()
    report = findings.report
    generation = _replaced_files_commit(archive, findings)
    with transaction.atomic():
        lock_tree(archive.pk)
        locked = lock_archive(archive)
        _require_no_open_batch(locked)
        # A publish since the rows were recorded would have to record them again.
        if audit_basis(locked) != findings.basis or locked.generation != generation:
            raise _ChangedMeanwhile
        tree = archive_tree(locked)
        if tree.read_many(sorted(findings.listings_before)) != findings.listings_before:
            raise _ChangedMeanwhile
        tree.write_many(findings.rewrites)
        crash_point("audit:listings-written")
        store.delete_many(locked.storage_prefix + p for p in report.stale_loose_copies_deleted)
        store.delete_many(report.orphan_shards_deleted)
        for bad in report.corrupted_members:
            rows = ShardMember.objects.filter(archive=locked, path=bad["path"])
            if bad["actual"]:
                rows.update(md5=bad["actual"])  # storage is the truth, as for loose files
            else:
                rows.delete()  # its bytes are gone
        tree.delete_many(findings.stale_directories)
        now = timezone.now()
        ZarrArchive.objects.filter(pk=locked.pk).update(
            checksum=report.checksum_after,
            file_count=report.file_count,
            size=report.size,
            modified=now,
        )
        # Storage is the truth now: pending batches are reflected in the listing.
        Batch.objects.filter(archive=locked, state=Batch.State.PENDING).update(
            state=Batch.State.APPLIED, applied=now, note="applied by audit"
        )


def _file_changes(findings: AuditFindings) -> dict[str, FileState | None]:
    """The files a repair changes: each rewritten or deleted directory's files, before and
    after."""
    changes: dict[str, FileState | None] = {}
    for directory, old in findings.listings_before.items():
        new: DirectoryListing | None = findings.rewrites.get(directory)
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
