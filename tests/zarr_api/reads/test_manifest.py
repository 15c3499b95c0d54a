"""``/api/zarr/{zarr_id}/manifest/``: the kerchunk reference set (packed files as shard ranges,
loose files as URLs, metadata inlined), its expiry, ``prefix``, paging, the public-bucket form,
and its errors."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import requests
from django.utils.http import parse_http_date

from dandizarr_server.zarr_api.selectors import manifest
from tests.support.readers import Live


def resolve(ref: Any) -> bytes:
    """What a reference-file-system reader makes of one reference."""
    if isinstance(ref, str):
        return base64.b64decode(ref[7:]) if ref.startswith("base64:") else ref.encode()
    if len(ref) == 1:
        response = requests.get(ref[0], timeout=30)
    else:
        url, offset, length = ref
        response = requests.get(
            url, headers={"Range": f"bytes={offset}-{offset + length - 1}"}, timeout=30
        )
    assert response.status_code in (200, 206), response.text
    return response.content


def test_manifest_references_every_file_as_its_bytes(
    live: Live, packed_archive: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    zarr_id, files = packed_archive
    response = requests.get(f"{live.url}/api/zarr/{zarr_id}/manifest/", timeout=30)
    assert response.status_code == 200
    body = response.json()
    assert body["version"] == 1
    assert set(body["refs"]) == set(files)
    for path, ref in body["refs"].items():
        assert resolve(ref) == files[path], path
    kinds = {path: type(ref).__name__ + str(len(ref)) for path, ref in body["refs"].items()}
    assert kinds["v3/zarr.json"].startswith("str")  # inlined
    assert kinds["v3/c/0/1"] == "list3"  # a shard range
    info = body["dandizarr"]
    assert info["zarr_id"] == zarr_id and info["prefix"] == ""
    expires = parse_http_date(response.headers["X-Dandizarr-Expires"])
    assert info["expires"] is not None
    assert info["refresh"] == f"{live.url}/api/zarr/{zarr_id}/manifest/"

    # A longer lifetime on request; paging changes nothing; a prefix keeps archive paths.
    longer = requests.get(
        f"{live.url}/api/zarr/{zarr_id}/manifest.json?expires_in=86400", timeout=30
    )
    assert parse_http_date(longer.headers["X-Dandizarr-Expires"]) - expires >= 86400 - 700
    monkeypatch.setattr(manifest, "PAGE", 3)
    paged = requests.get(f"{live.url}/api/zarr/{zarr_id}/manifest/", timeout=30).json()
    assert {p: resolve(r) for p, r in paged["refs"].items()} == files
    v3s = requests.get(f"{live.url}/api/zarr/{zarr_id}/manifest/?prefix=v3s/", timeout=30).json()
    assert set(v3s["refs"]) == {p for p in files if p.startswith("v3s/")}
    assert v3s["dandizarr"]["prefix"] == "v3s"


def test_public_bucket_manifest_has_plain_urls_that_do_not_expire(
    live: Live, packed_archive: tuple[str, dict[str, bytes]], settings: Any
) -> None:
    zarr_id, files = packed_archive
    settings.DANDIZARR_S3_PUBLIC_READ_URL = "https://bucket.example/"
    response = requests.get(f"{live.url}/api/zarr/{zarr_id}/manifest/", timeout=30)
    body = response.json()
    assert "X-Dandizarr-Expires" not in response.headers
    assert body["dandizarr"]["expires"] is None
    ref = body["refs"]["v3/c/0/1"]
    assert ref[0].startswith(f"https://bucket.example/zarr_shards/{zarr_id}/v3/")
    assert "?" not in ref[0] and ref[2] == len(files["v3/c/0/1"])
    assert body["refs"]["v2/.zarray"] == files["v2/.zarray"].decode()


@pytest.mark.parametrize(
    "query",
    ["prefix=a//b", "expires_in=0", "expires_in=x", f"expires_in={manifest.MAX_EXPIRES_IN + 1}"],
)
def test_bad_manifest_requests_are_400(
    live: Live, packed_archive: tuple[str, dict[str, bytes]], query: str
) -> None:
    zarr_id, _files = packed_archive
    response = requests.get(f"{live.url}/api/zarr/{zarr_id}/manifest/?{query}", timeout=30)
    assert response.status_code == 400 and response.json()["detail"]
    missing = requests.get(f"{live.url}/api/zarr/not-a-uuid/manifest/", timeout=30)
    assert missing.status_code == 404 and missing.json()["detail"]
