"""A page of a list as the API answers it: ``{"count", "next", "previous", "results"}``, the
shape DRF's paginated lists have, with links that keep the request's other parameters."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from rest_framework.request import Request

from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.parsers.paging import PageRequest


def page_links(request: Request, page: PageRequest, count: int) -> dict[str, Any]:
    """``count``, ``next`` and ``previous`` of ``page`` of a list of ``count`` entries;
    NotFound for a page past the end (page 1 of an empty list is an empty page)."""
    if page.start and page.start >= count:
        raise NotFound(f"page {page.number} is past the end of the list", code="page_not_found")

    def link(number: int) -> str:
        query = request.query_params.copy()
        query["page"] = str(number)
        return request.build_absolute_uri(f"{request.path}?{urlencode(query)}")

    return {
        "count": count,
        "next": link(page.number + 1) if page.stop < count else None,
        "previous": link(page.number - 1) if page.number > 1 else None,
    }
