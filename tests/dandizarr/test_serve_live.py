"""``dandizarr serve`` as a user runs it (``make serve``): SQLite (IMMEDIATE transactions, WAL)
and the local object store under its data directory, tasks inline, Django's threaded server
(TCP_NODELAY). A client uploads into it in many batches and downloads the archive back; a
write session commits beside an upload, Dask's two worker processes write one session, and
xarray writes, appends and writes a region."""

from __future__ import annotations

import asyncio
from pathlib import Path

from zarr.core.buffer import default_buffer_prototype

from dandizarr.client import DandizarrClient
from dandizarr.client.store import ArchiveStore
from tests.support.api import expected_checksum
from tests.support.dask_writes import dask_write_and_commit, xarray_writes_and_commits
from tests.support.live_client import local_checksum, make_tree
from tests.support.processes import Processes


def test_upload_into_the_embedded_service_and_back(processes: Processes, tmp_path: Path) -> None:
    root = tmp_path / "e.zarr"
    files = make_tree(root, 60)
    with (
        processes.serve(
            tmp_path / "var", DANDIZARR_BATCH_LIMIT="9", DANDIZARR_OPEN_BATCH_FILE_LIMIT="18"
        ) as (url, token),
        DandizarrClient(url, token, jobs=8) as client,
    ):
        dandiset = client.create_dandiset("embedded")["identifier"]
        result = client.upload(root, dandiset=dandiset)
        assert result.ok, result.to_json()
        # 9 files per request, 18 per batch (a start and an add each): 4 batches.
        assert (result.uploaded_files, result.batches) == (60, 4)
        assert result.server_checksum == local_checksum(root)
        downloaded = client.download(result.zarr_id, tmp_path / "copy")
        # Writing straight in on `make serve` (SQLite, local storage, tasks in a thread): a
        # session reads the draft as it began while an upload changes it, then commits.
        first = sorted(files)[0]
        original = (root / first).read_bytes()
        store = ArchiveStore(url, result.zarr_id, token=token, read_only=False)
        try:
            asyncio.run(_set(store, "written/by/session", b"staged"))
            (root / first).write_bytes(b"changed by an upload meanwhile")
            again = client.upload(root, zarr_id=result.zarr_id)
            assert again.ok and again.uploaded_files == 1, again.to_json()
            assert asyncio.run(_get(store, first)) == original
            assert asyncio.run(_get(store, "written/by/session")) == b"staged"
            committed = store.commit()
        finally:
            store.close()
        tree = {p: (root / p).read_bytes() for p in files} | {"written/by/session": b"staged"}
        assert committed == expected_checksum(tree)
        # Dask's two worker processes write one session on `make serve` too, one commit.
        dask_zarr = client.create_archive(dandiset, "dask.zarr").zarr_id
        dask_write_and_commit(url, dask_zarr, token, tmp_path)
        # xarray: to_zarr, then an append_dim and a region write, a session each.
        xarray_zarr = client.create_archive(dandiset, "xarray.zarr").zarr_id
        xarray_writes_and_commits(url, xarray_zarr, token, tmp_path)
    assert downloaded.ok and downloaded.local_checksum == result.server_checksum
    for path in files:
        if path != first:
            assert (tmp_path / "copy" / path).read_bytes() == (root / path).read_bytes()
    assert (tmp_path / "copy" / first).read_bytes() == original


async def _set(store: ArchiveStore, key: str, data: bytes) -> None:
    await store.set(key, default_buffer_prototype().buffer.from_bytes(data))


async def _get(store: ArchiveStore, key: str) -> bytes | None:
    found = await store.get(key, default_buffer_prototype())
    return None if found is None else found.to_bytes()
