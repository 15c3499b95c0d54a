"""The client on SeaweedFS only: a real S3 server that enforces URL expiry (moto does not).
The client's key live tests (upload, resume, download, ``--pack`` upload and download of
sharded archives) run on SeaweedFS too, by their ``s3_servers`` marker in their own modules."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from dandizarr.client.progress import NullProgress
from tests.support.live_client import Service
from tests.support.sharded_client import tree_of, upload_packed, write_archive


class SlowStart(NullProgress):
    """Takes ``delay`` seconds between the listing and the first download (a long queue)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def start(self, total_files: int, total_bytes: int | None) -> None:
        time.sleep(self.delay)


@pytest.mark.s3_servers("seaweedfs")
def test_expired_listing_urls_are_asked_for_again(
    service: Service, tmp_path: Path, settings: Any
) -> None:
    """The listing's URLs have expired by the time the files are fetched (storage refuses
    them, 403), so each file is located again and fetched by its byte range."""
    files = write_archive(tmp_path / "image.zarr")
    zarr_id = upload_packed(service, tmp_path / "image.zarr")["zarr_id"]
    settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS = 2
    with service.client() as client:
        listed = next(
            f for f in client.iter_files(zarr_id, "0", urls=True) if f.shard_offset is not None
        )
    assert listed.download_url is not None and listed.range_header() is not None
    time.sleep(3)
    assert requests.get(listed.download_url, timeout=10).status_code == 403
    with service.client() as client:
        downloaded = client.download(zarr_id, tmp_path / "copy", progress=SlowStart(3))
    assert downloaded.ok and downloaded.retries >= len(files)
    assert tree_of(tmp_path / "copy") == files
    assert {p: hashlib.md5(b).hexdigest() for p, b in files.items()} == {
        p: d for p, (_, d) in service.remote_files(zarr_id).items()
    }
