"""Standard readers read an archive version as it was published, after the draft changed:
tensorstore and zarr-python through ``/zarr/{version_id}/``, zarr-python over fsspec fed the
version's manifest, and ``dandizarr download`` of the version's id. Loose and client-packed
archives, on S3 (moto) and the local backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.readers import (
    ARRAYS,
    WRITTEN,
    Live,
    read_tensorstore,
    read_zarr_http,
    read_zarr_manifest,
    upload_archive,
    write_arrays,
)


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("kind", ["loose", "packed"])
def test_readers_read_a_version_after_the_draft_changed(
    live: Live, kind: str, tmp_path: Path
) -> None:
    ensure_storage_versioning()  # as ensure_bucket sets a bucket up
    root = tmp_path / "arrays.zarr"
    published = write_arrays(root)
    published_files = files_of(root)
    zarr_id = upload_archive(live, root, kind)
    asset = {"path": "arrays.zarr", "zarr_id": zarr_id}
    assert live.api("POST", f"/api/dandisets/{live.dandiset}/versions/draft/assets/", json=asset)
    response = live.api("POST", f"/api/dandisets/{live.dandiset}/versions/draft/publish/")
    assert response.status_code == 201, response.content
    (version,) = live.api("GET", f"/api/zarr/{zarr_id}/versions/").json()["results"]

    # The draft moves on: every written chunk of every array rewritten.
    store = LocalStore(root)
    draft = {}
    for name in ARRAYS:
        array = zarr.open_array(store, path=name, mode="r+")
        array[WRITTEN] = array[WRITTEN] * 3 + 11
        draft[name] = array[...]
    with live.client() as client:
        report = client.upload(root, zarr_id=zarr_id)
        assert report.ok, report.to_json()

    for target, want in ((version["zarr_id"], published), (zarr_id, draft)):
        manifest_url = f"{live.url}/api/zarr/{target}/manifest.json"
        for name in ARRAYS:
            url = f"{live.url}/zarr/{target}/{name}"
            reads = {
                "tensorstore": read_tensorstore(url + "/", name),
                "zarr-python http": read_zarr_http(url),
                "zarr-python manifest": read_zarr_manifest(manifest_url, name),
            }
            for reader, (whole, _part) in reads.items():
                np.testing.assert_array_equal(whole, want[name], err_msg=f"{reader} {target}")
    assert not np.array_equal(published["v3s"], draft["v3s"])

    # dandizarr download of the version: its files exactly, its checksum verified.
    with live.client() as client:
        result = client.download(version["zarr_id"], tmp_path / "got")
        assert result.ok, result
    assert files_of(tmp_path / "got") == published_files
