"""Page numbers, page sizes and limits in query strings: the one rule for what they may be.

ASCII digits only (``str.isdigit`` alone takes ``²`` and other digits ``int`` refuses or reads
otherwise), at least 1, capped at ``maximum``; anything else a 400 naming the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rest_framework.settings import api_settings

from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed

# The most entries a page of a list holds, whatever ``page_size`` asks for.
PAGE_SIZE_MAX = 1000


def positive_int(raw: str | None, name: str, default: int, maximum: int) -> int:
    """``raw`` (a query parameter named ``name``) as a whole number from 1, at most
    ``maximum``; ``default`` when absent; ValidationFailed when it is anything else."""
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise ValidationFailed(f"{name} must be a positive integer, got {raw!r}")
    return min(int(raw), maximum)


def query_positive_int(query: Mapping[str, str], name: str, default: int, maximum: int) -> int:
    return positive_int(query.get(name), name, default, maximum)


@dataclass(frozen=True)
class PageRequest:
    """Which page of a list was asked for (``?page=N&page_size=M``)."""

    number: int
    size: int

    @property
    def start(self) -> int:
        return (self.number - 1) * self.size

    @property
    def stop(self) -> int:
        return self.start + self.size


def page_request(query: Mapping[str, str]) -> PageRequest:
    """``page`` (from 1) and ``page_size`` (default: the API's ``PAGE_SIZE``, as DRF's lists
    have it; at most ``PAGE_SIZE_MAX``)."""
    default = api_settings.PAGE_SIZE or PAGE_SIZE_MAX  # the settings set it
    size = query_positive_int(query, "page_size", default, PAGE_SIZE_MAX)
    return PageRequest(query_positive_int(query, "page", 1, 10**9), size)
