"""Tree updates: pending batches applied to the archive's .checksum tree, in sequence order,
one update of an archive at a time (its TreeLock held)."""

from __future__ import annotations

import logging
from itertools import takewhile

from django.db import transaction
from django.utils import timezone

from dandizarr.checksums import TreeSummary, apply_changes
from dandizarr_server.zarr_api.models import Batch, TreeLock, ZarrArchive
from dandizarr_server.zarr_api.runtime import metrics
from dandizarr_server.zarr_api.runtime.scheduling import (
    COMPACT_SHARD,
    SETTLE_WRITE_SESSIONS,
    schedule_on_commit,
)
from dandizarr_server.zarr_api.runtime.tree import CachedTree, tree_version
from dandizarr_server.zarr_api.selectors.archive_contents import pending_changes
from dandizarr_server.zarr_api.selectors.draft_trees import draft_tree_cached, paths_in_tree
from dandizarr_server.zarr_api.selectors.pending_batches import applicable_batch_ids
from dandizarr_server.zarr_api.services.archive_locks import lock_tree
from dandizarr_server.zarr_api.services.file_history import replaced_files_record
from dandizarr_server.zarr_api.services.member_locations import (
    locations_apply,
    stale_loose_copies_delete,
)
from dandizarr_server.zarr_api.services.multipart_proofs import pending_uploads_prove
from dandizarr_server.zarr_api.services.pack_batches import pending_pack_batches_verify

logger = logging.getLogger(__name__)

# Batches whose rows may put files into shards (member rows to move, loose copies to delete).
PACKING_KINDS = (Batch.Kind.PACK, Batch.Kind.SESSION)


def tree_update_apply(archive_pk: int) -> TreeSummary | None:
    """Apply every pending batch of the archive to its .checksum tree; idempotent.

    Holds the archive's TreeLock for the whole update, so two updates of one archive never run
    at once. Changes are absolute (a path's new state, or removed), so a rerun after a crash
    half-way rewrites the same tree and counts nothing twice.
    """
    # Pack batches: every member checked against the shard's bytes first (long; no locks).
    pending_pack_batches_verify(archive_pk)
    # Files sent in parts: each md5 proven from the bytes first (long too; no locks).
    pending_uploads_prove(archive_pk)
    # What the batches replace is committed before any of their changes can be seen, for the
    # generation the archive is in when they are applied: a session that began in between (its
    # snapshot started a generation) has it recorded again.
    for _ in range(_RECORD_ATTEMPTS - 1):
        recorded, generation = replaced_files_record(archive_pk)
        try:
            return _apply(archive_pk, recorded, generation)
        except _GenerationMoved:
            continue
    recorded, generation = replaced_files_record(archive_pk)
    return _apply(archive_pk, recorded, generation)  # sessions beginning without end: fails


# A tree update's rows recorded, then a session began before its changes were applied: again.
_RECORD_ATTEMPTS = 5


class _GenerationMoved(Exception):
    """The archive is in another generation than the one its update's rows were recorded for."""


def _apply(archive_pk: int, recorded: set[int], generation: int) -> TreeSummary | None:
    tree: CachedTree | None = None
    try:
        with transaction.atomic():
            try:
                lock_tree(archive_pk)
            except TreeLock.DoesNotExist:
                return None  # the archive was deleted
            archive = ZarrArchive.objects.get(pk=archive_pk)
            if archive.generation != generation:
                raise _GenerationMoved()
            batch_ids = list(takewhile(recorded.__contains__, applicable_batch_ids(archive)))
            if not batch_ids:
                return None
            changes = pending_changes(archive, batch_ids)
            # Read under the TreeLock: the row names the tree's committed version.
            tree = cached = draft_tree_cached(archive)
            # Packed paths that were loose files may leave loose objects to delete.
            packing = Batch.objects.filter(pk__in=batch_ids, kind__in=PACKING_KINDS).exists()
            in_tree = paths_in_tree(cached, changes) if packing else set()
            summary = apply_changes(cached, changes)
            # A pack batch's 100,000 paths and states: freed before locations_apply reads
            # the batches' rows again, so the two never hold the service's memory at once.
            del changes
            locations = locations_apply(archive, batch_ids, in_tree, packing=packing)
            if locations.packed:
                packed = locations.packed
                transaction.on_commit(lambda: stale_loose_copies_delete(archive_pk, packed))
            for shard_pk in locations.to_compact:
                schedule_on_commit(COMPACT_SHARD, shard_pk)
            if Batch.objects.filter(pk__in=batch_ids, kind=Batch.Kind.SESSION).exists():
                # Loose objects of the paths committed sessions deleted go once this commits.
                schedule_on_commit(SETTLE_WRITE_SESSIONS, archive_pk)
            now = timezone.now()
            ZarrArchive.objects.filter(pk=archive_pk).update(
                checksum=summary.digest, file_count=summary.count, size=summary.size, modified=now
            )
            applied = Batch.objects.filter(pk__in=batch_ids)
            lags = [
                (now - completed).total_seconds()
                for completed in applied.values_list("completed", flat=True)
                if completed is not None
            ]
            applied.update(state=Batch.State.APPLIED, applied=now)
            transaction.on_commit(lambda: metrics.tree_update_lags(lags))
            transaction.on_commit(lambda: cached.remember(tree_version(now, summary.digest)))
    except BaseException:
        if tree is not None:
            tree.forget()  # it may have written listings no committed version has
        raise
    logger.info(
        "archive %s: applied %d batch(es), %s", archive.zarr_id, len(batch_ids), summary.digest
    )
    return summary
