"""When the storage volume is full, ``dandizarr serve`` answers a PUT with S3's error shape and
507 (nothing stored), and the client stops after bounded tries with a message that names the
cause (it used to get an HTML 500 and try hundreds of times). A real full filesystem: a 1 MiB
tmpfs as the local backend's storage directory (root may mount one; skipped where it may
not, failed under CI)."""

from __future__ import annotations

import base64
import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.ci import skip_here_fail_in_ci
from tests.support.processes import Processes

CLI = str(Path(sys.executable).parent / "dandizarr")


@pytest.fixture
def tiny_volume(processes: Processes, tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "storage"
    mount.mkdir()
    done = processes.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        message = f"cannot mount a tmpfs here: {done.stderr.strip()}"
        skip_here_fail_in_ci(message)
    try:
        yield mount
    finally:
        processes.run(["umount", "-l", str(mount)], check=False)


def test_a_full_volume_is_a_507_and_the_client_says_so(
    processes: Processes, tmp_path: Path, tiny_volume: Path
) -> None:
    source = tmp_path / "big.zarr"
    source.mkdir()
    for i in range(6):
        (source / f"chunk{i}").write_bytes(os.urandom(400_000))  # 2.4 MB into 1 MiB
    with processes.serve(tmp_path / "var", DANDIZARR_LOCAL_STORAGE_DIR=str(tiny_volume)) as (
        url,
        token,
    ):
        headers = {"Authorization": f"Token {token}"}
        dandiset = requests.post(
            f"{url}/api/dandisets/", json={"name": "full"}, headers=headers, timeout=30
        ).json()["identifier"]
        done = processes.run(
            [CLI, "upload", str(source), "--dandiset", dandiset],
            env={**os.environ, "DANDIZARR_URL": url, "DANDIZARR_TOKEN": token},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode != 0, done.stdout
        assert "storage is full (HTTP 507 InsufficientStorage" in done.stderr, done.stderr

        # The endpoint itself: S3's error shape, not an HTML 500.
        archive = requests.get(f"{url}/api/zarr/?dandiset={dandiset}", headers=headers).json()
        zarr_id = archive["results"][0]["zarr_id"]
        requests.delete(f"{url}/api/zarr/{zarr_id}/upload/", headers=headers, timeout=30)
        body = os.urandom(1_500_000)
        md5 = hashlib.md5(body).hexdigest()
        target = requests.post(
            f"{url}/api/zarr/{zarr_id}/upload/",
            json=[{"path": "huge", "etag": md5}],
            headers=headers,
            timeout=30,
        ).json()[0]
        refused = requests.put(
            target["upload_url"],
            data=body,
            headers={"Content-MD5": base64.b64encode(bytes.fromhex(md5)).decode()},
            timeout=60,
        )
        assert refused.status_code == 507
        assert refused.headers["Content-Type"] == "application/xml"
        assert "<Code>InsufficientStorage</Code>" in refused.text
    # Nothing half-written is left behind.
    assert not [p for p in tiny_volume.rglob("*") if p.is_file() and "huge" in p.name]
