"""Pack batches (docs/sharded.md): shard objects uploaded with their members declared, checked
against storage on completion and member by member (md5) by the worker before they apply."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction

from dandizarr.objectstore import ObjectNotFound
from dandizarr.sharding.archive_packing import verify_members
from dandizarr_server.zarr_api.domain.declarations import ShardDeclaration
from dandizarr_server.zarr_api.domain.keys import new_shard_key
from dandizarr_server.zarr_api.domain.permissions import Requester
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.models import Batch, BatchFile, Shard, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import STREAM_BLOCK, get_store
from dandizarr_server.zarr_api.selectors.shard_members import declared_members
from dandizarr_server.zarr_api.services.batch_rules import (
    UploadTarget,
    Verification,
    open_batch_create,
    upload_targets_sign,
)
from dandizarr_server.zarr_api.services.bulk_rows import rows_insert
from dandizarr_server.zarr_api.services.multipart_uploads import multipart_threshold
from dandizarr_server.zarr_api.services.shard_objects import discard_shards

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PackTargets:
    batch: Batch
    shards: list[UploadTarget]


def pack_batch_start(
    *, user: Requester, archive: ZarrArchive, shards: Sequence[ShardDeclaration]
) -> PackTargets:
    """Start a pack batch: shard objects to PUT, each declaring its member files. A shard
    goes in one PUT: none may be bigger than the files storage takes in one
    (``multipart_threshold``; the client sends such members loose, the biggest in parts)."""
    threshold = multipart_threshold()
    too_big = [d for d in shards if threshold is not None and d.size > threshold]
    if too_big:
        raise ValidationFailed(
            f"{len(too_big)} shards are bigger than {threshold} bytes (multipart_threshold_bytes)"
            ": a shard goes in one PUT; send members that big loose (in parts)",
            code="shard_too_large",
            paths=[{"path": d.name, "problem": f"is {d.size} bytes"} for d in too_big],
        )
    paths = [m.path for d in shards for m in d.members]
    with transaction.atomic():
        batch = open_batch_create(user=user, archive=archive, kind=Batch.Kind.PACK, paths=paths)
        created = _declare_shards(archive, batch, shards)
        targets = upload_targets_sign([(s.name, s.key, s.md5) for s in created])
    return PackTargets(batch, targets)


def _declare_shards(
    archive: ZarrArchive, batch: Batch, declarations: Sequence[ShardDeclaration]
) -> list[Shard]:
    shards = Shard.objects.bulk_create(
        Shard(
            archive=archive,
            batch=batch,
            name=d.name,
            key=new_shard_key(archive.zarr_id, d.name),
            size=d.size,
            md5=d.md5,
            chunks_per_shard=d.chunks_per_shard,
        )
        for d in declarations
    )
    rows_insert(
        BatchFile,
        ("batch", "path", "md5", "size", "shard", "offset", "slot"),
        (
            (batch.pk, m.path, m.md5, m.size, shard.pk, m.offset, m.slot)
            for shard, d in zip(shards, declarations, strict=True)
            for m in d.members
        ),
    )
    return shards


def uploaded_shards_verify(batch: Batch) -> Verification:
    """The batch's shard objects as stored against their declared md5 and size; their
    members' md5s are checked by the worker, which reads every shard (too long for a request)."""
    result = Verification()
    batch_shards = list(batch.shards.all())
    infos = get_store().head_many([s.key for s in batch_shards])
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
    return result


def pending_pack_batches_verify(archive_pk: int) -> None:
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
                    store.iter_chunks(shard.key, STREAM_BLOCK),
                    declared_members(shard),
                    ordered=True,
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
