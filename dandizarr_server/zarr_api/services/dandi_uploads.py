"""The newest dandi-cli's Zarr flow (``POST files/``, ``DELETE files/``, ``POST finalize/``)
mapped onto verified batches (docs/api.md, "DANDI clients").

The flow has no explicit batch: the client asks for upload URLs in many requests, PUTs, may
delete files, then finalizes. Here the first ``POST files/`` opens an *open upload* (an upload
batch marked with ``OPEN_UPLOAD_NOTE``); later requests add to it (a path asked for again gets
the new md5 and a new URL). ``DELETE files/`` while it is open removes paths from it and
deletes committed files in a deletion batch, in the order the client sends. ``finalize``
verifies every file of it against storage: verified files go to the tree as one pending batch;
files missing or with other bytes are discarded as a cancel discards them (the tree stays equal
to storage), and the client, which compares checksums, uploads them again. Nothing enters the
tree unverified; a client that dies leaves an open upload that the next upload continues, a
``DELETE upload/`` cancels, or the stale sweep cancels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from dandizarr_server.zarr_api.domain.declarations import FileDeclaration
from dandizarr_server.zarr_api.domain.permissions import Requester, require_writer
from dandizarr_server.zarr_api.edge.exceptions import Conflict, NotFound
from dandizarr_server.zarr_api.models import Batch, ZarrArchive
from dandizarr_server.zarr_api.runtime.scheduling import tree_update_schedule
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_contents import archive_snapshot
from dandizarr_server.zarr_api.selectors.batch_states import open_batch_find
from dandizarr_server.zarr_api.selectors.expected_uploads import declared_files
from dandizarr_server.zarr_api.selectors.pending_batches import next_sequence
from dandizarr_server.zarr_api.services.archive_locks import (
    lock_archive,
)
from dandizarr_server.zarr_api.services.batch_endings import deletion_create, uploaded_files_discard
from dandizarr_server.zarr_api.services.batch_rules import (
    OPEN_UPLOAD_NOTE,
    UploadTarget,
    open_batch_create,
    open_batch_directories_reset,
    open_batch_join,
    upload_targets_sign,
)
from dandizarr_server.zarr_api.services.bulk_rows import batch_files_insert, record_sizes
from dandizarr_server.zarr_api.services.deletions import files_delete
from dandizarr_server.zarr_api.services.upload_batches import (
    uploaded_files_verify,
)
from dandizarr_server.zarr_api.services.url_lifetimes import reconcile_when_urls_expire


def _require_open_upload(archive: ZarrArchive, batch: Batch) -> None:
    if batch.kind != Batch.Kind.UPLOAD or batch.note != OPEN_UPLOAD_NOTE:
        raise Conflict(
            f"zarr archive {archive.zarr_id} has an upload batch in progress (POST upload/); "
            "complete or cancel it first",
            code="open_batch_exists",
        )


def open_upload_add(
    *, user: Requester, archive: ZarrArchive, files: Sequence[FileDeclaration]
) -> list[UploadTarget]:
    """Upload URLs for ``files`` (in order), added to the archive's open upload (opened when
    there is none)."""
    paths = [f.path for f in files]
    with transaction.atomic():
        archive = lock_archive(archive)
        batch = open_batch_find(archive)
        if batch is None:
            batch = open_batch_create(
                user=user, archive=archive, kind=Batch.Kind.UPLOAD, paths=paths
            )
            batch.note = OPEN_UPLOAD_NOTE
            batch.save(update_fields=["note"])
            batch_files_insert(batch.pk, ((f.path, f.md5, None) for f in files))
        else:
            require_writer(user, archive.dandiset)
            _require_open_upload(archive, batch)
            open_batch_join(user=user, archive=archive, batch=batch, files=files)
        return upload_targets_sign(
            [(f.path, archive.storage_prefix + f.path, f.md5) for f in files]
        )


def dandi_files_delete(*, user: Requester, archive: ZarrArchive, paths: Sequence[str]) -> None:
    """``DELETE files/``: as ``files_delete`` when no upload is open; with an open upload,
    paths may be committed files, files of the open upload, or both (each goes)."""
    with transaction.atomic():
        archive = lock_archive(archive)
        batch = open_batch_find(archive)
        plain = batch is None or batch.note != OPEN_UPLOAD_NOTE
    if plain:
        # Outside any transaction: files_delete commits its intent before touching storage.
        files_delete(user=user, archive=archive, paths=paths)  # 409 for a batch open
        return
    with transaction.atomic():
        archive = lock_archive(archive)
        batch = open_batch_find(archive)
        if batch is None or batch.note != OPEN_UPLOAD_NOTE:
            raise Conflict(
                f"zarr archive {archive.zarr_id}: its open upload ended meanwhile",
                code="batch_ended",
            )
        require_writer(user, archive.dandiset)
        in_batch = set(batch.files.filter(path__in=list(paths)).values_list("path", flat=True))
        state = archive_snapshot(archive).files_state(paths)
        missing = [p for p in paths if state[p] is None and p not in in_batch]
        if missing:
            raise NotFound(
                f"{len(missing)} of the paths are neither in zarr archive {archive.zarr_id} nor "
                f"in its open upload, so nothing was deleted: "
                f"{', '.join(repr(p) for p in missing[:5])}",
                missing=missing,
            )
        batch.files.filter(path__in=list(in_batch)).delete()
        if in_batch:
            open_batch_directories_reset(batch)
        committed = [p for p in paths if state[p] is not None]
        if committed:
            # Sequenced now, so applied before the open upload (sequenced at finalize).
            deletion_create(archive, user, committed, note="deleted by request")
        get_store().delete_many(archive.storage_prefix + p for p in paths)


@dataclass
class Finalized:
    """What ``finalize`` did: the verified files queued for the tree, the files dropped."""

    batch: Batch | None = None
    verified: int = 0
    missing: list[str] = field(default_factory=list)
    mismatched: list[dict[str, str]] = field(default_factory=list)


def upload_finalize(*, user: Requester, archive: ZarrArchive) -> Finalized:
    """Verify the open upload and queue what storage holds as declared for the tree; without
    an open upload, only make sure pending batches are being applied (``ingest/``)."""
    with transaction.atomic():
        archive = lock_archive(archive)
        require_writer(user, archive.dandiset)
        batch = open_batch_find(archive)
        if batch is None:
            if Batch.objects.filter(archive=archive, state=Batch.State.PENDING).exists():
                tree_update_schedule(archive)  # idempotent: a lost task is redone
            return Finalized()
        _require_open_upload(archive, batch)
        files = declared_files(batch)
        verification = uploaded_files_verify(archive, files)
        dropped = set(verification.missing) | {m["path"] for m in verification.mismatched}
        verified = [f for f in files if f.path not in dropped]
        to_unlist: list[str] = []
        if dropped:
            to_unlist = uploaded_files_discard(archive, sorted(dropped))
            batch.files.filter(path__in=sorted(dropped)).delete()
        record_sizes(verified)
        batch.completed = timezone.now()
        if verified:
            batch.state = Batch.State.PENDING
            batch.sequence = next_sequence(archive)
            tree_update_schedule(archive)
        else:
            batch.state = Batch.State.CANCELLED
            batch.note = "finalized with no verified file"
        reconcile_when_urls_expire(archive, batch)
        batch.save(update_fields=["state", "sequence", "completed", "note", "reconcile_after"])
        if to_unlist:
            deletion_create(
                archive, user, to_unlist, note=f"not uploaded as declared in batch {batch.pk}"
            )
    return Finalized(batch, len(verified), verification.missing, verification.mismatched)
