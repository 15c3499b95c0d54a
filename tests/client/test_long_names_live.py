"""The longest name an archive accepts (dandizarr.objectstore.keys.MAX_SEGMENT_BYTES, 239 bytes of
UTF-8)
downloads too: the client's temporary files beside it have names of fixed length (a 239-byte
name's temporary name used to pass the filesystem's 255 bytes)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from dandizarr.objectstore.keys import MAX_SEGMENT_BYTES
from tests.support.live_client import Service


def test_a_longest_name_uploads_and_downloads(service: Service, tmp_path: Path) -> None:
    longest = "é" * ((MAX_SEGMENT_BYTES - 1) // 2) + "x"  # two bytes each, and one
    assert len(longest.encode()) == MAX_SEGMENT_BYTES
    source = tmp_path / "long.zarr"
    (source / "d").mkdir(parents=True)
    (source / "d" / longest).write_bytes(b"a long name")
    (source / longest).write_bytes(b"another")
    with service.client() as client:
        result = client.upload(source, dandiset=service.dandiset)
        assert result.ok, result.to_json()
        copy = tmp_path / "copy.zarr"
        downloaded = client.download(result.zarr_id, copy)
        assert downloaded.ok, downloaded
    for path in ("d/" + longest, longest):
        assert (
            hashlib.md5((copy / path).read_bytes()).digest()
            == hashlib.md5((source / path).read_bytes()).digest()
        )
    assert not [p for p in copy.rglob(".dandizarr-*")]
