"""Helpers for archive versions: publish, and read every file of a version or draft."""

from __future__ import annotations

from typing import Any

from tests.support.api import Actor, md5


def publish(actor: Actor, dandiset: str) -> str:
    response = actor.client.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert response.status_code == 201, response.content
    return str(response.json()["version"])


def add_asset(actor: Actor, dandiset: str, zarr_id: str, path: str) -> None:
    response = actor.client.post(
        f"/api/dandisets/{dandiset}/versions/draft/assets/",
        {"path": path, "zarr_id": zarr_id},
        format="json",
    )
    assert response.status_code == 201, response.content


def versions(actor: Actor, zarr_id: str) -> list[dict[str, Any]]:
    response = actor.client.get(f"/api/zarr/{zarr_id}/versions/")
    assert response.status_code == 200, response.content
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def read(actor: Actor, zarr_id: str, path: str, **headers: str) -> Any:
    """``GET /zarr/{zarr_id}/{path}`` (a version's id reads the version); ``.body`` the bytes."""
    response = actor.client.get(f"/zarr/{zarr_id}/{path}", **headers)
    if response.status_code in (200, 206):
        response.body = b"".join(response.streaming_content)
    return response


def state_of(actor: Actor, zarr_id: str) -> dict[str, bytes]:
    """Every file of an archive (or version) and its bytes, read through ``/zarr/``; each
    checked against its listed digest and its ETag."""
    listing = actor.client.get(f"/api/zarr/{zarr_id}/files/", {"recursive": "true"}).json()
    found = {}
    for entry in listing["results"]:
        response = read(actor, zarr_id, entry["path"])
        assert response.status_code == 200, (entry, response.content)
        assert md5(response.body) == entry["digest"] == response["ETag"].strip('"')
        found[entry["path"]] = response.body
    return found
