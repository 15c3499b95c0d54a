"""Big files of upload batches, sent in parts (docs/api.md, "Big files").

A start (or add) that declares a file's size over ``DANDIZARR_MULTIPART_THRESHOLD_BYTES`` with
each part's md5 opens an S3 multipart upload for it, within the caps on what a batch and an
account may declare in parts; its part URLs, each bound to its part's md5, are handed out a
page at a time (``part_pages``). Completing the batch completes the uploads from the parts
storage lists (each checked against its declared md5: moto takes any body) and checks the
object's composite ETag; the tree update then proves each file's md5 from its bytes
(``multipart_proofs``) before the batch is applied. Cancels, stale sweeps and re-declared
paths abort their uploads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from dandizarr.objectstore import ObjectNotFound
from dandizarr.objectstore.multipart import (
    MAX_OBJECT,
    composite_etag,
    part_count,
    part_ranges,
    part_size,
)
from dandizarr_server.zarr_api.domain.declarations import (
    DeclaredInParts,
    FileDeclaration,
    check_declared_in_parts,
)
from dandizarr_server.zarr_api.domain.keys import FILES_ROOT, SHARDS_ROOT
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.models import Batch, MultipartUpload, WriteSession, ZarrArchive
from dandizarr_server.zarr_api.parsers.problems import Problem
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.declared_parts import (
    account_declared_bytes,
    batch_declared_in_parts,
)
from dandizarr_server.zarr_api.services.archive_locks import lock_account

logger = logging.getLogger(__name__)


def multipart_threshold() -> int | None:
    """Files bigger than this go in parts; None where storage takes any file in one PUT (the
    local backend, which takes no multipart uploads)."""
    if not get_store().takes_multipart:
        return None
    return int(settings.DANDIZARR_MULTIPART_THRESHOLD_BYTES)


def part_bytes(size: int) -> int:
    """The part size of a ``size``-byte file: the one rule, with the service's minimum."""
    return part_size(size, settings.DANDIZARR_MULTIPART_PART_BYTES)


def multipart_files_check(files: Sequence[FileDeclaration]) -> list[FileDeclaration]:
    """The files declared in parts, each checked against the rule; 400 naming every file that
    breaks it (and nothing opened)."""
    threshold = multipart_threshold()
    problems: list[Problem] = []
    big: list[FileDeclaration] = []
    for f in files:
        if f.size is None:
            continue
        if f.size > MAX_OBJECT:
            problems.append({"path": f.path, "problem": f"is over S3's {MAX_OBJECT} bytes"})
        elif threshold is None:
            if f.part_md5s:
                problems.append(
                    {
                        "path": f.path,
                        "problem": "is declared in parts; this storage takes any "
                        "file in one PUT (multipart_threshold_bytes is null)",
                    }
                )
        elif f.size <= threshold:
            if f.part_md5s:
                problems.append(
                    {
                        "path": f.path,
                        "problem": f"is declared in parts; only files over "
                        f"{threshold} bytes are sent in parts",
                    }
                )
        else:
            expected = part_count(f.size, part_bytes(f.size))
            if len(f.part_md5s) != expected:
                problems.append(
                    {
                        "path": f.path,
                        "problem": f"is over {threshold} bytes: declare its {expected} parts of "
                        f"{part_bytes(f.size)} bytes (the last the rest), each part's md5, "
                        f"got {len(f.part_md5s)}",
                        "part_size": part_bytes(f.size),
                        "parts": expected,
                    }
                )
            else:
                big.append(f)
    if problems:
        shown = "; ".join(f"{p['path']!r} {p['problem']}" for p in problems[:5])
        raise ValidationFailed(
            f"invalid parts: {shown}", code="multipart_parts_invalid", paths=problems
        )
    return big


def multipart_uploads_open(
    archive: ZarrArchive, batch: Batch, files: Sequence[FileDeclaration]
) -> dict[str, MultipartUpload]:
    """Open a multipart upload per big file of ``batch`` (in the caller's transaction, under
    its archive lock); each big file's upload, by path (the caller signs its part URLs, a page
    at a time: ``part_pages``). What the batch and its uploader's open batches would then
    declare in parts is checked against the caps first (``check_declared_in_parts``: refused
    whole, nothing opened). A path the batch is uploading in parts already keeps its upload
    when declared again with the same md5 and parts (a client resuming: the parts it sent
    stay); otherwise that upload is aborted once this commits. The uploads are opened in
    storage first (no row can name one that does not exist); one the transaction then does
    not record is aborted by the sweep (``abandoned_uploads_abort``)."""
    big = multipart_files_check(files)
    if big:
        _declared_in_parts_check(batch, files, big)
    held = list(
        MultipartUpload.objects.filter(
            batch=batch, path__in=[f.path for f in files], state=MultipartUpload.State.OPEN
        )
    )
    declared = {f.path: (f.md5, f.size, list(f.part_md5s)) for f in big}
    kept = [u for u in held if declared.get(u.path) == (u.md5, u.size, u.part_md5s)]
    replaced = [u for u in held if u not in kept]
    resumed = {u.path: u for u in kept}
    big = [f for f in big if f.path not in resumed]
    if replaced:
        MultipartUpload.objects.filter(pk__in=[u.pk for u in replaced]).update(
            state=MultipartUpload.State.ABORTED
        )
        transaction.on_commit(lambda: multipart_uploads_abort(replaced))
    if not big:
        return resumed
    store = get_store()
    keys = [archive.storage_prefix + f.path for f in big]
    upload_ids = store.map_requests(store.create_multipart_upload, keys)
    try:
        return resumed | _recorded(archive, batch, big, keys, upload_ids)
    except BaseException:
        # Nothing will complete them; were this process to die here instead, the sweep
        # (abandoned_uploads_abort) aborts them.
        store.map_requests(
            lambda pair: store.abort_multipart_upload(*pair),
            list(zip(keys, upload_ids, strict=True)),
        )
        raise


def _declared_in_parts_check(
    batch: Batch, files: Sequence[FileDeclaration], big: Sequence[FileDeclaration]
) -> None:
    """The caps, on what the batch would hold in parts once ``files`` are taken (a path
    declared again counts once, as now declared) and on its uploader's open batches together
    (read under the uploader's row lock: one start at a time, whatever the archive)."""
    lock_account(batch.user_id)
    declared = DeclaredInParts(sum(f.size or 0 for f in big), sum(len(f.part_md5s) for f in big))
    in_batch = batch_declared_in_parts(batch, except_paths=[f.path for f in files]) + declared
    check_declared_in_parts(in_batch, account_declared_bytes(batch) + in_batch.bytes)


def _recorded(
    archive: ZarrArchive,
    batch: Batch,
    big: Sequence[FileDeclaration],
    keys: Sequence[str],
    upload_ids: Sequence[str],
) -> dict[str, MultipartUpload]:
    rows = [
        MultipartUpload(
            archive=archive,
            batch=batch,
            path=f.path,
            key=key,
            upload_id=upload_id,
            size=f.size or 0,
            part_size=part_bytes(f.size or 0),
            part_md5s=list(f.part_md5s),
            md5=f.md5,
            etag=composite_etag(f.part_md5s),
        )
        for f, key, upload_id in zip(big, keys, upload_ids, strict=True)
    ]
    # A row per INSERT: Django inserts several rows on PostgreSQL as arrays (UNNEST), whose
    # jsonb[] literal psycopg quotes in Python, two regex callbacks per part md5 (a start's
    # CPU grew several times over); one row's jsonb libpq quotes.
    MultipartUpload.objects.bulk_create(rows, batch_size=1)
    return {row.path: row for row in rows}


def multipart_uploads_abort(uploads: Sequence[MultipartUpload]) -> None:
    """Abort these uploads in storage (gone already is fine)."""
    store = get_store()
    store.map_requests(lambda u: store.abort_multipart_upload(u.key, u.upload_id), list(uploads))


def abandoned_uploads_abort(min_age: timedelta) -> int:
    """The sweep: abort every multipart upload storage holds under an archive's files or
    shards that no open batch or write session is sending (S3 keeps unfinished parts, and
    bills them, until aborted): those of ended batches and sessions a cancel or an abort could
    not reach, and those a crash left between storage and the database. Uploads younger than
    ``min_age`` are left alone (a start may be recording one).
    How many were aborted."""
    store = get_store()
    if not store.takes_multipart:
        return 0
    cutoff = timezone.now() - min_age
    # An upload is live while its batch or its write session is open.
    sending = Q(batch__state=Batch.State.OPEN) | Q(session__state=WriteSession.State.OPEN)
    open_uploads = MultipartUpload.objects.filter(state=MultipartUpload.State.OPEN)
    live = set(open_uploads.filter(sending).values_list("upload_id", flat=True))
    aborted = 0
    # Batches send big files to loose keys; write sessions, to their staged keys.
    for root in (FILES_ROOT, SHARDS_ROOT):
        for upload in store.list_multipart_uploads(root):
            if upload.upload_id in live or upload.initiated > cutoff:
                continue
            store.abort_multipart_upload(upload.key, upload.upload_id)
            aborted += 1
    open_uploads.exclude(sending).update(state=MultipartUpload.State.ABORTED)
    return aborted


@dataclass
class PartsCheck:
    """What storage holds of a batch's multipart uploads that it should not."""

    missing: list[str]
    mismatched: list[dict[str, str]]


def multipart_uploads_complete(batch: Batch) -> PartsCheck:
    """Complete the batch's open multipart uploads whose parts storage holds as declared.
    Runs before the caller locks the archive (one ListParts and one completion per file, which
    S3 may take a while over); a file whose parts are missing or other bytes stays open and is
    reported, so the client PUTs them again and completes again."""
    store = get_store()
    check = PartsCheck([], [])
    uploads = list(MultipartUpload.objects.filter(batch=batch, state=MultipartUpload.State.OPEN))

    def complete(upload: MultipartUpload) -> tuple[MultipartUpload, str | None, str]:
        return upload, *upload_complete(upload)

    for upload, problem, detail in store.map_requests(complete, uploads):
        if problem == "missing":
            check.missing.append(f"{upload.path} ({detail})")
        elif problem == "mismatched":
            check.mismatched.append(
                {"path": upload.path, "expected": "part md5s as declared", "actual": detail}
            )
        else:
            MultipartUpload.objects.filter(pk=upload.pk, state=MultipartUpload.State.OPEN).update(
                state=MultipartUpload.State.COMPLETED
            )
    return check


def upload_complete(upload: MultipartUpload) -> tuple[str | None, str]:
    """Complete ``upload`` in storage if it holds every part as declared: ``(None, "")``, or
    ``("missing" | "mismatched", which part)`` with the upload left open (the client PUTs
    the part again). An upload completed already (a completion that died before recording it,
    or one racing this) is fine when its object is what the declared parts make. The one rule
    of batches' and write sessions' big files alike."""
    store = get_store()
    try:
        stored = {p.number: p for p in store.list_parts(upload.key, upload.upload_id)}
    except ObjectNotFound:
        info = store.head(upload.key)
        if info is not None and (info.etag, info.size) == (upload.etag, upload.size):
            return None, ""
        return "missing", "its multipart upload is gone: start the file again"
    ranges = part_ranges(upload.size, upload.part_size)
    for number, ((start, end), md5) in enumerate(
        zip(ranges, upload.part_md5s, strict=True), start=1
    ):
        part = stored.get(number)
        if part is None:
            return "missing", f"part {number}"
        if part.etag != md5 or part.size != end - start:
            return "mismatched", f"part {number}: {part.etag} ({part.size} bytes)"
    store.complete_multipart_upload(
        upload.key, upload.upload_id, [(n, m) for n, m in enumerate(upload.part_md5s, 1)]
    )
    return None, ""


def completed_uploads(batch: Batch) -> dict[str, tuple[str, int]]:
    """``{path: (etag, size)}`` the batch's files completed in parts must have in storage."""
    rows = MultipartUpload.objects.filter(batch=batch, state=MultipartUpload.State.COMPLETED)
    return {path: (etag, size) for path, etag, size in rows.values_list("path", "etag", "size")}
