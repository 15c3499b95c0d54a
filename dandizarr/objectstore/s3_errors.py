"""S3's errors as the storage interface's (dandizarr.objectstore.errors)."""

from __future__ import annotations

from botocore.exceptions import ClientError

from dandizarr.objectstore.digests import strip_etag
from dandizarr.objectstore.errors import (
    InvalidRange,
    ObjectNotFound,
    ObjectStoreError,
    PreconditionFailed,
)

NOT_FOUND_CODES = {"404", "NoSuchKey", "NotFound"}


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def error_status(error: ClientError) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def translate_error(error: ClientError, key: str, if_match: str | None = None) -> ObjectStoreError:
    """The interface's error for an S3 error about ``key``."""
    code, status = error_code(error), error_status(error)
    if code in NOT_FOUND_CODES or status == 404:
        return ObjectNotFound(key)
    if code == "PreconditionFailed" or status == 412:
        return PreconditionFailed(key, strip_etag(if_match or ""))
    if code == "InvalidRange" or status == 416:
        return InvalidRange(f"{key}: {error}")
    return ObjectStoreError(f"{key}: {error}")
