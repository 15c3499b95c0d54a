"""Domain errors and how the API renders them: always a JSON body with a ``detail`` message."""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class DomainError(Exception):
    """An error a client caused; rendered as ``{"detail": message, ...extra}``."""

    status_code: int = status.HTTP_400_BAD_REQUEST

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra


class ValidationFailed(DomainError):
    status_code = status.HTTP_400_BAD_REQUEST


class NotFound(DomainError):
    status_code = status.HTTP_404_NOT_FOUND


class Conflict(DomainError):
    status_code = status.HTTP_409_CONFLICT


class Forbidden(DomainError):
    status_code = status.HTTP_403_FORBIDDEN


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        return Response({"detail": exc.message, **exc.extra}, status=exc.status_code)
    return drf_exception_handler(exc, context)
