"""Dask and xarray write through ``ArchiveStore(..., read_only=False)`` (docs/writing.md):
``dask.array.to_zarr`` on a ``distributed`` cluster of two worker processes, each writing into
the one session through its own unpickled copy of the store, then one ``commit()``; xarray's
``to_zarr``, with ``append_dim`` and ``region`` writes into an existing array. Each commit's
checksum is the one the same writes give written locally."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from zarr.storage import LocalStore

from tests.support.dask_writes import dask_write_and_commit, local_checksum
from tests.support.live_client import Service


def test_dask_workers_in_two_processes_write_one_session(
    service: Service, archive: str, tmp_path: Path
) -> None:
    checksum = dask_write_and_commit(service.url, archive, service.token, tmp_path)
    assert checksum == service.archive(archive)["checksum"]


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
