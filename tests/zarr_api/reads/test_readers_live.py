"""Standard Zarr readers, with no dandizarr code, read every archive (issue #12): tensorstore
over the ``http`` kvstore and zarr-python over fsspec's HTTP file system, both through
``/zarr/{zarr_id}/``, and zarr-python over fsspec's reference file system fed the archive's
manifest, straight from storage. Loose, client-packed and server-converted archives, on S3
(moto) and on the local storage backend; arrays v2, v3 and v3 ``sharding_indexed``, partly
written (chunks that never existed read as the fill value)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.readers import (
    ARRAYS,
    KINDS,
    PARTIAL,
    Live,
    read_tensorstore,
    read_zarr_http,
    read_zarr_manifest,
    upload_archive,
    write_arrays,
)


@pytest.mark.parametrize("kind", KINDS)
def test_every_reader_reads_every_array_of_every_archive(
    live: Live, kind: str, tmp_path: Path
) -> None:
    root = tmp_path / "arrays.zarr"
    expected = write_arrays(root)
    zarr_id = upload_archive(live, root, kind)
    manifest_url = f"{live.url}/api/zarr/{zarr_id}/manifest.json"
    for name in ARRAYS:
        want = expected[name]
        # Never-written chunks are there to be read as fill values.
        assert (want == zarr.open_array(root / name).fill_value).any()
        url = f"{live.url}/zarr/{zarr_id}/{name}"
        reads = {
            "tensorstore /zarr/": read_tensorstore(url + "/", name),
            "zarr-python /zarr/": read_zarr_http(url),
            "zarr-python manifest": read_zarr_manifest(manifest_url, name),
        }
        for reader, (whole, part) in reads.items():
            np.testing.assert_array_equal(whole, want, err_msg=f"{reader} {kind} {name}")
            np.testing.assert_array_equal(part, want[PARTIAL], err_msg=f"{reader} {kind} {name}")
