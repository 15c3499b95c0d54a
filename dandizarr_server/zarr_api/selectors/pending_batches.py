"""An archive's ended batches in the order the tree takes them: the sequence the next one gets,
and which of the pending ones a tree update applies now."""

from __future__ import annotations

from django.db.models import Max

from dandizarr_server.zarr_api.models import Batch, ZarrArchive
from dandizarr_server.zarr_api.selectors.shard_members import unverified_pack_batches
from dandizarr_server.zarr_api.selectors.stored_md5s import unproven_batches


def next_sequence(archive: ZarrArchive) -> int:
    # Called with the archive row locked, so sequences are assigned one at a time.
    current = Batch.objects.filter(archive=archive).aggregate(m=Max("sequence"))["m"]
    return (current or 0) + 1


def applicable_batch_ids(archive: ZarrArchive) -> list[int]:
    """The pending batches a tree update applies now, in sequence order: up to a pack batch
    completed after its members were verified, or a batch with a file sent in parts completed
    after its md5 was proven (its own task verifies and applies it and what follows). The
    caller holds the TreeLock."""
    unverified = unverified_pack_batches(archive.pk) | unproven_batches(archive.pk)
    batch_ids = []
    pending = Batch.objects.filter(archive=archive, state=Batch.State.PENDING)
    for pk in pending.order_by("sequence").values_list("pk", flat=True):
        if pk in unverified:
            break
        batch_ids.append(pk)
    return batch_ids
