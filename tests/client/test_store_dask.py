"""Dask and xarray write through ``ArchiveStore(..., read_only=False)`` (docs/writing.md):
``dask.array.to_zarr`` on a ``distributed`` cluster of two worker processes, each writing into
the one session through its own unpickled copy of the store, then one ``commit()``; xarray's
``to_zarr``, with ``append_dim`` and ``region`` writes into an existing array. Each commit's
checksum is the one the same writes give written locally."""

from __future__ import annotations

from pathlib import Path

from tests.support.dask_writes import dask_write_and_commit, xarray_writes_and_commits
from tests.support.live_client import Service


def test_dask_workers_in_two_processes_write_one_session(
    service: Service, archive: str, tmp_path: Path
) -> None:
    checksum = dask_write_and_commit(service.url, archive, service.token, tmp_path)
    assert checksum == service.archive(archive)["checksum"]


def test_xarray_writes_appends_and_region_writes(
    service: Service, archive: str, tmp_path: Path
) -> None:
    checksum = xarray_writes_and_commits(service.url, archive, service.token, tmp_path)
    assert checksum == service.archive(archive)["checksum"]
