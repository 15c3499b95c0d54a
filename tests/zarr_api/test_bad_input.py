"""Every bad input is a 4xx ``{"detail": ...}`` naming the problem, and changes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from dandizarr_server.zarr_api.models import Batch
from tests.support.api import Actor, db_snapshot, md5


@pytest.fixture
def asset(owner: Actor, dandiset: str, zarr_id: str) -> str:
    response = owner.client.post(
        f"/api/dandisets/{dandiset}/versions/draft/assets/",
        {"path": "a.zarr", "zarr_id": zarr_id},
        format="json",
    )
    assert response.status_code == 201, response.content
    return str(response.json()["asset_id"])


def assert_4xx(response: Any, status: int, *fragments: str) -> None:
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    detail = response.json()["detail"]
    for fragment in fragments:
        assert fragment in detail, detail


def test_bad_identifiers_are_404(owner: Actor, dandiset: str, zarr_id: str, asset: str) -> None:
    before = db_snapshot()
    assets = f"/api/dandisets/{dandiset}/versions/draft/assets/"
    for method in ("get", "put", "patch", "delete"):
        response = getattr(owner.client, method)(assets + "not-a-uuid/", {}, format="json")
        assert_4xx(response, 404, "not-a-uuid")
    huge = "99999999999999999999"
    assert_4xx(owner.client.get(f"/api/dandisets/{huge}/"), 404, huge)
    assert_4xx(owner.client.get(f"/api/dandisets/{huge}/versions/"), 404, huge)
    assert_4xx(owner.client.get(f"/api/zarr/{zarr_id}/batches/{huge}/"), 404, huge)
    response = owner.client.get(f"/api/zarr/?dandiset={huge}")
    assert response.status_code == 200 and response.json()["count"] == 0
    assert db_snapshot() == before


def test_browsing_paths_no_backend_can_hold(owner: Actor, zarr_id: str) -> None:
    for path in ("d/" + "x" * 240, ".dandizarr-meta.x", "a/" + "é" * 130):
        for form in (f"/api/zarr/{zarr_id}/files/{path}", f"/api/zarr/{zarr_id}/{path}"):
            assert_4xx(owner.client.get(form), 400, "path")


@pytest.mark.parametrize("path", [["x"], {"a": "b"}, 5, None])
def test_a_path_that_is_not_a_string(
    owner: Actor, stranger: Actor, dandiset: str, zarr_id: str, asset: str, path: object
) -> None:
    before = db_snapshot()
    bodies = [
        (f"/api/zarr/{zarr_id}/upload/", "post", [{"path": path, "etag": md5(b"")}]),
        (f"/api/zarr/{zarr_id}/files/", "delete", [{"path": path}]),
        (
            f"/api/dandisets/{dandiset}/versions/draft/assets/",
            "post",
            {"path": path, "zarr_id": zarr_id},
        ),
        (f"/api/dandisets/{dandiset}/versions/draft/assets/{asset}/", "put", {"path": path}),
        (f"/api/dandisets/{dandiset}/versions/draft/assets/{asset}/", "patch", {"path": path}),
    ]
    for url, method, body in bodies:
        response = getattr(owner.client, method)(url, body, format="json")
        assert_4xx(response, 400, "path")
        response = getattr(stranger.client, method)(url, body, format="json")
        assert_4xx(response, 403, "owners")
    assert db_snapshot() == before


def test_a_lone_surrogate_is_echoed_as_json(owner: Actor, zarr_id: str) -> None:
    body = '[{"path": "a\\ud800", "etag": "' + md5(b"") + '"}]'
    response = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/", body, content_type="application/json"
    )
    assert_4xx(response, 400, "UTF-8")
    assert json.loads(response.content)["paths"][0]["path"] == "a\ud800"


def test_deeply_nested_json_is_400(owner: Actor, dandiset: str, zarr_id: str) -> None:
    before = db_snapshot()
    nested = "[" * 50_000 + "]" * 50_000
    for url in (
        f"/api/zarr/{zarr_id}/upload/",
        "/api/zarr/",
        "/api/dandisets/",
        f"/api/dandisets/{dandiset}/versions/draft/assets/",
    ):
        response = owner.client.post(url, nested, content_type="application/json")
        assert_4xx(response, 400, "nests deeper than")
        assert response.json()["code"] == "body_too_deep"
    assert db_snapshot() == before


def test_a_body_too_large_is_a_json_413(owner: Actor, zarr_id: str, settings: Any) -> None:
    size = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1
    body = b'"' + b"x" * size + b'"'
    for client in (owner.client, APIClient()):
        response = client.post(
            f"/api/zarr/{zarr_id}/upload/", body, content_type="application/json"
        )
        if client is owner.client:
            assert_4xx(response, 413, "bytes")
    assert not Batch.objects.exists()


def test_what_a_request_cannot_change_is_refused(
    owner: Actor, dandiset: str, zarr_id: str, asset: str
) -> None:
    before = db_snapshot()
    url = f"/api/dandisets/{dandiset}/versions/draft/assets/{asset}/"
    assert_4xx(owner.client.put(url, [], format="json"), 400, "object")
    assert_4xx(owner.client.put(url, "a string", format="json"), 400, "object")
    another = "00000000-0000-4000-8000-000000000000"
    assert_4xx(owner.client.put(url, {"zarr_id": another}, format="json"), 400, "zarr_id")
    assert_4xx(owner.client.put(url, {"asset_id": asset}, format="json"), 400, "asset_id")
    assert_4xx(owner.client.patch(url, {"blob_id": "x"}, format="json"), 400, "blob_id")
    assert_4xx(
        owner.client.post("/api/zarr/", {"name": 5, "dandiset": dandiset}, format="json"),
        400,
        "name",
    )
    assert_4xx(
        owner.client.post("/api/zarr/", {"name": "n", "dandiset": 1}, format="json"),
        400,
        "dandiset",
    )
    assert_4xx(owner.client.post("/api/dandisets/", {"name": 5}, format="json"), 400, "name")
    assert_4xx(
        owner.client.post(f"/api/dandisets/{dandiset}/versions/draft/assets/", [], format="json"),
        400,
        "object",
    )
    assert db_snapshot() == before


def test_nul_characters_the_database_cannot_store(
    owner: Actor, dandiset: str, zarr_id: str, asset: str
) -> None:
    """PostgreSQL holds no NUL in text or jsonb: a query or body with one is a 400 (found by
    the schemathesis run)."""
    before = db_snapshot()
    assert_4xx(owner.client.get("/api/zarr/", {"name": "a\x00b"}), 400, "name")
    assets = f"/api/dandisets/{dandiset}/versions/draft/assets/"
    for metadata in ({"a": "x\x00"}, {"a\x00": 1}, {"a": [{"b": "\x00"}]}):
        body = {"path": "b.zarr", "zarr_id": zarr_id, "metadata": metadata}
        assert_4xx(owner.client.post(assets, body, format="json"), 400, "metadata")
        change = {"metadata": metadata}
        assert_4xx(owner.client.patch(f"{assets}{asset}/", change, format="json"), 400, "metadata")
    assert db_snapshot() == before
