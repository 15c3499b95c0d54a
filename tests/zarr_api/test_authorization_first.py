"""Authorization before work (issue #16, finding 5): on every write route, a signed-in user who
may not write gets 403 before the body is read, however malformed or large, and nothing
changes. (POST /api/zarr/ names its dandiset in the body, so that body is parsed first.)"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.api import Actor, db_snapshot, upload


@pytest.fixture
def routes(owner: Actor, dandiset: str, zarr_id: str) -> list[tuple[str, str]]:
    assert upload(owner.client, zarr_id, {"a": b"1"}).status_code == 200
    asset = owner.client.post(
        f"/api/dandisets/{dandiset}/versions/draft/assets/",
        {"path": "a.zarr", "zarr_id": zarr_id},
        format="json",
    ).json()["asset_id"]
    assets = f"/api/dandisets/{dandiset}/versions/draft/assets/"
    return [
        ("post", assets),
        ("put", f"{assets}{asset}/"),
        ("patch", f"{assets}{asset}/"),
        ("delete", f"{assets}{asset}/"),
        ("post", f"/api/dandisets/{dandiset}/versions/draft/publish/"),
        ("post", f"/api/zarr/{zarr_id}/upload/"),
        ("delete", f"/api/zarr/{zarr_id}/upload/"),
        ("post", f"/api/zarr/{zarr_id}/upload/complete/"),
        ("post", f"/api/zarr/{zarr_id}/pack/"),
        ("delete", f"/api/zarr/{zarr_id}/files/"),
    ]


@pytest.mark.parametrize("open_batch", [False, True], ids=["no-batch", "open-batch"])
def test_a_stranger_gets_403_before_the_body_is_read(
    owner: Actor,
    stranger: Actor,
    zarr_id: str,
    routes: list[tuple[str, str]],
    open_batch: bool,
    settings: Any,
) -> None:
    if open_batch:
        upload(owner.client, zarr_id, {"b": b"2"}, complete=False)
    before = db_snapshot()
    huge = b"[" + b"0," * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 2 + 8) + b"0]"
    for body in (b"{not json", b"[" * 50_000, huge):
        for method, url in routes:
            response = getattr(stranger.client, method)(url, body, content_type="application/json")
            assert response.status_code == 403, (method, url, response.content[:200])
            assert "owners" in response.json()["detail"], response.json()
    assert db_snapshot() == before
