"""Domain errors and how the API renders them: always a JSON body with a ``detail`` message."""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotocoreConnectionError
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseOperationalError
from kombu.exceptions import OperationalError as BrokerOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from dandizarr_server.zarr_api.metrics import STORAGE_ERRORS


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


class SignInRequired(DomainError):
    """401: what was asked for is not visible without credentials (it may not exist)."""

    status_code = status.HTTP_401_UNAUTHORIZED


class Conflict(DomainError):
    status_code = status.HTTP_409_CONFLICT


class Forbidden(DomainError):
    status_code = status.HTTP_403_FORBIDDEN


class ServiceUnavailable(DomainError):
    """503: try again shortly (``Retry-After``)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE


class BodyTooLarge(DomainError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE


def _detail_of(data: Any) -> str:
    """One message naming every field's problems (DRF gives them per field)."""
    if isinstance(data, dict):
        return "; ".join(f"{field}: {_detail_of(problem)}" for field, problem in data.items())
    if isinstance(data, list):
        return " ".join(_detail_of(item) for item in data)
    return str(data)


logger = logging.getLogger(__name__)

# What a client is told to wait before retrying when a backing service is unreachable.
RETRY_AFTER_SECONDS = 5

# Errors that mean a backing service (storage, database, broker) is unreachable or failing for
# now, not that the request is wrong: answered 503 with Retry-After. A rejected request changes
# nothing (its transaction rolls back), so the client may repeat it.
_UNAVAILABLE_ERRORS: dict[str, tuple[type[BaseException], ...]] = {
    "storage": (BotocoreConnectionError, HTTPClientError),
    "database": (DatabaseOperationalError, DatabaseInterfaceError),
    "broker": (BrokerOperationalError, RedisConnectionError, RedisTimeoutError),
}


def unavailable_service(exc: BaseException) -> str | None:
    """The backing service ``exc`` (or an error it was raised from) says is unavailable."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for service, errors in _UNAVAILABLE_ERRORS.items():
            if isinstance(current, errors):
                return service
        # S3 answering 5xx (503 SlowDown, 500 InternalError), possibly wrapped by objectstore.
        if isinstance(current, ClientError):
            status_code = current.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if status_code >= 500:
                return "storage"
        current = current.__cause__ or current.__context__
    return None


def unavailable_answer(
    service: str, exc: BaseException
) -> tuple[dict[str, str], int, dict[str, str]]:
    """Body, status and headers of the answer to a request that met ``service`` unavailable
    (``exc``), logged and counted: one answer, from a view or from a middleware."""
    logger.warning("%s unavailable: %s: %s", service, type(exc).__name__, exc)
    if service == "storage":
        STORAGE_ERRORS.labels(type(exc).__name__).inc()
    return (
        {"detail": f"the service's {service} is unavailable; try again shortly"},
        status.HTTP_503_SERVICE_UNAVAILABLE,
        {"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, RequestDataTooBig):
        exc = BodyTooLarge(
            f"the body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes, the most "
            "this service reads"
        )
    if isinstance(exc, DomainError):
        return Response({"detail": exc.message, **exc.extra}, status=exc.status_code)
    service = unavailable_service(exc)
    if service is not None:
        set_rollback()
        body, status_code, headers = unavailable_answer(service, exc)
        return Response(body, status=status_code, headers=headers)
    response = drf_exception_handler(exc, context)
    if response is not None and not (isinstance(response.data, dict) and "detail" in response.data):
        # Field errors ({"name": ["..."]}): the fields stay, and "detail" names them all.
        fields = response.data if isinstance(response.data, dict) else {"body": response.data}
        response.data = {"detail": _detail_of(fields), **fields}
    return response
