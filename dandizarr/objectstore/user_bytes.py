"""How a response that carries an uploader's bytes is labelled, on every path that serves them.

The bytes of an archive are whatever its uploader sent: an ``.html`` or ``.svg`` file with a
script is as easy to upload as a chunk. A browser must never run them as a page of the origin
that serves them (the service's own origin, where a reader's session and CSRF token live), so
every such response gets what the big user-content hosts send:

- a fixed ``Content-Type`` chosen here from the file's name, never the uploader's: JSON for the
  Zarr metadata documents (readers and people look at them), bytes for everything else;
- ``X-Content-Type-Options: nosniff``, so no browser guesses HTML from the bytes;
- ``Content-Security-Policy: sandbox; default-src 'none'``: even a document rendered anyway is
  in an opaque origin with no script, no requests and no forms;
- ``Content-Disposition: attachment`` where a browser navigates to the bytes (download links,
  storage URLs), so they are saved, not shown. ``fetch()`` readers (Neuroglancer, zarr-python,
  tensorstore) ignore it.

Storage URLs (S3 presigned GETs) carry the same type and disposition as response-header
overrides (``response-content-type``, ``response-content-disposition``), which S3 and
SeaweedFS apply to the reply. Pure library: the service's views and the S3 backend import it.
"""

from __future__ import annotations

from collections.abc import Mapping

from dandizarr.zarr_names import METADATA_FILE_NAMES

# The Zarr metadata documents, served as JSON (everything else: bytes).
JSON_NAMES = METADATA_FILE_NAMES
BYTES_TYPE = "application/octet-stream"
JSON_TYPE = "application/json"
ATTACHMENT = "attachment"
SANDBOX_POLICY = "sandbox; default-src 'none'"

# Every response that carries user bytes, or text made from them (manifests, listings as JSON).
INERT_HEADERS: Mapping[str, str] = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": SANDBOX_POLICY,
}

# The response-header overrides of a presigned S3 GET (query parameters, signed with the URL).
S3_GET_OVERRIDES: Mapping[str, str] = {
    "response-content-disposition": ATTACHMENT,
    "response-content-type": BYTES_TYPE,
}


def content_type(path: str) -> str:
    """The type a file of an archive is served with, from its name alone."""
    return JSON_TYPE if path.rsplit("/", 1)[-1] in JSON_NAMES else BYTES_TYPE


def user_bytes_headers(path: str, *, attachment: bool) -> dict[str, str]:
    """The headers of a response whose body is (part of) the file at ``path``: its type, the
    inert headers and, for a response a browser navigates to, ``attachment``."""
    headers = {"Content-Type": content_type(path), **INERT_HEADERS}
    if attachment:
        headers["Content-Disposition"] = ATTACHMENT
    return headers
