"""The signing helpers on their own, and the store the settings build."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.conf import LazySettings

from dandizarr.objectstore import signing
from dandizarr.objectstore.local import LocalObjectStore
from dandizarr.objectstore.s3 import S3ObjectStore
from dandizarr_server.zarr_api.runtime.storage import get_store, reset_store_cache

SECRET = "test-secret"
MD5 = "0123456789abcdef0123456789abcdef"


def query_of(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query))


def test_verify_accepts_what_presigned_url_signed() -> None:
    url = signing.presigned_url(
        "http://h/storage", SECRET, "PUT", "a/b", expires_in=60, md5_hex=MD5, now=1000
    )
    assert urlsplit(url).path == "/storage/a/b"
    verified = signing.verify(SECRET, "PUT", "a/b", query_of(url), now=1059)
    assert verified == signing.Verified(signing.Verdict.OK, MD5)


@pytest.mark.parametrize(
    ("secret", "method", "key", "now", "verdict"),
    [
        ("other-secret", "PUT", "a/b", 1000, signing.Verdict.BAD_SIGNATURE),
        (SECRET, "GET", "a/b", 1000, signing.Verdict.BAD_SIGNATURE),
        (SECRET, "PUT", "a/c", 1000, signing.Verdict.BAD_SIGNATURE),
        (SECRET, "PUT", "a/b", 1061, signing.Verdict.EXPIRED),
    ],
)
def test_verify_refuses(
    secret: str, method: str, key: str, now: int, verdict: signing.Verdict
) -> None:
    url = signing.presigned_url(
        "http://h/storage", SECRET, "PUT", "a/b", expires_in=60, md5_hex=MD5, now=1000
    )
    assert signing.verify(secret, method, key, query_of(url), now=now).verdict is verdict


def test_verify_without_parameters() -> None:
    assert signing.verify(SECRET, "GET", "k", {}).verdict is signing.Verdict.MISSING
    assert (
        signing.verify(SECRET, "GET", "k", {"expires": "²", "signature": "x"}).verdict
        is signing.Verdict.MISSING
    )


def test_keys_are_percent_encoded_in_urls() -> None:
    url = signing.presigned_url("http://h/storage/", SECRET, "GET", "d/a b?#%é", expires_in=5)
    assert urlsplit(url).path == "/storage/d/a%20b%3F%23%25%C3%A9"


def test_get_store_is_built_once_and_rebuilt_when_settings_change(
    settings: LazySettings, tmp_path: Path
) -> None:
    settings.DANDIZARR_STORAGE = "local"
    settings.DANDIZARR_LOCAL_STORAGE_DIR = tmp_path / "one"
    settings.PUBLIC_URL = "http://public.example"
    first = get_store()
    assert isinstance(first, LocalObjectStore)
    assert get_store() is first
    assert first.presigned_get_url("k", expires_in=5).startswith("http://public.example/storage/k?")
    settings.DANDIZARR_LOCAL_STORAGE_DIR = tmp_path / "two"
    second = get_store()
    assert second is not first
    assert isinstance(second, LocalObjectStore)
    assert second.root == (tmp_path / "two").resolve()
    reset_store_cache()
    assert get_store() is not second


def test_get_store_builds_s3_with_a_presign_endpoint(
    settings: LazySettings, moto_server: str, s3_bucket: str
) -> None:
    settings.DANDIZARR_STORAGE = "s3"
    settings.DANDIZARR_S3_BUCKET = s3_bucket
    settings.DANDIZARR_S3_ENDPOINT_URL = moto_server
    settings.DANDIZARR_S3_PRESIGN_ENDPOINT_URL = "http://localhost:9000"
    settings.DANDIZARR_S3_ACCESS_KEY_ID = "testing"
    settings.DANDIZARR_S3_SECRET_ACCESS_KEY = "testing"
    store = get_store()
    assert isinstance(store, S3ObjectStore)
    # Requests go to the service-side endpoint ...
    store.put("k", b"x")
    assert store.get("k") == b"x"
    # ... URLs name the client-side one.
    url = store.presigned_put_url("k", MD5, expires_in=60)
    assert url.startswith(f"http://localhost:9000/{s3_bucket}/k?")
    assert "content-md5" in query_of(url)["X-Amz-SignedHeaders"]
    assert store.presigned_get_url("k", expires_in=60).startswith("http://localhost:9000/")
