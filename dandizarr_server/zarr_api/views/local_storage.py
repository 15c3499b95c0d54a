"""The HTTP face of the local storage backend: what S3 does for presigned URLs.

PUT and GET on ``/storage/<key>?expires=...&signature=...`` (URLs made by
``LocalObjectStore.presigned_*_url``). No session or token authentication: the signature is
the credential. Errors are S3-style XML (``<Error><Code>...``), so clients handle both
backends the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO
from xml.sax.saxutils import escape

from django.http import FileResponse, HttpRequest, HttpResponse, HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from dandizarr.objectstore import ObjectNotFound, ObjectStoreError
from dandizarr.objectstore.base import StorageFull
from dandizarr.objectstore.digests import md5_hex_from_content_md5
from dandizarr.objectstore.local import BadDigest, InvalidKey, LocalObjectStore
from dandizarr.objectstore.signing import Verdict, Verified
from dandizarr.objectstore.user_bytes import BYTES_TYPE, user_bytes_headers
from dandizarr_server.zarr_api.edge.byte_ranges import Unsatisfiable, parse_range
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.expected_uploads import upload_expected
from dandizarr_server.zarr_api.services.upload_admission import expected_upload_store

_UPLOAD_BLOCK = 1 << 20
# The body length taken for a chunked PUT (read to the end of the input).
_CHUNKED_LIMIT = 5 << 30


def s3_error(status: int, code: str, message: str, key: str | None = None) -> HttpResponse:
    key_element = f"<Key>{escape(key)}</Key>" if key is not None else ""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{escape(message)}</Message>{key_element}</Error>"
    )
    return HttpResponse(body, status=status, content_type="application/xml")


def _signature_error(verified: Verified, key: str) -> HttpResponse | None:
    if verified.verdict is Verdict.MISSING:
        return s3_error(403, "AccessDenied", "Request is not signed", key)
    if verified.verdict is Verdict.BAD_SIGNATURE:
        return s3_error(403, "SignatureDoesNotMatch", "The request signature does not match", key)
    if verified.verdict is Verdict.EXPIRED:
        return s3_error(403, "AccessDenied", "Request has expired", key)
    return None


@csrf_exempt
def object_view(request: HttpRequest, key: str) -> HttpResponseBase:
    store = get_store()
    if not isinstance(store, LocalObjectStore):
        return s3_error(404, "NotFound", "this service does not store objects itself")
    try:
        store.path_of(key)
    except InvalidKey as error:
        return s3_error(400, "InvalidArgument", str(error), key)
    if request.method == "PUT":
        return _put(request, store, key)
    if request.method == "GET":
        return _get(request, store, key)
    response = s3_error(405, "MethodNotAllowed", f"{request.method} is not allowed", key)
    response["Allow"] = "GET, PUT"
    return response


def _put(request: HttpRequest, store: LocalObjectStore, key: str) -> HttpResponse:
    verified = store.verify_request("PUT", key, request.GET.dict())
    if (error := _signature_error(verified, key)) is not None:
        return error
    if verified.acl:
        # An ACL URL (dandi-cli <= 0.48): the header it signed must be sent; no md5 is checked
        # here, the batch's completion verifies what was stored.
        if request.headers.get("X-Amz-ACL") != verified.acl:
            return s3_error(
                403, "SignatureDoesNotMatch", "the signed X-Amz-ACL header is missing", key
            )
        return _store_body(request, store, key, None)
    if not verified.md5_hex:
        return s3_error(403, "SignatureDoesNotMatch", "this URL is not for uploads", key)
    header = request.headers.get("Content-MD5")
    if header is None:
        return s3_error(
            403, "SignatureDoesNotMatch", "the signed Content-MD5 header is missing", key
        )
    try:
        header_md5 = md5_hex_from_content_md5(header)
    except ValueError:
        return s3_error(400, "InvalidDigest", "The Content-MD5 you specified is not valid", key)
    if header_md5 != verified.md5_hex:
        return s3_error(
            403, "SignatureDoesNotMatch", "Content-MD5 differs from the signed md5", key
        )
    return _store_body(request, store, key, verified.md5_hex)


def _store_body(
    request: HttpRequest, store: LocalObjectStore, key: str, expected_md5: str | None
) -> HttpResponse:
    if not upload_expected(key, expected_md5):
        return _not_expected(key)
    length_raw = request.META.get("CONTENT_LENGTH", "")
    chunked = request.headers.get("Transfer-Encoding", "").lower() == "chunked"
    if chunked and not length_raw:
        # requests sends an empty file chunked; the body ends where the server's input ends
        # (gunicorn decodes chunked input; the dev server's input is empty). The signed md5,
        # or the batch's verification, catches any other body.
        length_raw = str(_CHUNKED_LIMIT)
    if not (isinstance(length_raw, str) and length_raw.isascii() and length_raw.isdigit()):
        return s3_error(411, "MissingContentLength", "Content-Length is required", key)
    length = int(length_raw)
    received = 0

    def body() -> Iterator[bytes]:
        # Streamed: the body is never held in memory (request.body would be).
        nonlocal received
        while block := request.read(min(_UPLOAD_BLOCK, length - received)):
            received += len(block)
            yield block
            if received >= length:
                return

    try:
        # Checked again at the moment of the write: the batch may have ended meanwhile.
        info = store.put_stream_if(
            key,
            body(),
            lambda publish: expected_upload_store(key, expected_md5, publish),
            expected_md5=expected_md5,
            content_type=request.META.get("CONTENT_TYPE") or None,
        )
    except BadDigest:
        if received < length and length != _CHUNKED_LIMIT:
            return s3_error(400, "IncompleteBody", "fewer bytes than Content-Length", key)
        return s3_error(
            400, "BadDigest", "The Content-MD5 you specified did not match what we received", key
        )
    except StorageFull:
        # 507, S3's error shape: clients give up (not a transient 5xx) and say why.
        return s3_error(
            507, "InsufficientStorage", "The storage volume is full; nothing was stored", key
        )
    except ObjectStoreError as error:
        return s3_error(409, "KeyConflict", str(error), key)
    if info is None:
        return _not_expected(key)
    response = HttpResponse(status=200)
    response["ETag"] = f'"{info.etag}"'
    return response


def _not_expected(key: str) -> HttpResponse:
    # A signed URL is not enough: its batch may have ended (completed, cancelled, its files
    # deleted since) while the URL is still valid, and a replay would change storage behind
    # the tree.
    return s3_error(403, "AccessDenied", "no open upload batch expects this key with this md5", key)


class _BoundedReader:
    """At most ``remaining`` bytes of a file, from its current position."""

    def __init__(self, handle: BinaryIO, remaining: int) -> None:
        self.handle = handle
        self.remaining = remaining

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > self.remaining:
            size = self.remaining
        data = self.handle.read(size)
        self.remaining -= len(data)
        return data

    def close(self) -> None:
        self.handle.close()


def _get(request: HttpRequest, store: LocalObjectStore, key: str) -> HttpResponseBase:
    verified = store.verify_request("GET", key, request.GET.dict())
    if (error := _signature_error(verified, key)) is not None:
        return error
    if verified.md5_hex:
        return s3_error(403, "SignatureDoesNotMatch", "this URL is for uploads", key)
    try:
        # The type the uploader sent is not used: user_bytes_headers chooses it.
        handle, info, _ = store.open_object(key)
    except ObjectNotFound:
        return s3_error(404, "NoSuchKey", "The specified key does not exist.", key)
    try:
        byte_range = parse_range(request.headers.get("Range"), info.size)
    except Unsatisfiable:
        handle.close()
        response = s3_error(416, "InvalidRange", "The requested range is not satisfiable", key)
        response["Content-Range"] = f"bytes */{info.size}"
        return response
    streamed: FileResponse
    if byte_range is None:
        streamed = FileResponse(handle)
        streamed["Content-Length"] = str(info.size)
    else:
        begin, stop = byte_range
        handle.seek(begin)
        streamed = FileResponse(_BoundedReader(handle, stop - begin), status=206)
        streamed["Content-Length"] = str(stop - begin)
        streamed["Content-Range"] = f"bytes {begin}-{stop - 1}/{info.size}"
    # A storage URL is what a download link opens: saved, never shown (S3's presigned GETs
    # carry the same type and disposition, dandizarr.objectstore.user_bytes).
    for name, value in user_bytes_headers(key, attachment=True).items():
        streamed[name] = value
    streamed["Content-Type"] = BYTES_TYPE
    streamed["ETag"] = f'"{info.etag}"'
    streamed["Accept-Ranges"] = "bytes"
    return streamed
