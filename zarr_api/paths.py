"""Validation of archive paths and ETags, shared by every endpoint that takes them."""

from __future__ import annotations

import re
import uuid

# S3 keys are at most 1024 bytes of UTF-8; the archive's prefix counts against that.
MAX_KEY_BYTES = 1024
_KEY_PREFIX_BYTES = len(f"zarr/{uuid.UUID(int=0)}/".encode())
MAX_PATH_BYTES = MAX_KEY_BYTES - _KEY_PREFIX_BYTES
_MD5 = re.compile(r"[0-9a-f]{32}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def path_problem(path: object) -> str | None:
    """Why ``path`` is not a valid archive file path, or None when it is."""
    if not isinstance(path, str):
        return "must be a string"
    if path == "":
        return "is empty"
    if path.startswith("/"):
        return "must not start with '/'"
    if "\\" in path:
        return "must not contain a backslash"
    if _CONTROL.search(path):
        return "must not contain control characters"
    if any(segment in {"", ".", ".."} for segment in path.split("/")):
        return "must not contain empty, '.' or '..' segments"
    try:
        encoded = path.encode()
    except UnicodeEncodeError:
        return "must be valid UTF-8 (no lone surrogates)"
    if len(encoded) > MAX_PATH_BYTES:
        return f"is {len(encoded)} bytes of UTF-8; at most {MAX_PATH_BYTES} fit in a storage key"
    return None


def etag_problem(etag: object) -> str | None:
    if not isinstance(etag, str) or not _MD5.fullmatch(etag):
        return "must be an md5 as 32 lowercase hex digits"
    return None


def directory_problem(path: str) -> str | None:
    """Why ``path`` cannot name a directory to browse ('' is the root)."""
    path = path.strip("/")
    return None if path == "" else path_problem(path)
