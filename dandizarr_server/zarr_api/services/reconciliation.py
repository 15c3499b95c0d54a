"""Reconciling an ended batch's keys with storage once its upload URLs have expired (S3, where
a presigned PUT cannot be revoked): a replayed URL (or any write behind the service) is found,
the tree is repaired to what storage holds (storage is the truth, as for the audit), and the
drift is recorded on the archive. Scheduled at each batch end for when the URLs have expired;
the periodic sweep reconciles any batch whose task was lost."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from django.db import transaction
from django.utils import timezone

from dandizarr.objectstore import ObjectInfo
from dandizarr_server.zarr_api.models import Batch, Shard, ZarrArchive
from dandizarr_server.zarr_api.runtime.scheduling import tree_update_schedule
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_contents import archive_snapshot
from dandizarr_server.zarr_api.selectors.batch_states import has_changing_batches, open_batch_paths
from dandizarr_server.zarr_api.selectors.pending_batches import next_sequence
from dandizarr_server.zarr_api.selectors.shard_members import packed_paths
from dandizarr_server.zarr_api.selectors.stored_md5s import UNPROVEN, stored_md5s
from dandizarr_server.zarr_api.services.archive_locks import lock_archive
from dandizarr_server.zarr_api.services.batch_endings import deletion_create
from dandizarr_server.zarr_api.services.bulk_rows import batch_files_insert

logger = logging.getLogger(__name__)


@dataclass
class Drift:
    notes: list[str] = field(default_factory=list)
    # Paths whose stored object the tree does not describe, and listed paths storage lacks.
    to_list: dict[str, ObjectInfo] = field(default_factory=dict)
    to_unlist: list[str] = field(default_factory=list)
    # Objects nothing refers to (a discarded shard, a loose copy of a packed file): deleted.
    stray_keys: list[str] = field(default_factory=list)


def batch_reconcile(batch_pk: int) -> bool:
    """Check the batch's keys against the tree and repair any drift. False when it is not
    time yet (URLs still valid) or the archive has work in flight; the sweep tries again."""
    batch = Batch.objects.filter(pk=batch_pk).first()
    if batch is None or batch.reconcile_after is None:
        return True
    if batch.reconcile_after > timezone.now():
        return False
    with transaction.atomic():
        archive = lock_archive(batch.archive)
        batch = Batch.objects.get(pk=batch_pk)
        if batch.reconcile_after is None:
            return True
        if has_changing_batches(archive):
            return False
        drift = (
            _shard_drift(batch) if batch.kind == Batch.Kind.PACK else _file_drift(archive, batch)
        )
        if drift.notes:
            _repair(archive, batch, drift)
        batch.reconcile_after = None
        batch.save(update_fields=["reconcile_after"])
    return True


def due_batches_reconcile() -> int:
    """The sweep: every batch due for reconciliation; one archive failing does not stop it."""
    done = 0
    due = Batch.objects.filter(reconcile_after__lte=timezone.now()).order_by("reconcile_after")
    for batch_pk in due.values_list("pk", flat=True)[:1000]:
        try:
            done += batch_reconcile(batch_pk)
        except Exception:
            logger.exception("reconciling batch %s failed; the next sweep tries again", batch_pk)
    return done


def _file_drift(archive: ZarrArchive, batch: Batch) -> Drift:
    drift = Drift()
    # Keys an open batch declares are checked when it completes (or by its own reconcile).
    in_flight = open_batch_paths(archive)
    paths = [p for p in batch.files.values_list("path", flat=True) if p not in in_flight]
    prefix = archive.storage_prefix
    heads = get_store().head_many([prefix + p for p in paths])
    packed = packed_paths(archive, paths)
    listed = archive_snapshot(archive).files_state(p for p in paths if p not in packed)
    # A file sent in parts: the md5 proven of its bytes, not its ETag (None: never proven).
    md5s = stored_md5s((i.key, i.etag) for i in heads.values() if i is not None)
    for path in paths:
        stored = heads[prefix + path]
        stored_md5 = md5s[(stored.key, stored.etag)] if stored is not None else None
        if stored_md5 == UNPROVEN:
            continue  # its batch's proof decides, before it is applied
        if path in packed:
            if stored is not None:
                drift.stray_keys.append(prefix + path)
                drift.notes.append(f"{path}: a loose copy of a packed file (deleted)")
            continue
        known = listed[path]
        if stored is None:
            if known is not None:
                drift.to_unlist.append(path)
                drift.notes.append(f"{path}: listed (md5 {known.md5}) but not in storage")
        elif stored_md5 is None:
            # Parts the service never completed or proved: no md5 can be listed for them.
            drift.stray_keys.append(prefix + path)
            if known is not None:
                drift.to_unlist.append(path)
            drift.notes.append(f"{path}: storage holds unproven parts {stored.etag} (deleted)")
        elif known is None or (known.md5, known.size) != (stored_md5, stored.size):
            drift.to_list[path] = replace(stored, etag=stored_md5)
            was = f"md5 {known.md5}" if known else "not listed"
            drift.notes.append(f"{path}: storage holds md5 {stored_md5}, the tree had {was}")
    return drift


def _shard_drift(batch: Batch) -> Drift:
    """A shard URL writes only its declared bytes, so the one drift is a discarded shard's
    object written again: garbage no row refers to."""
    drift = Drift()
    discarded = [s.key for s in batch.shards.filter(state=Shard.State.DISCARDED)]
    heads = get_store().head_many(discarded)
    for key in discarded:
        if heads[key] is not None:
            drift.stray_keys.append(key)
            drift.notes.append(f"{key}: a discarded shard object was written again (deleted)")
    return drift


def _repair(archive: ZarrArchive, batch: Batch, drift: Drift) -> None:
    note = f"repair: storage differed from the tree after batch {batch.pk}'s URLs expired"
    if drift.to_list:
        repair = Batch.objects.create(
            archive=archive,
            kind=Batch.Kind.UPLOAD,
            state=Batch.State.PENDING,
            sequence=next_sequence(archive),
            completed=timezone.now(),
            note=note,
        )
        batch_files_insert(
            repair.pk, ((p, info.etag, info.size) for p, info in drift.to_list.items())
        )
        tree_update_schedule(archive)
    if drift.to_unlist:
        deletion_create(archive, None, drift.to_unlist, note=note)
    get_store().delete_many(drift.stray_keys)
    now = timezone.now()
    summary = (
        f"batch {batch.pk} ({batch.kind}, {batch.state}): {len(drift.notes)} key(s) differed "
        "from the tree once its upload URLs had expired; the tree now follows storage: "
        + "; ".join(drift.notes[:20])
    )
    logger.warning("zarr archive %s: %s", archive.zarr_id, summary)
    ZarrArchive.objects.filter(pk=archive.pk).update(
        drift_count=archive.drift_count + len(drift.notes), last_drift_at=now, last_drift=summary
    )
