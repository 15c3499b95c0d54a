"""The read routes' cache policy (zarr_api.edge.cache_headers): a version of an open dandiset is
``public, max-age=31536000, immutable`` with a strong ETag on every read (a file, a shard index,
a listing, the manifest, the DANDI ``files`` listing); a draft's revalidates (``no-cache``,
``If-None-Match`` and ``If-Modified-Since`` answer 304); a private dandiset's and any
authenticated answer stay ``private``; a 304 carries the 200's headers and no body type; and a
version's documents are made once and kept."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils.http import http_date, parse_http_date
from rest_framework.test import APIClient

from dandizarr_server.zarr_api.edge.cache_headers import IMMUTABLE, PRIVATE, REVALIDATE
from dandizarr_server.zarr_api.runtime import kept_documents
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.api import Actor, create_archive, md5, upload
from tests.support.versions import add_asset, publish, versions

FILES = {"a/x": b"x one", "a/y": b"y one", "top": b"top"}


@pytest.fixture
def published(owner: Actor, dandiset: str, local_storage: str) -> Iterator[tuple[str, str]]:
    """``(zarr_id, version_id)`` of an archive of ``FILES`` whose version 1 holds them."""
    ensure_storage_versioning()
    zarr_id = create_archive(owner, dandiset, "c.zarr", layout="loose")
    add_asset(owner, dandiset, zarr_id, "c.zarr")
    assert upload(owner.client, zarr_id, FILES).status_code == 200
    publish(owner, dandiset)
    yield zarr_id, str(versions(owner, zarr_id)[0]["zarr_id"])


def _reads(read_id: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Every kind of read of ``read_id``: (URL, headers)."""
    return {
        "file": (f"/zarr/{read_id}/a/x", {}),
        "index": (f"/zarr/{read_id}/a/x", {"HTTP_RANGE": "bytes=-2"}),
        "listing": (f"/zarr/{read_id}/a/", {}),
        "listing json": (f"/zarr/{read_id}/a/", {"HTTP_ACCEPT": "application/json"}),
        "root": (f"/zarr/{read_id}/", {}),
        "dandi files": (f"/api/zarr/{read_id}/files/?prefix=a/", {}),
    }


def _body(response: Any) -> bytes:
    if response.streaming:
        return b"".join(response.streaming_content)
    return bytes(response.content)


def _get(client: APIClient, url: str, **headers: str) -> Any:
    response = client.get(url, **headers)
    response.body = _body(response)
    return response


def test_a_versions_reads_are_immutable_with_strong_etags_and_304s_without_a_type(
    owner: Actor, published: tuple[str, str]
) -> None:
    _zarr_id, version_id = published
    anonymous = APIClient()
    reads = {
        **_reads(version_id),
        "manifest": (f"/api/zarr/{version_id}/manifest/", {}),
    }
    for name, (url, headers) in reads.items():
        first = _get(anonymous, url, **headers)
        assert first.status_code in (200, 206), (name, first.body)
        assert first["Cache-Control"] == IMMUTABLE, name
        etag = first["ETag"]
        assert etag.startswith('"') and not etag.startswith("W/"), name
        assert "Last-Modified" in first, name
        again = _get(anonymous, url, **headers)
        assert (again["ETag"], again.body) == (etag, first.body), name
        cached = _get(anonymous, url, HTTP_IF_NONE_MATCH=etag, **headers)
        assert cached.status_code == 304, name
        assert cached.body == b"", name
        assert "Content-Type" not in cached, name
        assert (cached["ETag"], cached["Cache-Control"]) == (etag, IMMUTABLE), name
        since = _get(anonymous, url, HTTP_IF_MODIFIED_SINCE=first["Last-Modified"], **headers)
        assert since.status_code == 304, name
    # Whatever is answered to credentials stays the reader's (edge.authentication).
    mine = _get(owner.client, f"/zarr/{version_id}/a/x")
    assert mine.status_code == 200
    assert "private" in mine["Cache-Control"] and "public" not in mine["Cache-Control"]
    assert _get(anonymous, f"/zarr/{version_id}/a/x").body == FILES["a/x"]
    assert _get(anonymous, f"/zarr/{version_id}/a/x")["ETag"] == f'"{md5(FILES["a/x"])}"'
    # Listings answer JSON or HTML by Accept: caches keep them apart.
    assert "Accept" in _get(anonymous, f"/zarr/{version_id}/a/")["Vary"]


def test_a_drafts_reads_revalidate_by_etag_and_by_last_modified(
    owner: Actor, published: tuple[str, str]
) -> None:
    zarr_id, _version_id = published
    anonymous = APIClient()
    for name, (url, headers) in _reads(zarr_id).items():
        first = _get(anonymous, url, **headers)
        assert first.status_code in (200, 206), (name, first.body)
        assert first["Cache-Control"] == REVALIDATE, name
        etag = first["ETag"]
        assert not etag.startswith("W/"), name
        cached = _get(anonymous, url, HTTP_IF_NONE_MATCH=etag, **headers)
        assert (cached.status_code, cached.body) == (304, b""), name
        assert "Content-Type" not in cached and cached["Cache-Control"] == REVALIDATE, name
        changed = first["Last-Modified"]
        since = _get(anonymous, url, HTTP_IF_MODIFIED_SINCE=changed, **headers)
        assert since.status_code == 304, name
        earlier = http_date(parse_http_date(changed) - 1)
        assert _get(anonymous, url, HTTP_IF_MODIFIED_SINCE=earlier, **headers).status_code in (
            200,
            206,
        ), name
        # If-None-Match decides when both are sent (RFC 9110 13.2.2).
        both = _get(anonymous, url, HTTP_IF_NONE_MATCH='"other"', HTTP_IF_MODIFIED_SINCE=changed)
        assert both.status_code in (200, 206), name

    # A change of the draft: the old validators no longer match, the new bytes are served.
    before = _get(anonymous, f"/zarr/{zarr_id}/a/x")
    listing_before = _get(anonymous, f"/api/zarr/{zarr_id}/files/?prefix=a/")
    assert upload(owner.client, zarr_id, {"a/x": b"x two"}).status_code == 200
    after = _get(anonymous, f"/zarr/{zarr_id}/a/x", HTTP_IF_NONE_MATCH=before["ETag"])
    assert (after.status_code, after.body) == (200, b"x two")
    listing = _get(
        anonymous,
        f"/api/zarr/{zarr_id}/files/?prefix=a/",
        HTTP_IF_NONE_MATCH=listing_before["ETag"],
    )
    assert listing.status_code == 200
    modified = datetime.now(UTC) - timedelta(seconds=5)
    stale = _get(
        anonymous, f"/zarr/{zarr_id}/a/x", HTTP_IF_MODIFIED_SINCE=http_date(modified.timestamp())
    )
    assert stale.status_code == 200


def test_private_reads_stay_private(owner: Actor, local_storage: str) -> None:
    embargoed = owner.client.post("/api/dandisets/", {"name": "p", "embargo": True}, format="json")
    assert embargoed.status_code == 201, embargoed.content
    zarr_id = create_archive(owner, embargoed.json()["identifier"], "p.zarr", layout="loose")
    assert upload(owner.client, zarr_id, FILES).status_code == 200
    for name, (url, headers) in _reads(zarr_id).items():
        read = _get(owner.client, url, **headers)
        assert read.status_code in (200, 206), (name, read.body)
        policy = read["Cache-Control"]
        assert "private" in policy and "public" not in policy and "immutable" not in policy, name
        assert read["Cache-Control"] == PRIVATE, name
        assert "Authorization" in read["Vary"], name


def test_a_versions_documents_are_made_once_and_kept(published: tuple[str, str]) -> None:
    _zarr_id, version_id = published
    anonymous = APIClient()
    documents = [
        (f"/zarr/{version_id}/a/", {}),
        (f"/zarr/{version_id}/a/", {"HTTP_ACCEPT": "application/json"}),
        (f"/api/zarr/{version_id}/manifest/", {}),
        (f"/api/zarr/{version_id}/files/?prefix=a/", {}),
    ]
    for url, headers in documents:
        made, kept = kept_documents.counts["made"], kept_documents.counts["kept"]
        first = _get(anonymous, url, **headers)
        assert kept_documents.counts["made"] == made + 1, url
        for _ in range(3):
            again = _get(anonymous, url, **headers)
            assert again.body == first.body and again["ETag"] == first["ETag"], url
        assert kept_documents.counts["made"] == made + 1, url
        assert kept_documents.counts["kept"] == kept + 3, url
