"""Big files of write sessions (docs/writing.md, "Big files"): a file over
``DANDIZARR_MULTIPART_THRESHOLD_BYTES`` goes to storage in parts as its writer reads it, so
neither the writer nor the service holds it whole, and no md5 of the whole is needed before
its first byte is sent.

A begin opens an S3 multipart upload at a fresh staged key of the session, its parts cut by
the one rule of big files (``multipart_uploads.part_bytes``). Each part's md5 is declared when
its URL is asked for (the URL is bound to it, so storage refuses other bytes); the finish
declares the file's md5, completes the upload from the parts storage lists, each checked
against its declared md5 (``multipart_uploads.upload_complete``, as for batches), and stages
the file. Its md5 is proven from its bytes by the tree update before the commit's batch is
applied (``multipart_proofs``, as for batches): the commit hands the upload to its batch.
An abort or an expiry aborts open uploads and deletes what was completed
(``write_sessions.staged_objects_delete``); one a crash left behind, the sweep
(``multipart_uploads.abandoned_uploads_abort``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

from dandizarr.objectstore.multipart import MAX_OBJECT, composite_etag, part_count
from dandizarr_server.zarr_api.domain.keys import new_staged_key
from dandizarr_server.zarr_api.domain.permissions import Requester
from dandizarr_server.zarr_api.edge.exceptions import Conflict, NotFound, ValidationFailed
from dandizarr_server.zarr_api.models import MultipartUpload, WriteSession, ZarrArchive
from dandizarr_server.zarr_api.parsers.session_uploads import PartsDeclared
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.multipart_uploads import (
    multipart_threshold,
    part_bytes,
    upload_complete,
)
from dandizarr_server.zarr_api.services.write_sessions import (
    session_limits_check,
    session_lock,
    session_touch,
    staged_rows_record,
)


def session_upload_begin(
    *, user: Requester, archive: ZarrArchive, session: WriteSession, path: str, size: int
) -> MultipartUpload:
    """Open a multipart upload of ``path`` (``size`` bytes) in the session. Opened in storage
    first (no row names an upload that does not exist); one not recorded then is aborted
    here, or, the process dying, by the sweep."""
    threshold = multipart_threshold()
    if threshold is None or size <= threshold:
        raise ValidationFailed(
            f"a file of {size} bytes goes in one PUT (POST sessions/{{id}}/files/): only files "
            f"over multipart_threshold_bytes ({threshold}) are sent in parts",
            code="not_a_big_file",
        )
    if size > MAX_OBJECT:
        raise ValidationFailed(
            f"a file is at most S3's {MAX_OBJECT} bytes", code="multipart_parts_invalid"
        )
    store = get_store()
    key = new_staged_key(archive.zarr_id, session.session_id)
    upload_id = store.create_multipart_upload(key)
    try:
        with transaction.atomic():
            session = session_lock(user, archive, session)
            session_limits_check(session, {path: size})
            each = part_bytes(size)
            upload = MultipartUpload.objects.create(
                archive=archive,
                session=session,
                path=path,
                key=key,
                upload_id=upload_id,
                size=size,
                part_size=each,
                part_md5s=[""] * part_count(size, each),
                md5="",
                etag="",
            )
            session_touch(session)
            return upload
    except BaseException:
        store.abort_multipart_upload(key, upload_id)
        raise


def _upload_lock(session: WriteSession, upload_id: int) -> MultipartUpload:
    """The session's big file ``upload_id``, its row locked (after the session's)."""
    found = (
        MultipartUpload.objects.select_for_update().filter(pk=upload_id, session=session).first()
        if 0 < upload_id < 1 << 63  # a bigger number is no row's (nor PostgreSQL's bigint)
        else None
    )
    if found is None:
        raise NotFound(f"write session {session.session_id} has no big file {upload_id}")
    return found


def session_parts_sign(
    *,
    user: Requester,
    archive: ZarrArchive,
    session: WriteSession,
    upload_id: int,
    parts: PartsDeclared,
) -> list[str]:
    """Record the md5s of parts ``parts.first_part`` on and sign a PUT URL for each, bound to
    it. A part declared again takes its new md5 (a writer that read it again)."""
    with transaction.atomic():
        session = session_lock(user, archive, session)
        upload = _upload_lock(session, upload_id)
        _require_sending(upload)
        count = len(upload.part_md5s)
        last = parts.first_part + len(parts.md5s) - 1
        if last > count:
            raise ValidationFailed(
                f"the file has {count} parts of {upload.part_size} bytes (the last the rest); "
                f"part {last} is past them",
                code="multipart_parts_invalid",
            )
        md5s = list(upload.part_md5s)
        md5s[parts.first_part - 1 : last] = parts.md5s
        MultipartUpload.objects.filter(pk=upload.pk).update(part_md5s=md5s)
        session_touch(session)
    return get_store().presigned_part_urls(
        upload.key,
        upload.upload_id,
        list(parts.md5s),
        expires_in=settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS,
        first_part=parts.first_part,
    )


def _require_sending(upload: MultipartUpload) -> None:
    if upload.state != MultipartUpload.State.OPEN:
        raise Conflict(
            f"big file {upload.pk} ({upload.path!r}) is {upload.state}: begin it again",
            code="upload_ended",
        )


def session_upload_finish(
    *, user: Requester, archive: ZarrArchive, session: WriteSession, upload_id: int, md5: str
) -> MultipartUpload:
    """Complete the big file from its parts (each as declared) and stage it at its path with
    ``md5`` (proven from its bytes before the commit's batch applies). 400
    ``session_incomplete`` naming a part storage does not hold as declared (the upload stays
    open: PUT it again, then finish again). Finishing a finished file again is a no-op."""
    with transaction.atomic():
        session = session_lock(user, archive, session)
        upload = _upload_lock(session, upload_id)
        if upload.state == MultipartUpload.State.COMPLETED and upload.md5 == md5:
            return upload
        _require_sending(upload)
        undeclared = [n for n, m in enumerate(upload.part_md5s, 1) if not m]
        if undeclared:
            raise ValidationFailed(
                f"{len(undeclared)} parts of {upload.path!r} were never sent (the first: part "
                f"{undeclared[0]}): send them, then finish",
                code="session_incomplete",
                missing=[f"{upload.path} (part {n})" for n in undeclared],
            )
        upload.md5, upload.etag = md5, composite_etag(upload.part_md5s)
        MultipartUpload.objects.filter(pk=upload.pk).update(md5=upload.md5, etag=upload.etag)
    # Storage's ListParts and completion, with no lock held.
    problem, detail = upload_complete(upload)
    if problem is not None:
        named: dict[str, Any] = (
            {"missing": [f"{upload.path} ({detail})"]}
            if problem == "missing"
            else {
                "mismatched": [
                    {"path": upload.path, "expected": "part md5s as declared", "actual": detail}
                ]
            }
        )
        raise ValidationFailed(
            f"{upload.path!r} is not in storage as declared ({detail}): PUT the part again, "
            "then finish again",
            code="session_incomplete",
            **named,
        )
    try:
        with transaction.atomic():
            session = session_lock(user, archive, session)
            upload = _upload_lock(session, upload_id)
            if upload.state == MultipartUpload.State.COMPLETED:
                return upload  # a finish racing this one recorded it
            _require_sending(upload)
            MultipartUpload.objects.filter(pk=upload.pk).update(
                state=MultipartUpload.State.COMPLETED
            )
            staged_rows_record(
                archive, session, [(upload.path, md5, upload.size, upload.key)], verified=True
            )
    except BaseException:
        # Nothing names the object completed (the session ended meanwhile, or the path is
        # refused): it goes now; were this process to die here, garbage collection takes it.
        get_store().delete(upload.key)
        raise
    upload.state = MultipartUpload.State.COMPLETED
    return upload
