"""Write sessions (docs/writing.md): begin, stage files, delete paths, read the session's own
changes, commit, abort. Thin: parsers at the edge, services for the writes."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dandizarr_server.zarr_api.domain.permissions import require_session_writer, require_writer
from dandizarr_server.zarr_api.models import WriteSession, ZarrArchive
from dandizarr_server.zarr_api.parsers.flags import parse_flag
from dandizarr_server.zarr_api.parsers.upload_batch import parse_deleted_paths
from dandizarr_server.zarr_api.parsers.write_session import (
    parse_changes_query,
    parse_staged_files,
)
from dandizarr_server.zarr_api.runtime.storage import download_urls
from dandizarr_server.zarr_api.selectors.lookups import archive_for_write
from dandizarr_server.zarr_api.selectors.write_sessions import (
    session_change_at,
    session_changes,
    session_counts,
    session_get,
)
from dandizarr_server.zarr_api.services.session_commits import session_commit
from dandizarr_server.zarr_api.services.write_sessions import (
    session_abort,
    session_begin,
    session_files_stage,
    session_paths_delete,
)

_LIST = {"application/json": {"type": "array", "items": {"type": "object"}}}


def _session_json(session: WriteSession) -> dict[str, Any]:
    files, deletions, size = session_counts(session)
    return {
        "session_id": str(session.session_id),
        "zarr_id": str(session.archive.zarr_id),
        "state": session.state,
        # The id the session reads the draft by, as it was when the session began (its
        # snapshot: every read route takes it as it takes a version's); null once it ended.
        "read_id": str(session.snapshot.version_id) if session.snapshot is not None else None,
        "created": session.created,
        "expires": session.expires,
        "ended": session.ended,
        "batch": session.batch_id,
        "files": files,
        "deletions": deletions,
        "size": size,
    }


def writer_session(
    request: Request, zarr_id: str, session_id: str
) -> tuple[ZarrArchive, WriteSession]:
    """The archive (a writer's: 404 to whoever may not read it, 403 to a reader) and its
    session, the requester's own (or staff's)."""
    archive = archive_for_write(zarr_id, request.user)
    require_writer(request.user, archive.dandiset)
    session = session_get(archive, session_id)
    require_session_writer(request.user, session)
    return archive, session


class SessionsView(APIView):
    @extend_schema(request=None, responses={201: {"type": "object"}})
    def post(self, request: Request, zarr_id: str) -> Response:
        archive = archive_for_write(zarr_id, request.user)
        session = session_begin(user=request.user, archive=archive)
        return Response(_session_json(session), status=status.HTTP_201_CREATED)


class SessionView(APIView):
    @extend_schema(responses={200: {"type": "object"}})
    def get(self, request: Request, zarr_id: str, session_id: str) -> Response:
        _, session = writer_session(request, zarr_id, session_id)
        return Response(_session_json(session))

    def delete(self, request: Request, zarr_id: str, session_id: str) -> Response:
        archive, session = writer_session(request, zarr_id, session_id)
        session_abort(user=request.user, archive=archive, session=session)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SessionFilesView(APIView):
    @extend_schema(request=_LIST, responses={200: _LIST})
    def post(self, request: Request, zarr_id: str, session_id: str) -> Response:
        archive, session = writer_session(request, zarr_id, session_id)
        targets = session_files_stage(
            user=request.user,
            archive=archive,
            session=session,
            files=parse_staged_files(request.data),
        )
        return Response([{"path": t.path, "upload_url": t.upload_url} for t in targets])


class SessionDeletionsView(APIView):
    @extend_schema(request=_LIST, responses={204: None})
    def post(self, request: Request, zarr_id: str, session_id: str) -> Response:
        archive, session = writer_session(request, zarr_id, session_id)
        session_paths_delete(
            user=request.user,
            archive=archive,
            session=session,
            paths=parse_deleted_paths(request.data),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class SessionChangesView(APIView):
    """The session's own changes, for its writer's reads (read your writes)."""

    @extend_schema(responses={200: {"type": "object"}})
    def get(self, request: Request, zarr_id: str, session_id: str) -> Response:
        _, session = writer_session(request, zarr_id, session_id)
        query = parse_changes_query(request.query_params)
        if query.path is not None:
            found = session_change_at(session, query.path)
            changes = [found] if found is not None else []
        else:
            changes = session_changes(
                session, prefix=query.prefix, after=query.after, limit=query.limit
            )
        urls: dict[str, str] = {}
        if parse_flag(request, "urls"):
            keys = [c.key for c in changes if not c.deleted]
            urls = dict(zip(keys, download_urls(keys), strict=True))
        results = [
            {"path": c.path, "deleted": c.deleted, "md5": c.md5 or None, "size": c.size}
            | ({"download_url": urls[c.key]} if c.key in urls else {})
            for c in changes
        ]
        following = None
        if query.path is None and len(changes) == query.limit:
            params = {"prefix": query.prefix, "after": changes[-1].path, "limit": query.limit}
            following = request.build_absolute_uri(f"{request.path}?{urlencode(params)}")
        return Response({"results": results, "next": following})


class SessionCommitView(APIView):
    @extend_schema(request=None, responses={200: {"type": "object"}})
    def post(self, request: Request, zarr_id: str, session_id: str) -> Response:
        archive, session = writer_session(request, zarr_id, session_id)
        batch = session_commit(user=request.user, archive=archive, session=session)
        session.refresh_from_db()
        return Response(_session_json(session) | {"batch": batch.pk})
