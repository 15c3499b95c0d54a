"""Errors the client raises. Every one carries a message fit to show a user as is."""

from __future__ import annotations

from typing import Any


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


class AuthenticationError(ApiError):
    """401: the token is missing, wrong or revoked."""


class PermissionDenied(ApiError):
    """403 from the service: not an owner, or the archive is frozen."""


class NotFound(ApiError):
    """404 from the service."""


class BatchConflict(ApiError):
    """409 when starting a batch: the archive already has one open."""


class TransientError(ClientError):
    """A request kept failing in a way that is usually temporary, and retries ran out."""


class ChecksumMismatch(ClientError):
    """The service's checksum of the archive differs from the one computed locally."""

    def __init__(self, message: str, *, expected: str, actual: str | None) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual
