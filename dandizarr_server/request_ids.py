"""Every request has an id, logged with each of its events (django-structlog's
``request_id``), returned as ``X-Request-ID`` and carried into the Celery tasks it schedules, so
one upload can be followed from the client's request to its checksum update in a worker.

An ``X-Request-ID`` a proxy (or client) sends is kept when it looks like an id (letters, digits,
``-_.:``, at most 128), so a proxy's id and ours agree; anything else is dropped and the request
gets a new one.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import structlog
from django.http import HttpRequest, HttpResponseBase

_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
HEADER = "HTTP_X_REQUEST_ID"


class RequestIdMiddleware:
    """Around django-structlog's RequestMiddleware: a usable incoming id or none; inside it:
    the id returned on the response."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        given = request.META.get(HEADER)
        if given is not None and not _ID.fullmatch(given):
            del request.META[HEADER]
        return self.get_response(request)


class RequestIdHeaderMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        request_id = structlog.contextvars.get_contextvars().get("request_id")
        if request_id:
            response["X-Request-ID"] = str(request_id)
        return response
