"""Write sessions (docs/writing.md): writes into an archive's draft staged apart, under the
session's own keys, and made visible at once by a commit (``services.session_commits``) or
discarded by an abort.

A session holds no lock and no slot of the archive: sessions do not wait for each other, for
the archive's open batch or for its tree updates. Each request locks only the session's row,
so the writes of many processes (Dask workers) into one session are taken one request at a
time. Nothing a session stages is read by any route of the draft before its commit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Min, Sum
from django.utils import timezone

from dandizarr.checksums.paths import directories_above
from dandizarr_server.zarr_api.domain.declarations import FileDeclaration
from dandizarr_server.zarr_api.domain.keys import new_staged_key
from dandizarr_server.zarr_api.domain.permissions import (
    Requester,
    recorded_user,
    require_session_writer,
    require_writer,
)
from dandizarr_server.zarr_api.edge.exceptions import Conflict, ValidationFailed
from dandizarr_server.zarr_api.models import (
    CHANGING_STATES,
    ArchiveVersion,
    Batch,
    MultipartUpload,
    SessionFile,
    WriteSession,
    ZarrArchive,
)
from dandizarr_server.zarr_api.parsers.problems import invalid
from dandizarr_server.zarr_api.runtime.scheduling import PRUNE_FILE_HISTORY, schedule_on_commit
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_contents import ArchiveSnapshot, archive_snapshot
from dandizarr_server.zarr_api.selectors.lookups import require_draft
from dandizarr_server.zarr_api.services.archive_locks import lock_archive, lock_tree
from dandizarr_server.zarr_api.services.batch_rules import (
    UploadTarget,
    check_file_directory_clashes,
    upload_targets_sign,
)
from dandizarr_server.zarr_api.services.multipart_uploads import (
    multipart_threshold,
    multipart_uploads_abort,
)
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning

logger = logging.getLogger(__name__)


def session_begin(*, user: Requester, archive: ZarrArchive) -> WriteSession:
    """Open a write session on the archive's draft as it is applied now: its snapshot (a
    version of the draft, O(1), as publishing makes one) is what its reads see under its own
    writes, whatever commits meanwhile. Under the tree's lock, then the archive's (the one lock
    order): no tree update is between recording what it replaces and applying it, so the
    snapshot is of a tree no update is writing. The batches applied so far are the session's
    base; one sequenced but not yet applied changes the draft after it (the commit's conflict
    check counts it)."""
    require_draft(archive)
    require_writer(user, archive.dandiset)
    # The snapshot reads what later changes of the draft replace from the objects storage keeps
    # (a loose file overwritten in place): without versioning they would be gone. Before any
    # lock (a storage request).
    ensure_storage_versioning()
    with transaction.atomic():
        lock_tree(archive.pk)
        locked = lock_archive(archive)
        sequenced = Batch.objects.filter(archive=locked).exclude(sequence=None)
        unapplied = sequenced.filter(state__in=CHANGING_STATES).aggregate(m=Min("sequence"))["m"]
        if unapplied is not None:
            base = unapplied - 1
        else:
            base = sequenced.aggregate(m=Max("sequence"))["m"] or 0
        snapshot = ArchiveVersion.objects.create(
            archive=locked,
            kind=ArchiveVersion.Kind.SNAPSHOT,
            number=0,
            generation=locked.generation,
            checksum=locked.checksum,
            file_count=locked.file_count,
            size=locked.size,
        )
        ZarrArchive.objects.filter(pk=locked.pk).update(generation=locked.generation + 1)
        return WriteSession.objects.create(
            archive=locked,
            user=recorded_user(user),
            base_sequence=base,
            snapshot=snapshot,
            expires=_expiry(),
        )


def _expiry() -> datetime:
    return timezone.now() + timedelta(seconds=settings.DANDIZARR_WRITE_SESSION_TTL_SECONDS)


def session_lock(user: Requester, archive: ZarrArchive, session: WriteSession) -> WriteSession:
    """The session's row, locked, for a change by ``user``: its own writer (or staff), who may
    still write to the dandiset, while it is open. The archive row is not locked."""
    require_draft(archive)
    require_writer(user, archive.dandiset)
    locked = WriteSession.objects.select_for_update().get(pk=session.pk)
    require_session_writer(user, locked)
    require_open(locked)
    return locked


def require_open(session: WriteSession) -> None:
    if session.state != WriteSession.State.OPEN:
        raise Conflict(
            f"write session {session.session_id} is {session.state}: begin a new one",
            code="session_ended",
        )
    if session.expires <= timezone.now():
        raise Conflict(
            f"write session {session.session_id} expired (no write for "
            f"{settings.DANDIZARR_WRITE_SESSION_TTL_SECONDS} s): begin a new one",
            code="session_ended",
        )


def session_files_stage(
    *,
    user: Requester,
    archive: ZarrArchive,
    session: WriteSession,
    files: Sequence[FileDeclaration],
) -> list[UploadTarget]:
    """Stage ``files`` (path, md5, size) in the session: each gets a fresh key of the session
    and a PUT URL bound to its md5. A path staged or deleted before takes the new write."""
    threshold = multipart_threshold()
    too_big = [f for f in files if threshold is not None and (f.size or 0) > threshold]
    if too_big:
        raise invalid(
            "sizes",
            [
                {
                    "path": f.path,
                    "problem": f"is bigger than {threshold} bytes: send it in parts "
                    "(POST sessions/{id}/uploads/)",
                }
                for f in too_big
            ],
        )
    with transaction.atomic():
        session = session_lock(user, archive, session)
        rows = [
            (f.path, f.md5, f.size or 0, new_staged_key(archive.zarr_id, session.session_id))
            for f in files
        ]
        staged_rows_record(archive, session, rows, verified=False)
        return upload_targets_sign([(path, key, md5) for path, md5, _, key in rows])


def staged_rows_record(
    archive: ZarrArchive,
    session: WriteSession,
    rows: Sequence[tuple[str, str, int, str]],
    *,
    verified: bool,
) -> None:
    """Record files (path, md5, size, key) staged in the session (its row locked): within its
    limit, clashing with no file or directory of the draft. ``verified``: storage was found
    to hold each (a big file, completed)."""
    paths = [path for path, _, _, _ in rows]
    session_limits_check(session, {path: size for path, _, size, _ in rows})
    deletions = dict.fromkeys(
        SessionFile.objects.filter(session=session, deleted=True, path__in=list(_nearby(paths)))
        .values_list("path", flat=True)
        .iterator(),
        None,
    )
    # Against the draft as it will be once its pending batches apply, the session's own
    # deletions too; what changes in the draft meanwhile is the commit's conflict check.
    draft = archive_snapshot(archive, cached=True)
    check_file_directory_clashes(paths, ArchiveSnapshot(draft.tree, draft.pending | deletions))
    _rows_replace(session, rows, deleted=False, verified=verified)
    session_touch(session)


def session_touch(session: WriteSession) -> None:
    """A write of the session: it lives on for the TTL from now."""
    WriteSession.objects.filter(pk=session.pk).update(expires=_expiry())


def _nearby(paths: Sequence[str]) -> set[str]:
    """The paths and their directories: where a deletion of the session matters to them."""
    return {*paths, *directories_above(paths)}


def session_limits_check(session: WriteSession, sizes: Mapping[str, int]) -> None:
    """ValidationFailed (``session_too_large``) when the session (its row locked) would
    change more paths than ``DANDIZARR_WRITE_SESSION_FILE_LIMIT`` or stage more bytes than
    ``DANDIZARR_WRITE_SESSION_BYTE_LIMIT`` with ``sizes`` (path: bytes; 0 for a deletion)
    written: what it holds at other paths, its big files being sent among them, and these."""
    paths = list(sizes)
    rows = SessionFile.objects.filter(session=session)
    held = rows.count() - rows.filter(path__in=paths).count()
    others = rows.exclude(path__in=paths)
    held_bytes = others.aggregate(s=Sum("size"))["s"] or 0
    sending = MultipartUpload.objects.filter(
        session=session, state=MultipartUpload.State.OPEN
    ).exclude(path__in=paths)
    held_bytes += sending.aggregate(s=Sum("size"))["s"] or 0
    limit = settings.DANDIZARR_WRITE_SESSION_FILE_LIMIT
    if held + len(paths) > limit:
        raise ValidationFailed(
            f"the session would change {held + len(paths)} paths; at most {limit} are "
            "allowed in one session (commit it and begin another)",
            code="session_too_large",
        )
    byte_limit = settings.DANDIZARR_WRITE_SESSION_BYTE_LIMIT
    if held_bytes + sum(sizes.values()) > byte_limit:
        raise ValidationFailed(
            f"the session would stage {held_bytes + sum(sizes.values())} bytes; at most "
            f"{byte_limit} are allowed in one session (commit it and begin another)",
            code="session_too_large",
        )


def _rows_replace(
    session: WriteSession,
    rows: Sequence[tuple[str, str, int, str]],
    *,
    deleted: bool,
    verified: bool = False,
) -> None:
    """The session's rows at these paths become ``rows`` (path, md5, size, key). A staged
    object replaced is left to garbage collection: its URL may still be in use."""
    SessionFile.objects.filter(session=session, path__in=[r[0] for r in rows]).delete()
    SessionFile.objects.bulk_create(
        SessionFile(
            session=session,
            path=path,
            md5=md5,
            size=size,
            key=key,
            deleted=deleted,
            verified=deleted or verified,
        )
        for path, md5, size, key in rows
    )


def session_paths_delete(
    *, user: Requester, archive: ZarrArchive, session: WriteSession, paths: Sequence[str]
) -> None:
    """Record deletions of ``paths`` in the session (a path the draft does not hold, or the
    session staged, is simply not there after the commit)."""
    with transaction.atomic():
        session = session_lock(user, archive, session)
        session_limits_check(session, dict.fromkeys(paths, 0))
        _rows_replace(session, [(p, "", 0, "") for p in paths], deleted=True)
        session_touch(session)


def session_abort(*, user: Requester, archive: ZarrArchive, session: WriteSession) -> None:
    """End the session without a change to the draft; its staged objects are deleted now (or,
    storage failing, by the sweep: the intent commits first)."""
    with transaction.atomic():
        session = session_lock(user, archive, session)
        session_end(session, WriteSession.State.ABORTED)
    try:
        staged_objects_delete(session.pk)
    except Exception:
        logger.exception("write session %s: staged objects left to the sweep", session.session_id)


def session_end(session: WriteSession, state: WriteSession.State) -> None:
    """The session ends (in the caller's transaction): its snapshot goes, and the history rows
    only it read are pruned once that commits (garbage collection may then take their
    objects)."""
    WriteSession.objects.filter(pk=session.pk).update(state=state, ended=timezone.now())
    snapshot = ArchiveVersion.objects.filter(session__pk=session.pk).first()
    if snapshot is not None:
        snapshot.delete()
        schedule_on_commit(PRUNE_FILE_HISTORY, snapshot.archive_id, snapshot.generation)


def staged_objects_delete(session_pk: int) -> None:
    """Delete what an ended session without a commit staged, then its rows; idempotent. Its
    big files' uploads are aborted (their parts deleted) and what any completed, deleted."""
    keys = list(
        SessionFile.objects.filter(session_id=session_pk, deleted=False)
        .exclude(key="")
        .values_list("key", flat=True)
    )
    uploads = list(
        MultipartUpload.objects.filter(
            session_id=session_pk,
            state__in=[MultipartUpload.State.OPEN, MultipartUpload.State.COMPLETED],
        )
    )
    store = get_store()
    multipart_uploads_abort(uploads)
    store.delete_many([*keys, *(u.key for u in uploads)])
    MultipartUpload.objects.filter(pk__in=[u.pk for u in uploads]).update(
        state=MultipartUpload.State.ABORTED
    )
    with transaction.atomic():
        SessionFile.objects.filter(session_id=session_pk).delete()
        WriteSession.objects.filter(pk=session_pk).update(cleaned=True)
