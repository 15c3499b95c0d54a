"""``dask.array.to_zarr`` through ``ArchiveStore`` on a ``distributed`` cluster of two worker
processes into one write session, one commit (docs/writing.md): the checksum the commit returns
is the one the same writes give written locally, every chunk written by a worker process; and
xarray's ``to_zarr``, then an ``append_dim`` and a ``region`` write, a session each. Run
against the tests' live service (tests/client/test_store_dask.py), ``dandizarr serve``
(tests/dandizarr/test_serve_live.py) and the production shape
(tests/production/test_versions_model_live.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr
import zarr
from distributed import Client, LocalCluster
from zarr.storage import LocalStore

from dandizarr.client.store import ArchiveStore
from tests.support.api import expected_checksum


def local_checksum(root: Path) -> str:
    files = {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
    return expected_checksum(files)


def dask_write_and_commit(url: str, zarr_id: str, token: str, work: Path) -> str:
    """Write an array through two Dask worker processes, commit once, read it back; the
    commit's checksum (asserted equal to the local one)."""
    x = da.arange(96 * 80, dtype="int32", chunks=16 * 80).reshape(96, 80).rechunk((16, 20))
    store = ArchiveStore(url, zarr_id, token=token, read_only=False)
    try:
        with (
            LocalCluster(
                n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            da.to_zarr(x, store, component="image", compute=True)
            # Each chunk was written by a worker process (none by this one).
            workers = client.run(lambda: __import__("os").getpid())
            assert len(set(workers.values())) == 2
        checksum = store.commit()
    finally:
        store.close()
    da.to_zarr(x, LocalStore(work / "local.zarr"), component="image", compute=True)
    assert checksum == local_checksum(work / "local.zarr")
    reader = ArchiveStore(url, zarr_id, token=token)
    try:
        read: Any = zarr.open_array(store=reader, path="image", mode="r")
        assert np.array_equal(read[:], x.compute())
    finally:
        reader.close()
    return checksum


def dataset(start: int, steps: int) -> xr.Dataset:
    t = np.arange(start, start + steps)
    values = np.arange(start * 12, (start + steps) * 12, dtype="float32").reshape(steps, 3, 4)
    return xr.Dataset(
        {"v": (("t", "y", "x"), values)},
        coords={"t": t, "y": [0.0, 1.0, 2.0], "x": [10, 20, 30, 40]},
        attrs={"title": "written through a session"},
    )


def xarray_writes_and_commits(url: str, zarr_id: str, token: str, work: Path) -> str:
    """``to_zarr``, an ``append_dim`` write and a ``region`` write into the existing array,
    each in a session of its own and committed; each commit's checksum asserted equal to the
    same writes' locally, and the dataset read back identical. The last checksum."""
    local = LocalStore(work / "xarray-local.zarr")
    steps: list[tuple[xr.Dataset, dict[str, Any]]] = [
        (dataset(0, 4), {"mode": "w"}),
        (dataset(4, 3), {"append_dim": "t"}),
    ]
    region = dataset(2, 2).drop_vars(["y", "x"])
    region["v"][:] = -1
    steps.append((region, {"region": {"t": slice(2, 4)}, "mode": "r+"}))
    checksum = ""
    for data, options in steps:
        store = ArchiveStore(url, zarr_id, token=token, read_only=False)
        try:
            data.chunk({"t": 2}).to_zarr(store, **options)
            data.chunk({"t": 2}).to_zarr(local, **options)
            checksum = store.commit()
        finally:
            store.close()
        assert checksum == local_checksum(work / "xarray-local.zarr")
    reader = ArchiveStore(url, zarr_id, token=token)
    try:
        written = xr.open_zarr(reader, consolidated=None).load()
    finally:
        reader.close()
    expected = xr.open_zarr(local, consolidated=None).load()
    xr.testing.assert_identical(written, expected)
    assert written.sizes["t"] == 7 and (written["v"][2:4] == -1).all()
    return checksum


def session_write_and_commit(url: str, zarr_id: str, token: str) -> str:
    """A session writes the first rows of ``image`` and commits; the checksum."""
    store = ArchiveStore(url, zarr_id, token=token, read_only=False)
    try:
        array: Any = zarr.open_array(store=store, path="image", mode="r+")
        array[:16, :16] = 9
        return store.commit()
    finally:
        store.close()
