"""The answer to an exception no view handled: one raised in a middleware (the token
middleware's look-up, the sessions') or a view's bug. DRF's exception handler covers views;
this is Django's ``handler500`` for the rest, so a database or broker that is unreachable
mid-request is a 503 with ``Retry-After`` wherever it is met, never a 500 page."""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import server_error as html_server_error

from dandizarr_server.zarr_api.exceptions import unavailable_answer, unavailable_service


def server_error(request: HttpRequest) -> HttpResponse:
    exc = sys.exc_info()[1]  # Django calls handler500 while handling the exception
    service = unavailable_service(exc) if exc is not None else None
    if service is not None and exc is not None:
        body, status, headers = unavailable_answer(service, exc)
        return JsonResponse(body, status=status, headers=headers)
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "internal server error"}, status=500)
    return html_server_error(request)
