"""Django's answers to what no view answered, for the JSON routes in the shape of every other
error (``detail`` and ``code``: zarr_api.edge.exceptions.error_body); the pages keep Django's HTML.

``handler500``, the answer to an exception no view handled: one raised in a middleware (the
token middleware's look-up, the sessions') or a view's bug. DRF's exception handler covers
views; this covers the rest, so a database or broker that is unreachable mid-request is a 503
with ``Retry-After`` wherever it is met, never a 500 page. ``handler404`` (no route matched,
or a plain Django view raised ``Http404``) and ``handler400`` (a request Django refused before
a view, a ``BadRequest`` a view did not catch)."""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import bad_request as html_bad_request
from django.views.defaults import page_not_found as html_page_not_found
from django.views.defaults import server_error as html_server_error

from dandizarr_server.zarr_api.edge.exceptions import (
    error_response,
    unavailable_answer,
    unavailable_service,
)

# The routes that answer JSON (the REST API); every other path is a page or a file.
JSON_ROUTES = ("/api/",)


def server_error(request: HttpRequest) -> HttpResponse:
    exc = sys.exc_info()[1]  # Django calls handler500 while handling the exception
    service = unavailable_service(exc) if exc is not None else None
    if service is not None and exc is not None:
        body, status, headers = unavailable_answer(service, exc)
        return JsonResponse(body, status=status, headers=headers)
    if request.path.startswith(JSON_ROUTES):
        return error_response(500, "internal server error", code="server_error")
    return html_server_error(request)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith(JSON_ROUTES):
        return error_response(404, f"no such resource: {request.path}", code="not_found")
    return html_page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith(JSON_ROUTES):
        return error_response(400, "bad request", code="bad_request")
    return html_bad_request(request, exception)
