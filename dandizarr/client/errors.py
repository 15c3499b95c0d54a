"""Errors the client raises. Every one carries a message fit to show a user as is, in the
library's terms (its options, never a command line's flags: ``dandizarr.commands`` words the
errors it knows for the CLI), and the attributes a program decides on.

The service says which error it answered with a ``code`` next to its ``detail`` (docs/api.md,
"Errors"); the client decides on the code, never on the message. A server older than codes
answers none: then the status alone decides.
"""

from __future__ import annotations

from typing import Any

# The service's codes this client decides on (docs/api.md lists them all).
OPEN_BATCH_EXISTS = "open_batch_exists"  # 409: the archive has an upload batch open
NO_OPEN_BATCH = "no_open_batch"  # 404: the archive has no upload batch open
DECIDING_CODES = (OPEN_BATCH_EXISTS, NO_OPEN_BATCH)


def code_of(body: Any) -> str | None:
    """The service's code in an error's decoded body; None from a server older than codes (or
    an answer that is not the service's JSON)."""
    code = body.get("code") if isinstance(body, dict) else None
    return code if isinstance(code, str) else None


class ClientError(Exception):
    """Base class: something the user should be told about."""


class ApiError(ClientError):
    """The service answered with an error status (after any retries)."""

    def __init__(
        self, message: str, *, status: int, method: str, url: str, body: Any = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.method = method
        self.url = url
        # The decoded JSON body when there is one (``{"detail": ..., ...}``), else the text.
        self.body = body

    @property
    def detail(self) -> str:
        if isinstance(self.body, dict) and "detail" in self.body:
            return str(self.body["detail"])
        return str(self.body or "")

    @property
    def code(self) -> str | None:
        """The service's code for this error (docs/api.md), or None (``code_of``)."""
        return code_of(self.body)


class AuthenticationError(ApiError):
    """401 from the service at ``server``: the token is missing (``token_given`` false), wrong
    or revoked."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        method: str,
        url: str,
        body: Any = None,
        server: str = "",
        token_given: bool = True,
    ) -> None:
        super().__init__(message, status=status, method=method, url=url, body=body)
        self.server = server
        self.token_given = token_given


class PermissionDenied(ApiError):
    """403 from the service: not an owner, or the archive is frozen."""


class NotFound(ApiError):
    """404 from the service."""


class Conflict(ApiError):
    """409: the state of the archive or dandiset refuses the request (``code`` says why)."""


class BatchConflict(Conflict):
    """409: the archive has an upload batch open (code ``open_batch_exists``; from a server
    older than codes, any 409)."""


class OpenBatchLeft(BatchConflict):
    """Before an upload: the archive has a batch open that this machine did not start (another
    upload is running, or one was interrupted elsewhere). An upload cancels it only when asked
    to (``UploadOptions.cancel_open_batch``), which deletes the files it uploaded."""

    def __init__(self, zarr_id: str, *, url: str) -> None:
        super().__init__(
            f"zarr archive {zarr_id} has an upload batch open that this machine did not start "
            "(another upload is running, or one was interrupted elsewhere). Wait for it to "
            "finish, or upload with cancel_open_batch to cancel it (which deletes the files it "
            "uploaded).",
            status=409,
            method="GET",
            url=url,
        )
        self.zarr_id = zarr_id


class TokenRequired(ClientError):
    """The request changes an archive, and the client has no API token."""


class ArchiveNotSharded(ClientError):
    """A packed upload into an archive that is not sharded."""

    def __init__(self, zarr_id: str, layout: str) -> None:
        super().__init__(
            f"zarr archive {zarr_id} is {layout}: a packed upload (pack) needs a sharded "
            "archive (one created by a packed upload, or converted with POST pack/); upload "
            "without packing, or into a new archive"
        )
        self.zarr_id = zarr_id
        self.layout = layout


class TransientError(ClientError):
    """A request kept failing in a way that is usually temporary, and retries ran out."""


class ChecksumMismatch(ClientError):
    """The service's checksum of the archive differs from the one computed locally."""

    def __init__(self, message: str, *, expected: str, actual: str | None) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual
