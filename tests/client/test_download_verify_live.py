"""``dandizarr download`` trusts no byte it has not checked: an object changed in storage
behind the service's back is fetched, found wrong (its md5 is not the tree's), tried again,
reported by name and never written into the destination."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from dandizarr.client import ClientError
from dandizarr.client.progress import NullProgress
from tests.support.live_client import Service


class Messages(NullProgress):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_a_corrupted_object_is_reported_and_never_written(
    service: Service, tree: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, files = tree
    with service.client() as client:
        uploaded = client.upload(root, dandiset=service.dandiset)
        assert uploaded.ok
        victim = next(p for p in sorted(files) if (root / p).stat().st_size > 1)
        key = str(client.stat(uploaded.zarr_id, victim)["s3_key"])
    good = (root / victim).read_bytes()
    # Same size, other bytes: only the md5 tells.
    boto3.client(
        "s3",
        endpoint_url=service.moto,
        region_name="us-east-1",
        aws_access_key_id=service.access_key,
        aws_secret_access_key=service.secret_key,
    ).put_object(Bucket=service.bucket, Key=key, Body=bytes(b ^ 0xFF for b in good))

    dest = tmp_path / "copy"
    messages = Messages()
    with service.client() as client, pytest.raises(ClientError, match="1 files could not"):
        client.download(uploaded.zarr_id, dest, progress=messages)
    assert len(messages.lines) == 1 and messages.lines[0].startswith(f"{victim}: ")
    assert f"expected {len(good)} bytes with md5 {files[victim]}" in messages.lines[0]
    on_disk = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    assert on_disk == set(files) - {victim}  # no wrong bytes, no temporary files left
    assert all((dest / p).read_bytes() == (root / p).read_bytes() for p in on_disk)
