"""``dandizarr download`` of sharded archives (``upload --pack``): each packed file is a byte
range of its shard object, and every file's URL comes from the paged listing (no request to
the service per file). Arrays written by zarr-python: an OME-Zarr-like pyramid of 4-D uint16
zstd levels (nested chunk keys) beside arrays of other chunk shapes, v2 and v3."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

from tests.support.live_client import Service
from tests.support.sharded_client import tree_of, upload_packed, write_archive


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_download_and_resume_of_a_sharded_archive(service: Service, tmp_path: Path) -> None:
    files = write_archive(tmp_path / "image.zarr")
    assert any(path.startswith("0/1/1/0/") for path in files)  # nested keys, 4-D
    result = upload_packed(service, tmp_path / "image.zarr")
    zarr_id = result["zarr_id"]

    dest = tmp_path / "copy.zarr"
    done = service.cli("download", zarr_id, str(dest))
    assert done.returncode == 0, done.stderr
    assert tree_of(dest) == files
    read_back = zarr.open_group(LocalStore(dest), mode="r")
    np.testing.assert_array_equal(read_back["2"][:], zarr.open_group(tmp_path / "image.zarr")["2"])

    # Resume: missing files and a damaged one are fetched again, the rest kept.
    shutil.rmtree(dest / "1")
    (dest / "labels" / "0.0").unlink()
    damaged = dest / "0" / "1" / "1" / "0" / "1"
    damaged.write_bytes(b"\0" * damaged.stat().st_size)
    refetched = 1 + 1 + sum(1 for p in files if p.startswith("1/"))
    status, again = service.cli_json("download", zarr_id, str(dest))
    assert status == 0 and again["ok"], again
    assert (again["downloaded_files"], again["skipped_files"]) == (
        refetched,
        len(files) - refetched,
    )
    assert tree_of(dest) == files


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_download_asks_the_service_per_page_not_per_file(service: Service, tmp_path: Path) -> None:
    files = write_archive(tmp_path / "image.zarr")
    zarr_id = upload_packed(service, tmp_path / "image.zarr")["zarr_id"]
    seen: list[str] = []
    with service.client() as client:
        client.api_session.hooks["response"].append(
            lambda response, **_: seen.append(response.request.path_url)
        )
        downloaded = client.download(zarr_id, tmp_path / "copy")
    assert downloaded.ok and downloaded.downloaded_files == len(files)
    assert tree_of(tmp_path / "copy") == files
    file_requests = [p for p in seen if "/tree/" in p]
    assert file_requests and all("recursive=true" in p for p in file_requests), seen
    assert len(seen) <= 3, seen  # the archive, one page of files (and a retry at most)
