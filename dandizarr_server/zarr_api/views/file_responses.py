"""Serving a file's bytes, the one way every route does it (``/zarr/{id}/{path}`` and
``files/{path}?download=true`` of a packed file): ranges, ETags, conditional requests, how long
it may be kept (edge.cache_headers), and the headers of user bytes (objectstore.user_bytes).
Loose files' downloads go to storage instead (a presigned URL: the service out of the data
path), labelled the same way."""

from __future__ import annotations

import itertools

from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    StreamingHttpResponse,
)

from dandizarr.objectstore import ObjectNotFound, PreconditionFailed
from dandizarr.objectstore.digests import strip_etag
from dandizarr.objectstore.user_bytes import user_bytes_headers
from dandizarr_server.zarr_api.edge.byte_ranges import Unsatisfiable, parse_range
from dandizarr_server.zarr_api.edge.cache_headers import (
    etag_listed,
    is_not_modified,
    not_modified,
    read_validators,
)
from dandizarr_server.zarr_api.edge.exceptions import NotFound, error_response
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.selectors.file_bytes import StoredBytes, stored_bytes
from dandizarr_server.zarr_api.selectors.shard_members import MemberLocation, iter_member_bytes


def file_response(
    request: HttpRequest, archive: ZarrArchive, path: str, *, attachment: bool
) -> HttpResponseBase:
    """The bytes of file ``path`` of ``archive`` (a reader the caller found allowed): Range,
    If-Range, If-Match, If-None-Match and If-Modified-Since (304), 416, HEAD, the cache policy
    and the user-bytes headers (``attachment`` where a browser navigates to them)."""
    stored = stored_bytes(archive, path, current=True)
    validators = read_validators(archive, stored.md5)
    if (wanted := request.headers.get("If-Match")) and not etag_listed(wanted, stored.md5):
        return error_response(
            412, "the file's ETag is not listed in If-Match", code="precondition_failed"
        )
    if is_not_modified(request, validators):
        return not_modified(validators, **{"Accept-Ranges": "bytes"})
    headers = {**validators.headers(), "Accept-Ranges": "bytes"}
    header = request.headers.get("Range")
    if (if_range := request.headers.get("If-Range")) and strip_etag(if_range) != stored.md5:
        header = None  # the client's copy is stale: send the whole file
    try:
        byte_range = parse_range(header, stored.size)
    except Unsatisfiable:
        unsatisfiable = error_response(
            416, f"range {header!r} is not satisfiable", code="range_not_satisfiable"
        )
        unsatisfiable["Content-Range"] = f"bytes */{stored.size}"
        return unsatisfiable
    begin, stop = byte_range or (0, stored.size)
    status = 200
    if byte_range is not None:
        status = 206
        headers["Content-Range"] = f"bytes {begin}-{stop - 1}/{stored.size}"
    headers["Content-Length"] = str(stop - begin)
    headers.update(user_bytes_headers(path, attachment=attachment))
    if request.method == "HEAD":
        return HttpResponse(status=status, headers=headers)
    return StreamingHttpResponse(
        _read(archive, path, stored, begin, stop), status=status, headers=headers
    )


def _read(
    archive: ZarrArchive, path: str, stored: StoredBytes, begin: int, stop: int
) -> itertools.chain[bytes]:
    """The bytes ``[begin, stop)`` of the file: one ranged storage read per 8 MiB (a chunk file
    is one), never the whole shard. The first read happens now, so a missing object is a 404
    and not a cut-off 200. Bytes not where they were found (a file packed since it was looked
    up: ``POST pack/`` deletes the loose object after committing the member; a version's file
    the draft replaced since) are looked up once more, exactly."""
    for attempt in range(2):
        location = MemberLocation(
            stored.key,
            stored.offset + begin,
            stop - begin,
            version_id=stored.version_id,
            if_match=stored.if_match,
        )
        blocks = iter_member_bytes(location)
        try:
            first = next(blocks, b"")
        except (ObjectNotFound, PreconditionFailed):
            if attempt:
                raise NotFound(f"{path!r} is gone from zarr archive {archive.zarr_id}") from None
            stored = stored_bytes(archive, path, again=True)
            continue
        return itertools.chain([first], blocks)
    raise AssertionError("unreachable")
