"""No response that carries an uploader's bytes may be rendered as a page of the service's
origin (dandizarr.objectstore.user_bytes): /zarr/ reads and listings, downloads (streamed, and the
storage URL a loose file's download redirects to), manifests, previews. The pages themselves
carry a strict Content-Security-Policy and are never framed.

The browser side of the same rule (an admin opening every link to a hostile upload) is
tests/dandizarr/test_user_content_browser_live.py."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from django.test import Client

from tests.support.api import Actor, upload

HOSTILE = {
    "evil.html": b"<html><script>fetch('/api/info/')</script></html>",
    "evil.svg": b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
    "a/.zattrs": b'{"x": "<script>alert(1)</script>"}',
    "a/.zarray": (
        b'{"zarr_format": 2, "shape": [2, 2], "chunks": [2, 2], "dtype": "|u1", "order": "C",'
        b' "compressor": null, "fill_value": 0, "filters": null}'
    ),
    "a/0.0": b"<br>",
}
SANDBOX = "sandbox; default-src 'none'"


def _inert(response: Any) -> None:
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Security-Policy"] == SANDBOX


@pytest.fixture
def hostile_archive(owner: Actor, dandiset: str, backend: str) -> str:
    created = owner.client.post("/api/zarr/", {"name": "hostile", "dandiset": dandiset})
    zarr_id = str(created.json()["zarr_id"])
    assert upload(owner.client, zarr_id, HOSTILE).status_code == 200
    return zarr_id


def test_zarr_reads_serve_a_fixed_type_never_a_page(hostile_archive: str) -> None:
    client = Client()
    for name in ("evil.html", "evil.svg"):
        for method in (client.get, client.head):
            response = method(f"/zarr/{hostile_archive}/{name}")
            assert response.status_code == 200
            assert response["Content-Type"] == "application/octet-stream"
            assert response["Content-Disposition"] == "attachment"
            _inert(response)
    metadata = client.get(f"/zarr/{hostile_archive}/a/.zattrs")
    assert metadata["Content-Type"] == "application/json"
    assert "Content-Disposition" not in metadata  # shown, as inert JSON
    _inert(metadata)
    ranged = client.get(f"/zarr/{hostile_archive}/evil.html", HTTP_RANGE="bytes=0-5")
    assert ranged.status_code == 206
    _inert(ranged)
    for listing in (
        client.get(f"/zarr/{hostile_archive}/"),
        client.get(f"/zarr/{hostile_archive}/", HTTP_ACCEPT="application/json"),
    ):
        _inert(listing)
    missing = client.get(f"/zarr/{hostile_archive}/nothing-here")
    assert missing.status_code == 404
    _inert(missing)


def test_a_download_is_an_inert_attachment_wherever_it_ends(hostile_archive: str) -> None:
    """Loose files redirect to a storage URL (local endpoint or S3 presigned GET), packed files
    are streamed: either way the bytes arrive as an attachment of a fixed type."""
    client = Client()
    response = client.get(f"/api/zarr/{hostile_archive}/files/evil.html?download=true")
    assert response.status_code == 302
    stored = requests.get(response["Location"], timeout=30)
    assert stored.content == HOSTILE["evil.html"]
    assert stored.headers["Content-Type"] == "application/octet-stream"
    assert stored.headers["Content-Disposition"] == "attachment"
    if "/storage/" in response["Location"]:  # served by us (S3 sends what the URL asks, only)
        assert stored.headers["X-Content-Type-Options"] == "nosniff"
        assert stored.headers["Content-Security-Policy"] == SANDBOX


def test_every_storage_url_the_api_hands_out_is_inert(hostile_archive: str) -> None:
    client = Client()
    entry = client.get(f"/api/zarr/{hostile_archive}/files/evil.svg").json()
    listed = client.get(f"/api/zarr/{hostile_archive}/files/?recursive=1&urls=1").json()
    urls = [entry["download_url"]] + [r["download_url"] for r in listed["results"]]
    for url in urls:
        response = requests.get(url, timeout=30)
        assert response.status_code == 200, url
        assert response.headers["Content-Type"] == "application/octet-stream"
        assert response.headers["Content-Disposition"] == "attachment"


def test_manifest_and_preview_are_inert(hostile_archive: str) -> None:
    client = Client()
    _inert(client.get(f"/api/zarr/{hostile_archive}/manifest.json"))
    preview = client.get(f"/archives/{hostile_archive}/preview.png?array=a")
    assert preview.status_code == 200, preview.content
    assert preview["Content-Type"] == "image/png"
    _inert(preview)


def test_pages_carry_a_strict_policy(hostile_archive: str) -> None:
    client = Client()
    for url in (
        "/",
        f"/archives/{hostile_archive}/",
        f"/archives/{hostile_archive}/tree/",
        "/api/docs/",
        "/admin/login/",
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        policy = response["Content-Security-Policy"]
        directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if " " in d.strip())
        assert directives["script-src"] == "'self'", url  # no inline script
        assert directives["frame-ancestors"] == "'none'", url
        assert directives["object-src"] == "'none'", url
        assert response["X-Frame-Options"] == "DENY"
        assert response["Referrer-Policy"] == "same-origin"
        assert response["X-Content-Type-Options"] == "nosniff"
        assert b"<script>" not in response.content  # every script is a file of ours


def test_cookies_are_secure_behind_https(settings: Any, transactional_db: None) -> None:
    """What the settings derive from an https public URL (dandizarr_server/settings.py)."""
    import importlib
    import os

    from dandizarr_server import settings as project_settings

    saved = os.environ.get("DANDIZARR_PUBLIC_URL")
    os.environ["DANDIZARR_PUBLIC_URL"] = "https://archive.example.org"
    try:
        secure = importlib.reload(project_settings)
        assert secure.SESSION_COOKIE_SECURE and secure.CSRF_COOKIE_SECURE
        assert secure.SECURE_HSTS_SECONDS > 0
    finally:
        if saved is None:
            del os.environ["DANDIZARR_PUBLIC_URL"]
        else:
            os.environ["DANDIZARR_PUBLIC_URL"] = saved
        plain = importlib.reload(project_settings)
    assert not plain.SESSION_COOKIE_SECURE
    assert plain.SESSION_COOKIE_HTTPONLY


def test_the_user_content_host_serves_user_bytes_only(settings: Any, hostile_archive: str) -> None:
    settings.USER_CONTENT_HOST = "usercontent.testserver"
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "usercontent.testserver"]
    settings.MIDDLEWARE = [
        "dandizarr_server.user_content_host.UserContentHostMiddleware",
        *settings.MIDDLEWARE,
    ]
    client = Client(HTTP_HOST="usercontent.testserver")
    assert client.get(f"/zarr/{hostile_archive}/evil.html").status_code == 200
    for url in ("/", "/admin/login/", "/api/info/", f"/archives/{hostile_archive}/"):
        response = client.get(url)
        assert response.status_code == 404, url
        assert "user-content host" in response.json()["detail"]
    assert Client().get("/api/info/").status_code == 200


def test_only_staff_or_the_machine_itself_see_the_token_path(
    admin_actor: Actor, transactional_db: None
) -> None:
    from django.conf import settings

    token_path = str(settings.DATA_DIR / "admin-token")
    assert token_path in Client(REMOTE_ADDR="127.0.0.1").get("/").content.decode()
    stranger = Client(REMOTE_ADDR="203.0.113.7").get("/").content.decode()
    assert token_path not in stranger and str(settings.DATA_DIR) not in stranger
    staff = Client(REMOTE_ADDR="203.0.113.7")
    staff.force_login(admin_actor.user)
    assert token_path in staff.get("/").content.decode()


def test_a_packed_download_is_served_as_zarr_reads_serve_it(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    """One way of serving bytes (views.file_responses): a packed file's download takes Range
    and conditional requests as /zarr/ does, as an attachment."""
    from tests.support.sharded import array_files, build_shards, upload_sharded

    files = array_files()
    zarr_id = upload_sharded(owner, dandiset, files)
    _, _, loose = build_shards(files)
    path, body = next((p, b) for p, b in sorted(files.items()) if p not in loose and len(b) > 4)
    client = Client()
    url = f"/api/zarr/{zarr_id}/files/{path}?download=true"
    whole = client.get(url)
    assert whole.status_code == 200 and b"".join(whole.streaming_content) == body
    assert whole["Content-Disposition"] == "attachment"
    part = client.get(url, HTTP_RANGE="bytes=1-3")
    assert part.status_code == 206 and b"".join(part.streaming_content) == body[1:4]
    assert client.get(url, HTTP_IF_NONE_MATCH=whole["ETag"]).status_code == 304
