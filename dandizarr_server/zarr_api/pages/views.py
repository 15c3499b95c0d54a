"""The pages' views: read through ``reads`` and the API's selectors, render a template."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotModified, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_safe

from dandizarr.objectstore import ObjectStoreError
from dandizarr.objectstore.user_bytes import INERT_HEADERS
from dandizarr_server import client_wheel
from dandizarr_server.embedded import ADMIN_TOKEN_FILE
from dandizarr_server.zarr_api.domain.paths import directory_problem
from dandizarr_server.zarr_api.edge.exceptions import (
    DomainError,
    NotFound,
    ValidationFailed,
    error_response,
)
from dandizarr_server.zarr_api.edge.throttles import throttled
from dandizarr_server.zarr_api.pages import ome, preview, reads
from dandizarr_server.zarr_api.pages.render_pool import RendererBusy
from dandizarr_server.zarr_api.parsers.paging import positive_int
from dandizarr_server.zarr_api.selectors.archive_contents import FileNode, node_get
from dandizarr_server.zarr_api.selectors.archive_state import archive_state
from dandizarr_server.zarr_api.selectors.archive_versions import newest_versions
from dandizarr_server.zarr_api.selectors.listings import batch_history
from dandizarr_server.zarr_api.selectors.lookups import annotated_archive_get, archive_get
from dandizarr_server.zarr_api.selectors.tree_diffs import changes_since_previous_version

PAGE_SIZE = 200
# The archive and tree pages link this many of the newest versions; the older ones through the
# API's paged list (an archive may be published without end).
PAGE_VERSIONS = 20
# The archive page shows this many of its latest batches.
BATCHES_SHOWN = 50
# A version's page lists this many of its changes since the version before (the rest: the API).
CHANGES_SHOWN = 100
# ...and counts them, up to this many (a walk that long at most, whatever the version changed).
CHANGES_COUNTED = 10_000


def _not_found_as_404(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except NotFound as error:
            raise Http404(error.message) from error
        except RendererBusy as busy:  # its description or picture is being made: try again
            return _unavailable(str(busy), busy.retry_after)

    return require_safe(wrapper)


def _sees_server_paths(request: HttpRequest) -> bool:
    """Whether the page may show where the server keeps its files (the admin token's path):
    to staff, and to a request from this very machine; behind a proxy (DANDIZARR_TLS_PROXY)
    every request comes from the proxy's address, so there to staff alone."""
    if request.user.is_authenticated and request.user.is_staff:
        return True
    if settings.DANDIZARR_TLS_PROXY:
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def _service_url(request: HttpRequest) -> str:
    """This service's address, as the browser reached it."""
    return request.build_absolute_uri("/").rstrip("/")


def _status(archive: Any) -> dict[str, Any]:
    state = archive_state(archive)  # the API's rule for these fields
    return {
        "checksum_status": state.checksum_status,
        "upload_in_progress": state.upload_open,
        "shard_count": state.live_shards,
    }


@require_safe
def home(request: HttpRequest) -> HttpResponse:
    dandisets = reads.dandisets_with_archives(request.user)
    for dandiset in dandisets:
        for archive in dandiset.archive_list:  # type: ignore[attr-defined]
            archive.status = _status(archive)
    return render(
        request,
        "dandizarr/home.html",
        {
            "version": settings.DANDIZARR_VERSION,
            "service_url": _service_url(request),
            "client_wheel_url": _service_url(request)
            + reverse("client-wheel", args=[client_wheel.wheel_name()]),
            "token_path": settings.DATA_DIR / ADMIN_TOKEN_FILE
            if _sees_server_paths(request)
            else None,
            "dandisets": dandisets,
            "example_dandiset": dandisets[0].identifier if dandisets else "000001",
        },
    )


def _page_number(request: HttpRequest) -> int:
    """The ``page`` asked for; a page that cannot exist is a 404 here (a page of HTML)."""
    try:
        return positive_int(request.GET.get("page"), "page", 1, 10**9)
    except ValidationFailed as error:
        raise NotFound(f"no such page: {error.message}") from error


def _archive_context(request: HttpRequest, zarr_id: str, path: str) -> dict[str, Any]:
    archive = annotated_archive_get(zarr_id, request.user)
    problem = directory_problem(path)
    if problem:
        raise NotFound(f"path {path!r} {problem}")
    node = node_get(archive, path)
    held = archive.as_of or archive
    context: dict[str, Any] = {
        "archive": archive,
        # A version's figures when the page is of a version, else the draft's.
        "shown": {"checksum": held.checksum, "file_count": held.file_count, "size": held.size},
        **_versions_shown(archive),
        "status": _status(archive),
        "service_url": _service_url(request),
        "crumbs": _crumbs(node.path),
        "path": node.path,
    }
    if isinstance(node, FileNode):
        context["file"] = node
    else:
        context["directory"] = reads.directory_page(node, _page_number(request), PAGE_SIZE)
    return context


def _versions_shown(archive: Any) -> dict[str, Any]:
    newest, older = newest_versions(archive, PAGE_VERSIONS)
    return {"versions": newest, "older_versions": older}


def _crumbs(path: str) -> list[tuple[str, str]]:
    """(name, path) of each directory from the root down to ``path``."""
    parts = path.split("/") if path else []
    return [(name, "/".join(parts[: i + 1])) for i, name in enumerate(parts)]


@throttled
@_not_found_as_404
def archive(request: HttpRequest, zarr_id: str) -> HttpResponse:
    context = _archive_context(request, zarr_id, "")
    archive = context["archive"]
    arrays = reads.archive_arrays(archive)
    summary = ome.archive_ome(archive)
    image_links, array_links = ome.viewer_links(archive, zarr_base_url(request, archive))
    context["ome"] = summary
    context["images"] = [
        {
            "image": image,
            "validation": summary.validation_of(image.path),
            "preview_problem": ome.preview_problem(archive, image),
            "neuroglancer_url": image_links.get(image.path),
        }
        for image in summary.images
    ]
    context["collections"] = [
        {"collection": c, "validation": summary.validation_of(c.path)} for c in summary.collections
    ]
    context["arrays"] = [(array, array_links.get(array.path)) for array in arrays]
    context["batches"] = batch_history(archive, BATCHES_SHOWN) if archive.as_of is None else None
    context["version_tag"] = preview.version_tag(archive)
    context["changes"] = changes_since_previous_version(archive, CHANGES_SHOWN, CHANGES_COUNTED)
    context["changes_counted"] = CHANGES_COUNTED
    return render(request, "dandizarr/archive.html", context)


def zarr_base_url(request: HttpRequest, archive: Any) -> str:
    """The archive's ``/zarr/`` base URL as the browser reaches it (the one input of every
    viewer link; a version's base URL goes where this one does)."""
    return request.build_absolute_uri(reverse("zarr-read-root", args=[str(archive.read_id)]))


@throttled
@require_safe
def ome_summary(request: HttpRequest, zarr_id: str) -> HttpResponse:
    """The archive's OME-Zarr images, collections and validation, as JSON (docs/api.md)."""
    try:
        archive = archive_get(zarr_id, request.user)
        return JsonResponse(ome.ome_json(archive, zarr_base_url(request, archive)))
    except DomainError as error:  # NotFound, SignInRequired: the permission rule's answers
        return JsonResponse(error.body, status=error.status_code)
    except RendererBusy as busy:
        return _unavailable(str(busy), busy.retry_after)
    except ObjectStoreError as error:
        return _unavailable(f"storage did not answer: {error}", 5)


@throttled
@_not_found_as_404
def tree(request: HttpRequest, zarr_id: str, path: str = "") -> HttpResponse:
    return render(request, "dandizarr/tree.html", _archive_context(request, zarr_id, path))


@throttled
@_not_found_as_404
def preview_png(request: HttpRequest, zarr_id: str) -> HttpResponse:
    archive = archive_get(zarr_id, request.user)
    array_path = request.GET.get("array", "")
    etag = f'"{preview.version_tag(archive)}"'
    if request.headers.get("If-None-Match") == etag:
        return HttpResponseNotModified()
    try:
        png = reads.preview_png(archive, array_path)
    except ValueError as error:  # Unsupported: the metadata, the chunks, the budget
        return HttpResponse(
            f"no preview: {error}", status=404, content_type="text/plain", headers=INERT_HEADERS
        )
    except RendererBusy as busy:
        return _unavailable(str(busy), busy.retry_after)
    except ObjectStoreError as error:
        return _unavailable(f"storage did not answer: {error}", 5)
    response = HttpResponse(png, content_type="image/png", headers=INERT_HEADERS)
    response["ETag"] = etag
    response["Cache-Control"] = "no-cache"
    return response


def _unavailable(detail: str, retry_after: int) -> HttpResponse:
    response = error_response(503, detail, code="service_unavailable")
    response["Retry-After"] = str(retry_after)
    return response
