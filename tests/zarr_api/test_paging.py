"""Page numbers, sizes and limits: one rule (parsers.paging) on every listing. ``str.isdigit``
takes ``²``, which ``int`` refuses: such a page was a 500."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.support.api import Actor, upload


@pytest.mark.parametrize("raw", ["²", "0", "-1", "1.5", "x", "\u0661"])
def test_every_listing_refuses_a_page_that_is_not_one(owner: Actor, zarr_id: str, raw: str) -> None:
    assert upload(owner.client, zarr_id, {"a/b": b"1"}).status_code == 200
    for url in (
        f"/api/zarr/{zarr_id}/tree/?page={raw}",
        f"/api/zarr/{zarr_id}/tree/?page_size={raw}",
        f"/api/zarr/{zarr_id}/tree/?recursive=1&limit={raw}",
        f"/api/zarr/{zarr_id}/files?prefix=a&page_size={raw}",
    ):
        response = owner.client.get(url)
        assert response.status_code == 400, (url, response.status_code)
        assert "must be a positive integer" in response.json()["detail"]
    page = Client().get(f"/archives/{zarr_id}/tree/?page={raw}")
    assert page.status_code == 404
