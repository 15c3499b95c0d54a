"""The user-content origin (``DANDIZARR_USER_CONTENT_URL``): its host serves user bytes only.

A deployment may route a second host name (``usercontent.example.org``) to the service, as
GitHub does with its raw host, so that the bytes people upload are never served from the origin
that holds the readers' sessions. On that host only the storage endpoint and the archive reads
answer; every page, the API and the admin answer 404, so no session cookie is ever set there
and nothing there acts on one.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

from dandizarr_server.zarr_api.edge.exceptions import error_response

# What the user-content host serves: the local backend's storage URLs, the archive as HTTP.
USER_CONTENT_PATHS = ("/storage/", "/zarr/", "/links/")


class UserContentHostMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        host = request.get_host().rsplit(":", 1)[0].strip("[]").lower()
        on_user_content_host = host == settings.USER_CONTENT_HOST.lower()
        if on_user_content_host and not request.path.startswith(USER_CONTENT_PATHS):
            return error_response(
                404,
                f"{request.path} is not served on the user-content host {host}",
                code="not_found",
            )
        return self.get_response(request)
