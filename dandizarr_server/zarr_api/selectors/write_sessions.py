"""Write sessions as they are read (docs/writing.md): one by its id, the paths it changed (its
own writes, for the writer's reads), and the staged objects storage holds for open sessions
(what garbage collection, the audit and the local backend's storage endpoint must know)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import QuerySet

from dandizarr_server.zarr_api.domain.keys import staged_key_session
from dandizarr_server.zarr_api.domain.permissions import user_can_write
from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import SessionFile, WriteSession, ZarrArchive
from dandizarr_server.zarr_api.parsers.identifiers import parse_zarr_id


def session_get(archive: ZarrArchive, session_id: str) -> WriteSession:
    """The archive's write session ``session_id`` (NotFound when it has none such)."""
    parsed = parse_zarr_id(session_id)
    found = (
        WriteSession.objects.filter(archive=archive, session_id=parsed).first()
        if parsed is not None
        else None
    )
    if found is None:
        raise NotFound(f"zarr archive {archive.zarr_id} has no write session {session_id[:64]!r}")
    return found


@dataclass(frozen=True)
class SessionChange:
    """A path a session changed: a staged file (its md5, size and object), or a deletion."""

    path: str
    deleted: bool
    md5: str
    size: int
    key: str


def session_changes(
    session: WriteSession, *, prefix: str = "", after: str | None = None, limit: int
) -> list[SessionChange]:
    """At most ``limit`` of the session's changed paths starting with ``prefix``, in path
    order, after ``after``."""
    rows = SessionFile.objects.filter(session=session)
    if prefix:
        rows = rows.filter(path__startswith=prefix)
    if after is not None:
        rows = rows.filter(path__gt=after)
    return [
        SessionChange(*row)
        for row in rows.order_by("path").values_list("path", "deleted", "md5", "size", "key")[
            :limit
        ]
    ]


def session_change_at(session: WriteSession, path: str) -> SessionChange | None:
    row = (
        SessionFile.objects.filter(session=session, path=path)
        .values_list("path", "deleted", "md5", "size", "key")
        .first()
    )
    return SessionChange(*row) if row is not None else None


def session_counts(session: WriteSession) -> tuple[int, int, int]:
    """(files staged, deletions, bytes staged) of the session."""
    rows = SessionFile.objects.filter(session=session)
    files = rows.filter(deleted=False)
    size = sum(files.values_list("size", flat=True).iterator(chunk_size=5000))
    return files.count(), rows.filter(deleted=True).count(), size


def open_sessions(archive: ZarrArchive) -> QuerySet[WriteSession]:
    return WriteSession.objects.filter(archive=archive, state=WriteSession.State.OPEN)


def staged_keys(archive: ZarrArchive, keys: Iterable[str]) -> set[str]:
    """Which of ``keys`` are staged files of an open session of the archive (or of one whose
    commit has not been cleaned up: its files are shards then, but read both ways)."""
    return set(
        SessionFile.objects.filter(
            session__archive=archive,
            session__state__in=[WriteSession.State.OPEN, WriteSession.State.COMMITTED],
            key__in=list(keys),
        ).values_list("key", flat=True)
    )


def staged_upload_expected(key: str, md5: str | None) -> bool:
    """An open session staged ``key`` with ``md5`` (and its writer may still write to the
    dandiset): the local backend's storage endpoint takes that PUT and no other."""
    if md5 is None:
        return False  # a session's URLs always sign the md5
    rows = SessionFile.objects.filter(
        key=key, md5=md5, deleted=False, session__state=WriteSession.State.OPEN
    ).select_related("session__user", "session__archive__dandiset")
    for row in rows[:1]:
        return user_can_write(row.session.user, row.session.archive.dandiset)
    # A key the session staged and then staged again (the path written twice): its first PUT
    # may still be in flight. S3 takes it (its URL is signed for those bytes, to a key no row
    # names); so does the local backend, while the session is open. Garbage collection takes
    # the object, as on S3.
    ids = staged_key_session(key)
    zarr_id = None if ids is None else parse_zarr_id(ids[0])
    if ids is None or zarr_id is None:
        return False
    try:
        session_id = uuid.UUID(ids[1])
    except ValueError:
        return False
    sessions = WriteSession.objects.filter(
        session_id=session_id, archive__zarr_id=zarr_id, state=WriteSession.State.OPEN
    ).select_related("user", "archive__dandiset")
    for session in sessions[:1]:
        return user_can_write(session.user, session.archive.dandiset)
    return False
