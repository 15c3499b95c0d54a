"""Who a request is, on every view: API tokens for the plain Django views too, and what an
authenticated answer may not be (cached by a shared cache, shared with any origin).

DRF's views authenticate ``Authorization: Token ...`` themselves; the pages and the archive
reads under ``/zarr/`` are plain Django views, and tensorstore, fsspec and zarr-python send a
token header there to read a private archive. ``TokenUserMiddleware`` sets ``request.user``
from such a header (DRF's ``TokenAuthentication``, the same rule) when no session did; a
token that is not valid is a 401, never silently anonymous, and past
``DANDIZARR_TOKEN_FAILURE_RATE`` invalid tokens from one address a 429; a valid token is
never refused for its address's count.

Everything answered to an authenticated request may hold private data: it is marked
``Cache-Control: private`` and varies on the credentials, so no shared cache keeps it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.utils.cache import patch_cache_control, patch_vary_headers
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.throttling import AnonRateThrottle

from dandizarr_server.zarr_api.edge.exceptions import error_response
from dandizarr_server.zarr_api.edge.throttles import LiveRate


def sends_credentials(request: HttpRequest) -> bool:
    return bool(request.META.get("HTTP_AUTHORIZATION"))


def is_authenticated(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated)


class TokenFailureThrottle(LiveRate, AnonRateThrottle):
    """Tokens that do not exist, counted per address: past the rate, 429 until it falls."""

    scope = "token_failures"

    def exhausted(self, request: HttpRequest) -> float | None:
        """Seconds to wait while the address is over the rate (nothing counted), else None."""
        key = self.get_cache_key(request, None)  # type: ignore[arg-type]
        if key is None or self.rate is None:
            return None
        limit, duration = self.parse_rate(self.rate)
        if limit is None or duration is None:
            return None
        now = self.timer()
        recent = [t for t in self.cache.get(key, []) if t > now - duration]
        if len(recent) < limit:
            return None
        return duration - (now - recent[-1]) if recent else float(duration)

    def record(self, request: HttpRequest) -> None:
        self.allow_request(request, None)  # type: ignore[arg-type]


def _locked_out(wait: float) -> JsonResponse:
    seconds = max(1, math.ceil(wait))
    response = error_response(
        429,
        f"too many invalid tokens from this address; try again in {seconds} s",
        code="throttled",
    )
    response["Retry-After"] = str(seconds)
    return response


def _refused(request: HttpRequest, detail: str) -> JsonResponse:
    """An invalid token's answer: 401 (counted), or 429 once its address is over the rate."""
    failures = TokenFailureThrottle()
    if (wait := failures.exhausted(request)) is not None:
        return _locked_out(wait)
    failures.record(request)
    refused = error_response(401, detail, code="authentication_failed")
    refused["WWW-Authenticate"] = "Token"
    return refused


class TokenUserMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if not is_authenticated(request) and sends_credentials(request):
            # The token is looked up first: a valid one is taken whatever its address's count
            # (a stranger's guesses from behind the same NAT must not lock its owner out); only
            # further invalid ones are refused while the address is over the rate.
            try:
                found = TokenAuthentication().authenticate(request)  # type: ignore[arg-type]
            except AuthenticationFailed as error:
                return _refused(request, str(error.detail))
            if found is not None:
                request.user = found[0]
        response = self.get_response(request)
        if is_authenticated(request) or sends_credentials(request):
            patch_cache_control(response, private=True)
            patch_vary_headers(response, ["Authorization", "Cookie"])
        return response
