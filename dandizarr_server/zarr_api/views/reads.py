"""The archive as plain HTTP, mirroring the bucket's ``zarr/{zarr_id}/{key}`` layout:
``GET|HEAD /zarr/{zarr_id}/{key}`` serves a file's bytes (ranges, ETag, 304, 416, 404 for an
absent key), ``/zarr/{zarr_id}/{dir}/`` lists a directory. Anonymous, read-only, CORS-open
(Neuroglancer reads from the browser). Plain Django views: no DRF negotiation per chunk read.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator

from django.conf import settings
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.utils.http import http_date
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.views import APIView

from dandizarr.objectstore.user_bytes import (
    BYTES_TYPE,
    INERT_HEADERS,
    content_type,
)
from dandizarr_server.zarr_api.domain.paths import directory_problem, path_problem
from dandizarr_server.zarr_api.edge.authentication import is_authenticated
from dandizarr_server.zarr_api.edge.cache_headers import (
    document_etag,
    is_not_modified,
    not_modified,
    read_policy,
    read_state,
    read_validators,
)
from dandizarr_server.zarr_api.edge.exceptions import (
    DomainError,
    NotFound,
    ValidationFailed,
    error_response,
)
from dandizarr_server.zarr_api.edge.throttles import EXPENSIVE_READ_THROTTLES, over_limit
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.runtime.kept_documents import keeping, kept
from dandizarr_server.zarr_api.selectors import manifest
from dandizarr_server.zarr_api.selectors.archive_contents import DirectoryNode, node_get
from dandizarr_server.zarr_api.selectors.lookups import archive_get
from dandizarr_server.zarr_api.selectors.read_links import archive_by_link
from dandizarr_server.zarr_api.views import listing_pages as listing
from dandizarr_server.zarr_api.views.file_responses import file_response

METHODS = "GET, HEAD, OPTIONS"
_EXPOSED = "Accept-Ranges, Content-Length, Content-Range, ETag, Last-Modified"
_REQUEST_HEADERS = "Range, If-Match, If-None-Match, If-Range, If-Modified-Since, Cache-Control"

View = Callable[..., HttpResponseBase]


def read_only(view: View) -> View:
    """OPTIONS preflight, 405 for writes, ``{"detail", "code"}`` errors; CORS headers on every
    answer (a 404 must reach a browser reader too: it means "fill value")."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: str, **kwargs: str) -> HttpResponseBase:
        response: HttpResponseBase
        if request.method == "OPTIONS":
            response = HttpResponse(status=204)
            response["Access-Control-Allow-Methods"] = METHODS
            response["Access-Control-Allow-Headers"] = _REQUEST_HEADERS
            response["Access-Control-Max-Age"] = "86400"
            response["Allow"] = METHODS
        elif request.method not in ("GET", "HEAD"):
            response = error_response(
                405, f"{request.method} is not allowed", code="method_not_allowed"
            )
            response["Allow"] = METHODS
        else:
            try:
                response = view(request, *args, **kwargs)
            except DomainError as error:
                response = JsonResponse(error.body, status=error.status_code)
        # Any origin may read what anyone may read; an answer to credentials (the only way to
        # a private archive) is for that reader alone (zarr_api.edge.authentication).
        if not is_authenticated(request):
            response["Access-Control-Allow-Origin"] = "*"
        response["Access-Control-Expose-Headers"] = _EXPOSED
        # Everything here is an uploader's bytes or made from them (names in listings).
        for name, value in INERT_HEADERS.items():
            response[name] = value
        return response

    # Nothing here writes: a POST is a 405, not a CSRF failure.
    return csrf_exempt(wrapped)


@read_only
def archive_key(request: HttpRequest, zarr_id: str, key: str = "") -> HttpResponseBase:
    return _key(request, archive_get(zarr_id, request.user), key)


@read_only
def link_key(request: HttpRequest, secret: str, key: str = "") -> HttpResponseBase:
    """``/links/{secret}/{key}``: what ``/zarr/{zarr_id}/{key}`` serves, for the link's archive
    (or version) alone, to whoever holds the link (docs/embargo.md)."""
    return _key(request, archive_by_link(secret), key)


def _key(request: HttpRequest, archive: ZarrArchive, key: str) -> HttpResponseBase:
    zarr_id = archive.zarr_id
    if key == "" or key.endswith("/"):
        return _directory(request, archive, key.rstrip("/"))
    if (problem := path_problem(key)) is not None:
        raise NotFound(f"{key!r} is not a file of zarr archive {zarr_id}: it {problem}", path=key)
    # A link in a listing opens a file: metadata is shown (inert JSON), anything else saved.
    return file_response(request, archive, key, attachment=content_type(key) == BYTES_TYPE)


def _directory(request: HttpRequest, archive: ZarrArchive, path: str) -> HttpResponseBase:
    if (problem := directory_problem(path)) is not None:
        raise NotFound(f"{path!r} is not a directory of zarr archive {archive.zarr_id}: {problem}")
    accept = request.headers.get("Accept", "")
    form = "json" if "application/json" in accept and "text/html" not in accept else "html"
    etag = document_etag(*read_state(archive), "listing", path, form)
    validators = read_validators(archive, etag)
    headers = {**validators.headers(), "Vary": "Accept"}
    # A version's page once made is kept (only pages are kept: the directory exists).
    page = kept(etag) if archive.as_of is not None else None
    node: DirectoryNode | None = None
    if page is None:
        found = node_get(archive, path)
        if isinstance(found, DirectoryNode):
            node = found
        else:
            raise NotFound(f"{path!r} is a file of zarr archive {archive.zarr_id}, not a directory")
    if is_not_modified(request, validators):
        return not_modified(validators, Vary="Accept")
    if (limited := over_limit(request)) is not None:
        return limited
    content_type = "application/json" if form == "json" else "text/html; charset=utf-8"
    if request.method == "HEAD":
        return HttpResponse(content_type=content_type, headers=headers)
    if page is not None:
        return HttpResponse(page, content_type=content_type, headers=headers)
    assert node is not None
    body: Iterable[str | bytes] = _page(str(archive.zarr_id), node, form)
    if archive.as_of is not None:
        body = keeping(etag, body)
    return StreamingHttpResponse(body, content_type=content_type, headers=headers)


def _page(zarr_id: str, node: DirectoryNode, form: str) -> Iterator[str]:
    if form == "json":
        yield json.dumps(listing.as_json(zarr_id, node))
    else:
        yield from listing.as_html(zarr_id, node)


class ManifestView(APIView):
    """``GET /api/zarr/{zarr_id}/manifest/``: the archive as a kerchunk reference set, streamed."""

    throttle_classes = EXPENSIVE_READ_THROTTLES

    @extend_schema(
        parameters=[
            OpenApiParameter("prefix", str, description="only the files below this directory"),
            OpenApiParameter("expires_in", int, description="lifetime of the URLs (seconds)"),
        ],
        responses={200: {"type": "object"}},
    )
    def get(self, request: Request, zarr_id: str) -> HttpResponseBase:
        archive = archive_get(zarr_id, request.user)
        prefix = request.query_params.get("prefix", "").strip("/")
        if (problem := directory_problem(prefix)) is not None:
            raise ValidationFailed(f"prefix {prefix!r} {problem}")
        raw = request.query_params.get("expires_in")
        expires_in = settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS
        # A private archive's storage URLs live no longer than upload URLs do.
        longest = expires_in if archive.dandiset.is_private else manifest.MAX_EXPIRES_IN
        if raw is not None:
            if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= longest:
                raise ValidationFailed(
                    f"expires_in must be a whole number of seconds from 1 to {longest}"
                    f"{' for a private archive' if archive.dandiset.is_private else ''}, "
                    f"got {raw!r}"
                )
            expires_in = int(raw)
        refresh_url = request.build_absolute_uri()
        site_url = request.build_absolute_uri("/")
        if archive.as_of is not None:
            return self._version(request, archive, prefix, refresh_url, site_url)
        found = manifest.manifest(
            archive,
            prefix,
            expires_in=expires_in,
            refresh_url=refresh_url,
            site_url=site_url,
        )
        # A draft's manifest holds URLs signed for this answer: nothing to revalidate.
        response = StreamingHttpResponse(
            found.chunks,
            content_type="application/json",
            headers={"Cache-Control": read_policy(archive), **INERT_HEADERS},
        )
        if found.expires is not None:
            response["X-Dandizarr-Expires"] = http_date(found.expires.timestamp())
        return response

    @staticmethod
    def _version(
        request: Request, archive: ZarrArchive, prefix: str, refresh_url: str, site_url: str
    ) -> HttpResponseBase:
        """A version's manifest: URLs of the service's own reads of it, which never expire;
        made once for each way it is asked (its URL) and kept."""
        etag = document_etag(*read_state(archive), "manifest", refresh_url, site_url)
        validators = read_validators(archive, etag)
        if is_not_modified(request, validators):
            return not_modified(validators, **INERT_HEADERS)
        headers = {**validators.headers(), **INERT_HEADERS}
        if (page := kept(etag)) is not None:
            return HttpResponse(page, content_type="application/json", headers=headers)
        found = manifest.manifest(
            archive, prefix, expires_in=0, refresh_url=refresh_url, site_url=site_url
        )
        return StreamingHttpResponse(
            keeping(etag, found.chunks), content_type="application/json", headers=headers
        )
