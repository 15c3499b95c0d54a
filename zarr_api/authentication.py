"""Who a request is, on every view: API tokens for the plain Django views too, and what an
authenticated answer may not be (cached by a shared cache, shared with any origin).

DRF's views authenticate ``Authorization: Token ...`` themselves; the pages and the archive
reads under ``/zarr/`` are plain Django views, and tensorstore, fsspec and zarr-python send a
token header there to read a private archive. ``TokenUserMiddleware`` sets ``request.user``
from such a header (DRF's ``TokenAuthentication``, the same rule) when no session did; a
token that is not valid is a 401, never silently anonymous.

Everything answered to an authenticated request may hold private data: it is marked
``Cache-Control: private`` and varies on the credentials, so no shared cache keeps it.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.utils.cache import patch_cache_control, patch_vary_headers
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed


def sends_credentials(request: HttpRequest) -> bool:
    return bool(request.META.get("HTTP_AUTHORIZATION"))


def is_authenticated(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated)


class TokenUserMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if not is_authenticated(request) and sends_credentials(request):
            try:
                found = TokenAuthentication().authenticate(request)  # type: ignore[arg-type]
            except AuthenticationFailed as error:
                refused = JsonResponse({"detail": str(error.detail)}, status=401)
                refused["WWW-Authenticate"] = "Token"
                return refused
            if found is not None:
                request.user = found[0]
        response = self.get_response(request)
        if is_authenticated(request) or sends_credentials(request):
            patch_cache_control(response, private=True)
            patch_vary_headers(response, ["Authorization", "Cookie"])
        return response
