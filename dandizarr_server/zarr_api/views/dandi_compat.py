"""What the real ``dandi`` CLI asks of the DANDI Archive API beyond our own routes (docs/api.md,
"DANDI clients"): server info, the token check, version metadata, asset info, an archive's
``files`` listing and downloads, the newest release's ``POST files/`` and ``finalize/``, and the
batch-flow release's ``ingest/``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from django.http import HttpResponse, HttpResponseBase
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from dandizarr_server.zarr_api.domain.permissions import require_writer
from dandizarr_server.zarr_api.edge.cache_headers import (
    document_etag,
    is_not_modified,
    not_modified,
    read_state,
    read_validators,
)
from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.edge.throttles import expensive_read_throttles
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.parsers.dandi import (
    parse_dandi_upload_files,
    parse_listing_prefix,
    query_flag,
)
from dandizarr_server.zarr_api.parsers.paging import query_positive_int
from dandizarr_server.zarr_api.parsers.upload_batch import parse_deleted_paths
from dandizarr_server.zarr_api.runtime.kept_documents import kept_document
from dandizarr_server.zarr_api.selectors.archive_contents import FileNode, node_get
from dandizarr_server.zarr_api.selectors.dandi import (
    count_with_prefix,
    files_with_prefix,
    listing_entry,
    server_info,
    version_metadata,
    version_summary,
)
from dandizarr_server.zarr_api.selectors.lookups import (
    archive_for_write,
    archive_get,
    asset_get,
    version_get,
)
from dandizarr_server.zarr_api.services.dandi_uploads import (
    dandi_files_delete,
    open_upload_add,
    upload_finalize,
)
from dandizarr_server.zarr_api.views.files import FilesView, file_download
from dandizarr_server.zarr_api.views.serializers import AssetSerializer

_LISTING_PAGE = 1000
_LISTING_PAGE_MAX = 10000


class ServerInfoView(APIView):
    permission_classes = [AllowAny]

    def get(self, request: Request) -> Response:
        return Response(server_info())


class AuthTokenView(APIView):
    """``GET /api/auth/token``: 200 with the token when ``Authorization: token <key>`` is valid."""

    permission_classes = [IsAuthenticated]

    def get(self, request: Request) -> Response:
        return Response(getattr(request.auth, "key", None))


class VersionMetadataView(APIView):
    """A version's Dandiset metadata (``GET .../versions/{version}/``)."""

    def get(self, request: Request, identifier: str, version: str) -> Response:
        return Response(version_metadata(version_get(identifier, version, request.user)))


class VersionInfoView(APIView):
    def get(self, request: Request, identifier: str, version: str) -> Response:
        found = version_get(identifier, version, request.user)
        return Response(
            {
                **version_summary(found),
                "metadata": version_metadata(found),
                "asset_validation_errors": [],
                "version_validation_errors": [],
            }
        )


class AssetInfoView(APIView):
    def get(self, request: Request, identifier: str, version: str, asset_id: str) -> Response:
        return Response(
            AssetSerializer(asset_get(identifier, version, asset_id, request.user)).data
        )


class DandiFilesView(APIView):
    """``files`` and ``files/`` of an archive: the DANDI listing (GET, ``?prefix=``), a file
    (``?prefix=PATH&download=true``), upload URLs (POST) and deletions (DELETE)."""

    def get_throttles(self) -> list[BaseThrottle]:
        """A listing (every file with the prefix, counted) is an expensive read; a download
        is not (a file's bytes, as ``/zarr/`` chunk reads)."""
        params = self.request.query_params
        listing = "recursive" in params or not query_flag(params.get("download"))
        return expensive_read_throttles(self.request, listing)

    @extend_schema(
        parameters=[
            OpenApiParameter("prefix", str, description="start of the paths listed"),
            OpenApiParameter("download", bool, description="the file at prefix: its bytes"),
            OpenApiParameter("after", str, description="cursor (the next link carries it)"),
            OpenApiParameter("page_size", int),
        ]
    )
    def get(self, request: Request, zarr_id: str) -> Response | HttpResponseBase:
        if "recursive" in request.query_params:  # our client's form before tree/ existed
            return FilesView().get(request, zarr_id, "")
        archive = archive_get(zarr_id, request.user)
        prefix = parse_listing_prefix(request.query_params.get("prefix", ""))
        if query_flag(request.query_params.get("download")):
            node = node_get(archive, prefix) if prefix else None
            if not isinstance(node, FileNode):
                raise NotFound(f"{prefix!r} is not a file of zarr archive {archive.zarr_id}")
            return file_download(request, archive, node)
        return self._listing_response(request, archive, prefix)

    def _listing_response(
        self, request: Request, archive: ZarrArchive, prefix: str
    ) -> Response | HttpResponseBase:
        """The listing with the read routes' cache policy: a version's, as JSON, made once
        and kept (its pages never change); a draft's revalidated."""
        form = request.accepted_renderer.format
        url = request.build_absolute_uri()
        etag = document_etag(*read_state(archive), "dandi-files", url, form)
        validators = read_validators(archive, etag)
        if is_not_modified(request, validators):
            return not_modified(validators, Vary="Accept")
        if archive.as_of is not None and form == "json":

            def make() -> Iterator[bytes]:
                yield JSONRenderer().render(self._listing(request, archive, prefix))

            return HttpResponse(
                b"".join(kept_document(etag, make())),
                content_type="application/json",
                headers=validators.headers(),
            )
        return Response(self._listing(request, archive, prefix), headers=validators.headers())

    @staticmethod
    def _listing(request: Request, archive: ZarrArchive, prefix: str) -> dict[str, Any]:
        page_size = query_positive_int(
            request.query_params, "page_size", _LISTING_PAGE, _LISTING_PAGE_MAX
        )
        after = request.query_params.get("after")
        results: list[dict[str, Any]] = []
        for node in files_with_prefix(archive, prefix, after=after):
            if len(results) == page_size:
                break
            results.append(listing_entry(archive, node))
        next_url = None
        if len(results) == page_size:
            query = request.query_params.copy()
            query["after"] = results[-1]["Key"]
            next_url = request.build_absolute_uri(f"{request.path}?{urlencode(query)}")
        return {
            "count": count_with_prefix(archive, prefix),
            "next": next_url,
            "previous": None,
            "results": results,
        }

    @extend_schema(
        request={"application/json": {"type": "array", "items": {"type": "object"}}},
        responses={200: {"type": "array", "items": {"type": "string"}}},
    )
    def post(self, request: Request, zarr_id: str) -> Response:
        archive = archive_for_write(zarr_id, request.user)
        require_writer(request.user, archive.dandiset)  # before the body is parsed
        files = parse_dandi_upload_files(request.data)
        targets = open_upload_add(user=request.user, archive=archive, files=files)
        return Response([t.upload_url for t in targets])

    @extend_schema(request={"application/json": {"type": "array", "items": {"type": "object"}}})
    def delete(self, request: Request, zarr_id: str) -> Response:
        archive = archive_for_write(zarr_id, request.user)
        require_writer(request.user, archive.dandiset)  # before the body is parsed
        dandi_files_delete(
            user=request.user, archive=archive, paths=parse_deleted_paths(request.data)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class FinalizeView(APIView):
    """``POST finalize/`` (newest dandi) and ``POST ingest/`` (dandi 0.48): verify the open
    upload, if any, and queue it for the tree; then poll the archive until ``Complete``."""

    @extend_schema(request=None)
    def post(self, request: Request, zarr_id: str) -> Response:
        done = upload_finalize(user=request.user, archive=archive_for_write(zarr_id, request.user))
        return Response(
            {
                "batch": done.batch.pk if done.batch else None,
                "verified": done.verified,
                "missing": done.missing,
                "mismatched": done.mismatched,
            }
        )
