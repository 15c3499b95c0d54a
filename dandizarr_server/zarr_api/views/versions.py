"""Views of an archive's versions: the list, one version, and what changed between two.

A version is read like the draft, by its own id (``zarr_id`` in these answers) on every read
route: ``/zarr/{id}/``, ``/api/zarr/{id}/files/``, ``/api/zarr/{id}/manifest.json``, the page."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dandizarr.checksums import FileState
from dandizarr_server.zarr_api.domain.permissions import require_writer
from dandizarr_server.zarr_api.edge.exceptions import NotFound, ValidationFailed
from dandizarr_server.zarr_api.edge.throttles import EXPENSIVE_READ_THROTTLES
from dandizarr_server.zarr_api.models import ArchiveVersion, ZarrArchive
from dandizarr_server.zarr_api.parsers.diffs import parse_diff_query
from dandizarr_server.zarr_api.parsers.paging import page_request, query_positive_int
from dandizarr_server.zarr_api.selectors.archive_versions import (
    archive_version_find,
    archive_version_summaries,
    archive_version_summary,
    archive_versions,
    version_changes,
)
from dandizarr_server.zarr_api.selectors.lookups import (
    archive_for_write,
    archive_get,
)
from dandizarr_server.zarr_api.selectors.tree_diffs import archives_diff
from dandizarr_server.zarr_api.services.draft_reset import draft_reset
from dandizarr_server.zarr_api.views.paging import page_links


def _draft_of(zarr_id: str, request: Request) -> ZarrArchive:
    archive = archive_get(zarr_id, request.user)
    archive.as_of = None  # a version's id names its archive here
    return archive


def _version(archive: ZarrArchive, number: str) -> ArchiveVersion:
    found = archive_version_find(archive, number)
    if found is None:
        raise NotFound(f"zarr archive {archive.zarr_id} has no version {number!r}")
    return found


class ArchiveVersionsView(APIView):
    """``GET /api/zarr/{zarr_id}/versions/?page=&page_size=``: the published versions, oldest
    first, a page at a time (an archive may be published without end)."""

    @extend_schema(parameters=[OpenApiParameter("page", int), OpenApiParameter("page_size", int)])
    def get(self, request: Request, zarr_id: str) -> Response:
        archive = _draft_of(zarr_id, request)
        page = page_request(request.query_params)
        versions = archive_versions(archive)
        links = page_links(request, page, versions.count())
        shown = archive_version_summaries(list(versions[page.start : page.stop]))
        return Response({"zarr_id": str(archive.zarr_id), **links, "results": shown})


class ArchiveVersionView(APIView):
    """``GET /api/zarr/{zarr_id}/versions/{number}/``."""

    def get(self, request: Request, zarr_id: str, number: str) -> Response:
        archive = _draft_of(zarr_id, request)
        return Response(archive_version_summary(_version(archive, number)))


def _state(state: FileState | None) -> dict[str, Any] | None:
    return None if state is None else {"digest": state.md5, "size": state.size}


class VersionChangesView(APIView):
    """``GET /api/zarr/{zarr_id}/versions/{number}/changes/?against=draft|{number}``: the paths
    added, removed and changed from that version to another (or to the draft)."""

    throttle_classes = EXPENSIVE_READ_THROTTLES

    @extend_schema(
        parameters=[
            OpenApiParameter("against", str, description="a later version's number, or draft"),
            OpenApiParameter("limit", int, description="at most this many paths (10000)"),
        ]
    )
    def get(self, request: Request, zarr_id: str, number: str) -> Response:
        archive = _draft_of(zarr_id, request)
        older = _version(archive, number)
        against = request.query_params.get("against", "draft")
        newer = None if against == "draft" else _version(archive, against)
        if newer is not None and newer.number < older.number:
            raise ValidationFailed(
                f"against={against} is older than version {older.number}: compare from the "
                "older version to the newer one"
            )
        limit = query_positive_int(request.query_params, "limit", 1000, 10000)
        changes = version_changes(archive, older, newer)
        counts = {"added": 0, "removed": 0, "changed": 0}
        for change in changes:
            counts[change.kind] += 1
        return Response(
            {
                "from": older.number,
                "to": "draft" if newer is None else newer.number,
                **counts,
                "truncated": len(changes) > limit,
                "results": [
                    {
                        "path": c.path,
                        "change": c.kind,
                        "before": _state(c.before),
                        "after": _state(c.after),
                    }
                    for c in changes[:limit]
                ],
            }
        )


class DraftResetView(APIView):
    """``POST /api/zarr/{zarr_id}/versions/{number}/reset/``: make the draft that version
    again (owners); 202 with the batches doing it."""

    def post(self, request: Request, zarr_id: str, number: str) -> Response:
        # A write: through a version's id it is refused, as every write is.
        archive = archive_for_write(zarr_id, request.user)
        require_writer(request.user, archive.dandiset)
        made = draft_reset(user=request.user, archive=archive, version=_version(archive, number))
        return Response(
            {"version": int(number), "batches": [b.pk for b in made]},
            status=status.HTTP_202_ACCEPTED,
        )


class ArchiveDiffView(APIView):
    """``GET /api/zarr/{zarr_id}/diff/?to={zarr_id}``: the files added, modified and deleted
    from one archive state to another (a draft, a version's or a snapshot's id), a page at a
    time in tree order (docs/api.md, "Diffs")."""

    throttle_classes = EXPENSIVE_READ_THROTTLES

    @extend_schema(
        parameters=[
            OpenApiParameter("to", str, description="the archive, version or snapshot id to"),
            OpenApiParameter("after", str, description="resume past this path (a page's next)"),
            OpenApiParameter("limit", int, description="at most this many changes (10000)"),
        ]
    )
    def get(self, request: Request, zarr_id: str) -> Response:
        before = archive_get(zarr_id, request.user)  # first: a stranger learns nothing more
        asked = parse_diff_query(request.query_params)
        after = archive_get(asked.to, request.user)
        page = archives_diff(before, after, since=asked.after, limit=asked.limit)
        lists: dict[str, list[str]] = {"added": [], "modified": [], "deleted": []}
        for change in page.changes:
            lists[change.kind].append(change.path)
        added = sum(c.bytes_added for c in page.changes)
        deleted = sum(c.bytes_deleted for c in page.changes)
        following = None
        if page.next_after is not None:
            query = request.query_params.copy()
            query["after"] = page.next_after
            following = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
        return Response(
            {
                "from": str(before.read_id),
                "to": str(after.read_id),
                **lists,
                "bytes_added": added,
                "bytes_deleted": deleted,
                "next": following,
            }
        )
