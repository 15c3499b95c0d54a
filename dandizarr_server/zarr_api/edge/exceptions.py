"""Domain errors and how the API renders them: always a JSON body with a ``detail`` message
for people and a ``code`` for programs (``error_body``; docs/api.md lists every code)."""

from __future__ import annotations

import logging
from itertools import islice
from typing import Any

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotocoreConnectionError
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseOperationalError
from django.http import Http404, JsonResponse
from kombu.exceptions import OperationalError as BrokerOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from dandizarr_server.zarr_api.edge.echo import DETAIL_CHARS, LISTED_ITEMS, bounded_fields, cut
from dandizarr_server.zarr_api.runtime.metrics import STORAGE_ERRORS


def error_body(detail: str, *, code: str, **extra: Any) -> dict[str, Any]:
    """The one shape of every error the service answers in JSON: ``detail`` for people,
    ``code`` (snake_case, listed in docs/api.md) for programs to decide on, then any fields
    the error adds (``missing``, ``paths``, ...). Bounded whatever a raise site put in: the
    detail cut to ``DETAIL_CHARS``, the fields through ``bounded_fields`` (edge/echo.py: a list
    names its first items and ``<field>_count`` how many it had)."""
    return {"detail": cut(detail, DETAIL_CHARS), "code": code, **bounded_fields(extra)}


def error_response(
    status_code: int,
    detail: str,
    *,
    code: str,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JsonResponse:
    """``error_body`` as a plain Django response (middlewares, Django views and handlers)."""
    return JsonResponse(error_body(detail, code=code, **extra), status=status_code, headers=headers)


class DomainError(Exception):
    """An error a client caused; rendered as ``error_body(message, code=code, **extra)``.

    Each class has a default ``code``; a raise site passes ``code=`` for a case a client must
    tell apart from the others of its status (docs/api.md lists every code)."""

    status_code: int = status.HTTP_400_BAD_REQUEST
    code: str = "invalid"

    def __init__(self, message: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.extra = extra

    @property
    def body(self) -> dict[str, Any]:
        return error_body(self.message, code=self.code, **self.extra)


class ValidationFailed(DomainError):
    status_code = status.HTTP_400_BAD_REQUEST
    code = "invalid"


class NotFound(DomainError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "not_found"


class SignInRequired(DomainError):
    """401: what was asked for is not visible without credentials (it may not exist)."""

    status_code = status.HTTP_401_UNAUTHORIZED
    code = "not_authenticated"


class Conflict(DomainError):
    status_code = status.HTTP_409_CONFLICT
    code = "conflict"


class Forbidden(DomainError):
    status_code = status.HTTP_403_FORBIDDEN
    code = "permission_denied"


class ServiceUnavailable(DomainError):
    """503: try again shortly (``Retry-After``)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    code = "service_unavailable"


class BodyTooLarge(DomainError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    code = "body_too_large"


def _detail_of(data: Any) -> str:
    """One message naming the fields' problems (DRF gives them per field, and per item of a
    list: the first ``LISTED_ITEMS`` of each are named, not the million a body may hold)."""
    if isinstance(data, dict):
        return "; ".join(
            f"{field}: {_detail_of(problem)}"
            for field, problem in islice(data.items(), LISTED_ITEMS)
        )
    if isinstance(data, list):
        return " ".join(_detail_of(item) for item in islice(data, LISTED_ITEMS))
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
) -> tuple[dict[str, Any], int, dict[str, str]]:
    """Body, status and headers of the answer to a request that met ``service`` unavailable
    (``exc``), logged and counted: one answer, from a view or from a middleware."""
    logger.warning("%s unavailable: %s: %s", service, type(exc).__name__, exc)
    if service == "storage":
        STORAGE_ERRORS.labels(type(exc).__name__).inc()
    return (
        error_body(
            f"the service's {service} is unavailable; try again shortly",
            code="service_unavailable",
        ),
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
        return Response(exc.body, status=exc.status_code)
    service = unavailable_service(exc)
    if service is not None:
        set_rollback()
        body, status_code, headers = unavailable_answer(service, exc)
        return Response(body, status=status_code, headers=headers)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    code = _drf_code(exc)
    if isinstance(response.data, dict) and "detail" in response.data:
        response.data = error_body(str(response.data.pop("detail")), code=code, **response.data)
    else:
        # Field errors ({"name": ["..."]}): the fields stay, and "detail" names them all.
        fields = response.data if isinstance(response.data, dict) else {"body": response.data}
        response.data = error_body(_detail_of(fields), code=code, **fields)
    return response


def _drf_code(exc: Exception) -> str:
    """The code of one of DRF's own errors (authentication, permission, throttling, parsing,
    method, a serializer's fields): its ``default_code`` (``not_authenticated``, ``throttled``,
    ``invalid``, ...), or the one code its detail carries. Django's ``Http404`` and
    ``PermissionDenied``, which DRF answers too, are DRF's ``not_found`` and
    ``permission_denied``."""
    if isinstance(exc, Http404):
        return "not_found"
    if not isinstance(exc, APIException):
        return "permission_denied"  # the one other error DRF's handler answers
    codes = exc.get_codes()
    return codes if isinstance(codes, str) else str(exc.default_code)
