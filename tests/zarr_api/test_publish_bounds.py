"""Publishing is bounded (issue #35, finding 5): publishes are rate limited per account (150 in
3 s went through), and an archive's versions are listed a page at a time, by the API and by the
archive page, however often it was published."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from dandizarr_server.zarr_api.models import Dandiset
from dandizarr_server.zarr_api.pages.views import PAGE_VERSIONS
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.api import Actor, create_archive, make_actor
from tests.support.versions import add_asset, publish


def _publish_rate(settings: Any, rate: str) -> None:
    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**rates, "publishes": rate},
    }


@pytest.fixture
def owner(db: None) -> Actor:
    return make_actor("owner")


@pytest.fixture
def published(owner: Actor, s3_storage: str) -> tuple[str, str]:
    """A dandiset whose draft holds an archive, on a store keeping object versions: its
    identifier and the archive's zarr_id."""
    created = owner.client.post("/api/dandisets/", {"name": "p"}, format="json")
    assert created.status_code == 201, created.content
    dandiset = str(created.json()["identifier"])
    zarr_id = create_archive(owner, dandiset, "a.zarr", layout="loose")
    add_asset(owner, dandiset, zarr_id, "a.zarr")
    ensure_storage_versioning()
    return dandiset, zarr_id


def test_publishes_are_rate_limited_per_account(
    owner: Actor, published: tuple[str, str], settings: Any
) -> None:
    _publish_rate(settings, "3/min")
    dandiset, _ = published
    for _ in range(3):
        publish(owner, dandiset)
    limited = owner.client.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert limited.status_code == 429
    assert int(limited["Retry-After"]) >= 1
    assert "throttled" in limited.json()["detail"].lower()
    # Per account: another owner of the dandiset still publishes.
    other = make_actor("co-owner")
    Dandiset.objects.get(pk=int(dandiset)).owners.add(other.user)  # as the admin adds one
    publish(other, dandiset)


def _numbers(answer: Any) -> list[int]:
    return [version["number"] for version in answer.json()["results"]]


def test_the_versions_list_is_paged(
    owner: Actor, published: tuple[str, str], settings: Any
) -> None:
    dandiset, zarr_id = published
    for _ in range(5):
        publish(owner, dandiset)
    url = f"/api/zarr/{zarr_id}/versions/"
    first = owner.client.get(url, {"page_size": "2"})
    assert first.status_code == 200
    assert {k: v for k, v in first.json().items() if k != "results"} == {
        "zarr_id": zarr_id,
        "count": 5,
        "next": f"http://testserver{url}?page_size=2&page=2",
        "previous": None,
    }
    assert _numbers(first) == [1, 2]
    seen, answer = [], first
    while True:
        seen += _numbers(answer)
        if answer.json()["next"] is None:
            break
        answer = owner.client.get(answer.json()["next"])
    assert seen == [1, 2, 3, 4, 5]
    assert answer.json()["previous"] == f"http://testserver{url}?page_size=2&page=2"
    # The default page holds them all here; a page past the end, a bad size: clear 4xx.
    assert _numbers(owner.client.get(url)) == [1, 2, 3, 4, 5]
    past = owner.client.get(url, {"page": "4", "page_size": "2"})
    assert past.status_code == 404 and past.json()["code"] == "page_not_found"
    bad = owner.client.get(url, {"page_size": "0"})
    assert bad.status_code == 400 and "page_size" in bad.json()["detail"]
    assert _numbers(owner.client.get(url, {"page_size": str(10**12)})) == [1, 2, 3, 4, 5]


def test_the_archive_page_links_only_the_newest_versions(
    owner: Actor, published: tuple[str, str], settings: Any
) -> None:
    _publish_rate(settings, "1000/min")
    dandiset, zarr_id = published
    total = PAGE_VERSIONS + 3
    for _ in range(total):
        publish(owner, dandiset)
    ids = {
        v["number"]: v["zarr_id"]
        for v in owner.client.get(f"/api/zarr/{zarr_id}/versions/").json()["results"]
    }
    assert len(ids) == total
    for page in (f"/archives/{zarr_id}/", f"/archives/{zarr_id}/tree/"):
        html = Client().get(page).content.decode()
        nav = re.search(r'<nav class="versions".*?</nav>', html, re.S)
        assert nav is not None
        linked = set(re.findall(r'href="/archives/([0-9a-f-]+)/"', nav.group(0))) - {zarr_id}
        assert linked == {ids[n] for n in range(4, total + 1)}
        assert f'href="/api/zarr/{zarr_id}/versions/">3 older</a>' in nav.group(0)
