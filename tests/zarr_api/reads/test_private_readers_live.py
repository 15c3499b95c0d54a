"""A private (embargoed) archive is read by the standard readers with a token header, and by no
one without: tensorstore's ``http`` kvstore and zarr-python over fsspec's HTTP file system
through ``/zarr/``, and zarr-python over the manifest (fetched with the header; its storage
URLs are short-lived presigned ones, never a public bucket's)."""

from __future__ import annotations

from pathlib import Path

import fsspec
import numpy as np
import pytest
import requests
import tensorstore as ts
import zarr
from zarr.storage import FsspecStore

from tests.support.readers import Live, upload_archive, write_arrays


@pytest.fixture
def private_live(live: Live) -> Live:
    created = live.api("POST", "/api/dandisets/?embargo=true", json={"name": "private readers"})
    assert created.status_code == 201, created.text
    assert created.json()["embargo_status"] == "EMBARGOED"
    return Live(live.url, live.token, created.json()["identifier"], live.backend)


def test_readers_with_a_token_read_a_private_archive(private_live: Live, tmp_path: Path) -> None:
    root = tmp_path / "arrays.zarr"
    expected = write_arrays(root)
    zarr_id = upload_archive(private_live, root, "loose")
    header = {"Authorization": f"Token {private_live.token}"}
    url = f"{private_live.url}/zarr/{zarr_id}"

    spec = {"driver": "zarr3", "kvstore": {"driver": "http", "base_url": f"{url}/v3/"}}
    with pytest.raises(ValueError, match=r"404|NOT_FOUND|not found"):
        ts.open(spec, read=True).result()
    spec["kvstore"]["headers"] = [f"Authorization: Token {private_live.token}"]  # type: ignore[index]
    np.testing.assert_array_equal(ts.open(spec, read=True).result().read().result(), expected["v3"])

    with pytest.raises(FileNotFoundError):
        zarr.open_array(f"{url}/v2", mode="r")
    array = zarr.open_array(f"{url}/v2", mode="r", storage_options={"headers": header})
    np.testing.assert_array_equal(array[...], expected["v2"])

    manifest_url = f"{private_live.url}/api/zarr/{zarr_id}/manifest.json"
    assert requests.get(manifest_url, timeout=30).status_code == 404
    manifest = requests.get(manifest_url, headers=header, timeout=30)
    assert manifest.json()["dandizarr"]["expires"] is not None  # presigned, short-lived
    fs = fsspec.filesystem(
        "reference",
        fo=manifest_url,
        target_options={"headers": header},
        remote_protocol="http",
        remote_options={"asynchronous": True},
        asynchronous=True,
    )
    array = zarr.open_array(FsspecStore(fs, read_only=True, path="v3s"), mode="r")
    np.testing.assert_array_equal(array[...], expected["v3s"])
