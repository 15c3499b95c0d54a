"""Dask and xarray write through ``ArchiveStore(..., read_only=False)`` (docs/writing.md):
``dask.array.to_zarr`` on a ``distributed`` cluster of two worker processes, each writing into
the one session through its own unpickled copy of the store, then one ``commit()``; xarray's
``to_zarr``, with ``append_dim`` and ``region`` writes into an existing array. Each commit's
checksum is the one the same writes give written locally."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr
import zarr
from distributed import Client, LocalCluster
from zarr.storage import LocalStore

from tests.support.api import expected_checksum
from tests.support.live_client import Service


def local_checksum(root: Path) -> str:
    files = {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
    return expected_checksum(files)


def test_dask_workers_in_two_processes_write_one_session(
    service: Service, archive: str, opened: Any, tmp_path: Path
) -> None:
    x = da.arange(96 * 80, dtype="int32", chunks=16 * 80).reshape(96, 80).rechunk((16, 20))
    store = opened(read_only=False)
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
    da.to_zarr(x, LocalStore(tmp_path / "local.zarr"), component="image", compute=True)
    assert checksum == local_checksum(tmp_path / "local.zarr")
    assert checksum == service.archive(archive)["checksum"]
    read: Any = zarr.open_array(store=opened(), path="image", mode="r")
    assert np.array_equal(read[:], x.compute())


def dataset(start: int, steps: int) -> xr.Dataset:
    t = np.arange(start, start + steps)
    values = np.arange(start * 12, (start + steps) * 12, dtype="float32").reshape(steps, 3, 4)
    return xr.Dataset(
        {"v": (("t", "y", "x"), values)},
        coords={"t": t, "y": [0.0, 1.0, 2.0], "x": [10, 20, 30, 40]},
        attrs={"title": "written through a session"},
    )


def test_xarray_writes_appends_and_region_writes(
    service: Service, archive: str, opened: Any, tmp_path: Path
) -> None:
    local = LocalStore(tmp_path / "local.zarr")
    steps: list[tuple[xr.Dataset, dict[str, Any]]] = [
        (dataset(0, 4), {"mode": "w"}),
        (dataset(4, 3), {"append_dim": "t"}),
    ]
    region = dataset(2, 2).drop_vars(["y", "x"])
    region["v"][:] = -1
    steps.append((region, {"region": {"t": slice(2, 4)}, "mode": "r+"}))
    for data, options in steps:
        store = opened(read_only=False)
        data.chunk({"t": 2}).to_zarr(store, **options)
        data.chunk({"t": 2}).to_zarr(local, **options)
        assert store.commit() == local_checksum(tmp_path / "local.zarr")
    written = xr.open_zarr(opened(), consolidated=None).load()
    expected = xr.open_zarr(local, consolidated=None).load()
    xr.testing.assert_identical(written, expected)
    assert written.sizes["t"] == 7 and (written["v"][2:4] == -1).all()
