"""Rate limits of publishing (below) and of the expensive reads: previews, archive and tree
pages, /zarr/ directory listings, manifests, recursive file listings (the API's
``files/?recursive=true`` and the DANDI ``files/?prefix=`` listing). Anonymous visitors are
counted per address, users per account, with DRF's throttles (their counts live in Django's
cache) and rates from the settings (``DANDIZARR_THROTTLE_ANON``, ``DANDIZARR_THROTTLE_USER``);
an address is what ``dandizarr_server.client_address`` says (never a client's own
``X-Forwarded-For``).
Chunk reads are not limited: a viewer such as Neuroglancer makes thousands of them, and each
is one storage read.

Publishing is limited per account too (``PUBLISH_THROTTLES``, ``DANDIZARR_THROTTLE_PUBLISHES``):
each publish makes a version of every archive in the draft, history nothing removes.

Downloads of the client wheel (``/client/...``) are limited per address, signed in or not
(``CLIENT_DOWNLOAD_THROTTLES``, ``DANDIZARR_THROTTLE_CLIENT_DOWNLOADS``): each is a few hundred
kilobytes of the service's bandwidth for one ``pip install``.

The API's views list ``EXPENSIVE_READ_THROTTLES`` (or ``expensive_read_throttles`` when only
some of their requests are expensive); the pages and ``/zarr/`` are plain Django
views and go through ``throttled``. Over the limit: 429 with ``Retry-After`` and a detail.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse
from rest_framework.settings import api_settings
from rest_framework.throttling import (
    AnonRateThrottle,
    BaseThrottle,
    SimpleRateThrottle,
    UserRateThrottle,
)

from dandizarr_server.client_address import client_address
from dandizarr_server.zarr_api.edge.exceptions import error_response


class LiveRate:
    """The rate as the settings say now (DRF's throttles read theirs once, at import), per
    address as ``client_address`` has it (DRF's own ``get_ident`` believes any
    ``X-Forwarded-For``)."""

    scope: str

    def get_rate(self) -> str | None:
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        return None if rate is None else str(rate)

    def get_ident(self, request: HttpRequest) -> str:
        return client_address(request)


class AnonExpensiveReadThrottle(LiveRate, AnonRateThrottle):
    scope = "expensive_anon"


class UserExpensiveReadThrottle(LiveRate, UserRateThrottle):
    scope = "expensive_user"


EXPENSIVE_READ_THROTTLES: list[type[BaseThrottle]] = [
    AnonExpensiveReadThrottle,
    UserExpensiveReadThrottle,
]


class PublishThrottle(LiveRate, UserRateThrottle):
    """Per account (a request without credentials is refused before it is counted)."""

    scope = "publishes"


PUBLISH_THROTTLES: list[type[BaseThrottle]] = [PublishThrottle]


class ClientDownloadThrottle(LiveRate, SimpleRateThrottle):
    """Per address, whoever asks (``pip install`` sends no credentials, and an account's are no
    reason for more copies)."""

    scope = "client_downloads"

    def get_cache_key(self, request: HttpRequest, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


CLIENT_DOWNLOAD_THROTTLES: list[type[BaseThrottle]] = [ClientDownloadThrottle]


def expensive_read_throttles(request: HttpRequest, expensive: bool) -> list[BaseThrottle]:
    """An API view's ``get_throttles()`` when only some of its requests are expensive reads
    (recursive listings): the expensive-read limits for a GET or HEAD that is one."""
    if expensive and request.method in ("GET", "HEAD"):
        return [throttle() for throttle in EXPENSIVE_READ_THROTTLES]
    return []


EXPENSIVE_READ = "this expensive read"


def too_many_requests(wait: float | None, what: str = EXPENSIVE_READ) -> JsonResponse:
    seconds = max(1, math.ceil(wait or 1))
    response = error_response(
        429,
        f"too many requests for {what}; try again in {seconds} s",
        code="throttled",
    )
    response["Retry-After"] = str(seconds)
    return response


def over_limit(
    request: HttpRequest,
    throttles: list[type[BaseThrottle]] = EXPENSIVE_READ_THROTTLES,
    what: str = EXPENSIVE_READ,
) -> JsonResponse | None:
    """The 429 of a plain Django request over ``throttles`` (by default the expensive-read
    limits), or None (counted)."""
    for throttle_class in throttles:
        throttle = throttle_class()
        if not throttle.allow_request(request, None):  # type: ignore[arg-type]
            return too_many_requests(throttle.wait(), what)
    return None


def throttled_by(
    throttles: list[type[BaseThrottle]], what: str
) -> Callable[[Callable[..., HttpResponseBase]], Callable[..., HttpResponseBase]]:
    """A plain Django view under ``throttles``; ``what`` names it in the 429's detail."""

    def decorate(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            return over_limit(request, throttles, what) or view(request, *args, **kwargs)

        return wrapped

    return decorate


# A plain Django view under the expensive-read limits.
throttled = throttled_by(EXPENSIVE_READ_THROTTLES, EXPENSIVE_READ)
