"""The presigned-URL contract, for stores whose URLs an HTTP server answers."""

from __future__ import annotations

from typing import ClassVar

import pytest
import requests

from dandizarr.objectstore.base import (
    ObjectInfo,
    ObjectStore,
)
from dandizarr.objectstore.digests import content_md5_header
from dandizarr.testing.store_contract.support import (
    DIGITS,
    ContractBase,
    md5,
)


class PresignedURLContract(ContractBase):
    """Presigned URLs, for stores whose URLs an HTTP server answers (S3; the local backend
    with the web app's storage view)."""

    # What a GET of a missing key's URL answers (moto: 403 for a URL with response-header
    # overrides; S3 and SeaweedFS: 404).
    missing_get_status: ClassVar[int] = 404

    def put_key(self, store: ObjectStore, key: str, md5_hex: str) -> str:
        """A key the store takes a presigned PUT at (the local endpoint takes only keys an
        upload batch expects: its test class overrides this)."""
        return key

    @pytest.mark.parametrize("path", ["up/file.bin", "up/naïve name +%?#.bin"])
    def test_presigned_put_with_content_md5(self, store: ObjectStore, path: str) -> None:
        body = f"uploaded through a presigned URL to {path}".encode()
        key = self.put_key(store, path, md5(body))
        url = store.presigned_put_url(key, md5(body), expires_in=60)
        response = requests.put(
            url, data=body, headers={"Content-MD5": content_md5_header(md5(body))}, timeout=30
        )
        assert response.status_code == 200, response.text
        assert response.headers["ETag"].strip('"') == md5(body)
        assert store.head(key) == ObjectInfo(key, len(body), md5(body))
        assert store.get(key) == body

    def test_presigned_get_with_range(self, store: ObjectStore) -> None:
        store.put("down/digits", DIGITS)
        url = store.presigned_get_url("down/digits", expires_in=60)
        whole = requests.get(url, timeout=30)
        assert whole.status_code == 200
        assert whole.content == DIGITS
        assert whole.headers["ETag"].strip('"') == md5(DIGITS)
        part = requests.get(url, headers={"Range": "bytes=2-5"}, timeout=30)
        assert part.status_code == 206
        assert part.content == b"2345"
        assert part.headers["Content-Range"] == "bytes 2-5/10"
        suffix = requests.get(url, headers={"Range": "bytes=-3"}, timeout=30)
        assert suffix.status_code == 206
        assert suffix.content == b"789"
        beyond = requests.get(url, headers={"Range": "bytes=10-"}, timeout=30)
        assert beyond.status_code == 416
        missing = store.presigned_get_url("down/missing", expires_in=60)
        assert requests.get(missing, timeout=30).status_code == self.missing_get_status

    @pytest.mark.parametrize("uploaded_type", ["text/html", "image/svg+xml"])
    def test_presigned_get_serves_user_bytes_as_an_inert_attachment(
        self, store: ObjectStore, uploaded_type: str
    ) -> None:
        """Whatever type the uploader gave, a storage URL's reply is bytes to save, never a
        page: the local endpoint sets it, S3 URLs carry it as signed response-header overrides."""
        store.put("down/evil.html", b"<script>parent.pwned=1</script>", content_type=uploaded_type)
        url = store.presigned_get_urls(["down/evil.html"], expires_in=60)[0]
        for signed in (url, store.presigned_get_url("down/evil.html", expires_in=60)):
            response = requests.get(signed, timeout=30)
            assert response.status_code == 200
            assert response.content == b"<script>parent.pwned=1</script>"
            assert response.headers["Content-Type"] == "application/octet-stream"
            assert response.headers["Content-Disposition"] == "attachment"
