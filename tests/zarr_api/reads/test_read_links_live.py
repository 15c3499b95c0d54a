"""Private read links (docs/embargo.md): an embargoed archive's owner makes a link; zarr-python
and tensorstore read the archive through it with no credentials, appending keys to its URL;
it writes nothing, refuses strangers as a missing archive, dies on revocation and expiry, and its
secret reaches no log line."""

from __future__ import annotations

import io
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import zarr
from django.conf import settings
from django.utils import timezone
from zarr.storage import LocalStore

from dandizarr_server.zarr_api.models import ReadLink
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.live_users import user_with_dandiset
from tests.support.readers import (
    WRITTEN,
    Live,
    read_tensorstore,
    read_zarr_http,
    upload_archive,
    write_arrays,
)

pytestmark = pytest.mark.parametrize("live", ["local"], indirect=True)


@pytest.fixture
def service_log() -> Any:
    """Every line the service logs while the test runs, formatted by its configured formatter
    (the one every log line passes: docs/embargo.md)."""
    spec = dict(settings.LOGGING["formatters"]["structured"])
    formatter = spec.pop("()")(**spec)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def _make_link(live: Live, zarr_id: str, **body: Any) -> dict[str, Any]:
    made = live.api("POST", f"/api/zarr/{zarr_id}/read-links/", json={"expires_in": 600, **body})
    assert made.status_code == 201, made.text
    return dict(made.json())


def test_a_link_reads_a_private_archive_until_revoked(
    live: Live, tmp_path: Path, service_log: io.StringIO
) -> None:
    created = live.api("POST", "/api/dandisets/?embargo=true", json={"name": "linked"})
    private = Live(live.url, live.token, created.json()["identifier"], live.backend)
    root = tmp_path / "arrays.zarr"
    expected = write_arrays(root)
    zarr_id = upload_archive(private, root, "loose")

    # A stranger (signed in or not) asking for a link gets what a missing archive gets.
    stranger, _ = user_with_dandiset(live.url, "link-stranger", "theirs")
    missing = "00000000-0000-4000-8000-000000000000"
    for headers in ({}, {"Authorization": f"Token {stranger}"}):
        for target in (zarr_id, missing):
            asked = requests.post(
                f"{live.url}/api/zarr/{target}/read-links/",
                json={"expires_in": 600},
                headers=headers,
                timeout=30,
            )
            assert asked.status_code == 404 or (not headers and asked.status_code == 401)
            assert asked.json()["code"] in ("not_found", "not_authenticated")
        assert not ReadLink.objects.exists()

    link = _make_link(private, zarr_id)
    url = link["url"]
    secret = url.rstrip("/").rsplit("/", 1)[1]
    assert url == f"{live.url}/links/{secret}/"
    # Standard readers append keys to it, with no credentials.
    whole, _ = read_tensorstore(url + "v3/", "v3")
    np.testing.assert_array_equal(whole, expected["v3"])
    whole, _ = read_zarr_http(url + "v2")
    np.testing.assert_array_equal(whole, expected["v2"])
    chunk = requests.get(url + "v2/.zarray", timeout=30)
    assert chunk.status_code == 200 and chunk.headers["Access-Control-Allow-Origin"] == "*"
    # Never kept by a shared cache: a revocation must be seen at once.
    assert "private" in chunk.headers["Cache-Control"]
    again = requests.get(url + "v2/.zarray", headers={"If-None-Match": chunk.headers["ETag"]})
    assert again.status_code == 304
    assert requests.get(url, headers={"Accept": "application/json"}, timeout=30).ok
    # It writes nothing and reaches no API.
    for method in ("PUT", "POST", "DELETE", "PATCH"):
        assert requests.request(method, url + "v2/.zarray", timeout=30).status_code == 405
    assert requests.get(url + "api/zarr/", timeout=30).status_code == 404
    assert requests.get(f"{live.url}/links/{'A' * 43}/v2/.zarray", timeout=30).status_code == 404

    # A stranger cannot revoke it; its owner can, and it is refused at once.
    gone = requests.delete(
        f"{live.url}/api/zarr/{zarr_id}/read-links/{link['id']}/",
        headers={"Authorization": f"Token {stranger}"},
        timeout=30,
    )
    assert gone.status_code == 404
    assert requests.get(url + "v2/.zarray", timeout=30).status_code == 200
    revoked = live.api("DELETE", f"/api/zarr/{zarr_id}/read-links/{link['id']}/")
    assert revoked.status_code == 204
    refused = requests.get(url + "v2/.zarray", timeout=30)
    assert refused.status_code == 404 and secret not in refused.text

    # Expiry: a link whose time is past (set in the database every process reads).
    later = _make_link(private, zarr_id, expires_in=60)
    assert requests.get(later["url"] + "v2/.zarray", timeout=30).status_code == 200
    ReadLink.objects.filter(pk=later["id"]).update(expires=timezone.now() - timedelta(seconds=1))
    assert requests.get(later["url"] + "v2/.zarray", timeout=30).status_code == 404

    logged = service_log.getvalue()
    assert "/links/" in logged  # the reads were logged,
    for made in (secret, later["url"].rstrip("/").rsplit("/", 1)[1]):
        assert made not in logged  # never their secrets


def test_a_link_to_a_version_reads_the_version(live: Live, tmp_path: Path) -> None:
    ensure_storage_versioning()
    root = tmp_path / "arrays.zarr"
    published = write_arrays(root)
    zarr_id = upload_archive(live, root, "loose")
    asset = {"path": "arrays.zarr", "zarr_id": zarr_id}
    assert live.api("POST", f"/api/dandisets/{live.dandiset}/versions/draft/assets/", json=asset)
    response = live.api("POST", f"/api/dandisets/{live.dandiset}/versions/draft/publish/")
    assert response.status_code == 201, response.content
    array = zarr.open_array(LocalStore(root), path="v2", mode="r+")
    array[WRITTEN] = np.asarray(array[WRITTEN]) * 3 + 11
    with live.client() as client:
        assert client.upload(root, zarr_id=zarr_id).ok

    # An open archive too: only its owners make links; a stranger gets a missing archive's 404.
    stranger, _ = user_with_dandiset(live.url, "open-stranger", "theirs")
    asked = requests.post(
        f"{live.url}/api/zarr/{zarr_id}/read-links/",
        json={"expires_in": 600},
        headers={"Authorization": f"Token {stranger}"},
        timeout=30,
    )
    assert asked.status_code == 404 and asked.json()["code"] == "not_found"
    version_link = _make_link(live, zarr_id, version=1)
    draft_link = _make_link(live, zarr_id)
    whole, _ = read_zarr_http(version_link["url"] + "v2")
    np.testing.assert_array_equal(whole, published["v2"])
    whole, _ = read_zarr_http(draft_link["url"] + "v2")
    np.testing.assert_array_equal(whole, array[...])
    assert not np.array_equal(published["v2"], array[...])
