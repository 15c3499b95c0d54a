"""Conversion of a loose archive into shards (POST pack/): started by a request, done by a
task one shard at a time, so a crash anywhere loses nothing and a rerun finishes the job."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from dandizarr.checksums import FileState
from dandizarr.objectstore import ObjectNotFound, ObjectStore
from dandizarr.sharding.archive_packing import (
    METADATA_NAMES,
    PackingError,
    ShardLayout,
    default_chunks_per_shard,
    find_grids,
    plan_shards,
)
from dandizarr_server.zarr_api.domain.permissions import Requester, require_writer
from dandizarr_server.zarr_api.edge.exceptions import Conflict
from dandizarr_server.zarr_api.models import Batch, ShardMember, ZarrArchive
from dandizarr_server.zarr_api.runtime.scheduling import CONVERT_ARCHIVE, schedule_on_commit
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_contents import files_below
from dandizarr_server.zarr_api.selectors.shard_members import packed_paths
from dandizarr_server.zarr_api.services.archive_locks import (
    lock_archive,
    lock_tree,
)
from dandizarr_server.zarr_api.services.member_locations import stale_loose_copies_delete
from dandizarr_server.zarr_api.services.shard_objects import ShardPiece, shard_write

logger = logging.getLogger(__name__)


def archive_conversion_start(*, user: Requester, archive: ZarrArchive) -> ZarrArchive:
    """Mark the archive sharded and converting; a task converts its chunk files into shards."""
    with transaction.atomic():
        archive = lock_archive(archive)
        require_writer(user, archive.dandiset)
        if archive.packing:
            raise Conflict(
                f"zarr archive {archive.zarr_id} is already being packed", code="archive_packing"
            )
        busy = set(
            Batch.objects.filter(
                archive=archive, state__in=[Batch.State.OPEN, Batch.State.PENDING]
            ).values_list("state", flat=True)
        )
        if busy:
            raise Conflict(
                f"zarr archive {archive.zarr_id} has an upload in progress or checksums pending; "
                "pack it once its upload is done and checksum_status is complete",
                code="open_batch_exists" if Batch.State.OPEN in busy else "batch_pending",
            )
        archive.layout = ZarrArchive.Layout.SHARDED
        archive.packing = True
        archive.save(update_fields=["layout", "packing", "modified"])
        schedule_on_commit(CONVERT_ARCHIVE, archive.pk)
    return archive


@dataclass
class ConversionReport:
    shards_written: int = 0
    files_packed: int = 0
    skipped: list[str] = field(default_factory=list)


def _layouts(archive: ZarrArchive, files: dict[str, FileState]) -> list[ShardLayout]:
    store = get_store()
    metadata = {
        path: store.get(archive.storage_prefix + path)
        for path in files
        if path.rpartition("/")[2] in METADATA_NAMES
    }
    layouts = []
    for grid in find_grids(metadata):
        cps = default_chunks_per_shard(grid, settings.DANDIZARR_SHARD_TARGET_BYTES)
        layouts.append(ShardLayout(grid, cps))
    return layouts


def archive_conversion_run(archive_pk: int) -> ConversionReport:
    """Pack every chunk file of the archive's arrays into shards, one shard at a time.

    Each shard: read its loose chunks (checked against the tree's md5), write the shard, check
    storage's ETag, then commit its member rows (TreeLock held), then delete the loose objects.
    A rerun skips files already packed, so a crash anywhere loses nothing.
    """
    archive = ZarrArchive.objects.get(pk=archive_pk)
    report = ConversionReport()
    files = {node.path: FileState(node.size, node.md5) for node in files_below(archive, "")}
    try:
        layouts = _layouts(archive, files)
    except PackingError as error:
        logger.warning("archive %s: cannot pack: %s", archive.zarr_id, error)
        layouts = []
    already = packed_paths(archive, files)
    # A run killed between committing a shard's rows and deleting its loose copies left them.
    stale_loose_copies_delete(archive_pk, sorted(already))
    plans, _loose = plan_shards(layouts, [p for p in files if p not in already])
    store = get_store()
    for plan in plans:
        keys = [archive.storage_prefix + m.path for m in plan.members]
        datas = store.map_requests(_get_or_none(store), list(keys))
        pieces = []
        for member, data in zip(plan.members, datas, strict=True):
            state = files[member.path]
            if data is None or hashlib.md5(data, usedforsecurity=False).hexdigest() != state.md5:
                report.skipped.append(member.path)  # drift: the audit will say; stays loose
                continue
            pieces.append(ShardPiece(member.path, member.slot, data))
        if not pieces:
            continue
        shard, records = shard_write(archive, plan.name, plan.layout.chunks_per_shard, pieces)
        with transaction.atomic():
            lock_tree(archive.pk)
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


def archive_conversion_abandon(archive_pk: int, error: Exception) -> None:
    ZarrArchive.objects.filter(pk=archive_pk).update(packing=False)
    logger.error("archive %s: packing abandoned after retries: %s", archive_pk, error)


def _get_or_none(store: ObjectStore) -> Callable[[str], bytes | None]:
    def get(key: str) -> bytes | None:
        try:
            return bytes(store.get(key))
        except ObjectNotFound:
            return None

    return get
