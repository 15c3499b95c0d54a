"""``dandizarr serve`` as a user runs it (``make serve``): SQLite (IMMEDIATE transactions, WAL)
and the local object store under its data directory, tasks inline, Django's threaded server
(TCP_NODELAY). A client uploads into it in many batches and downloads the archive back."""

from __future__ import annotations

from pathlib import Path

from dandizarr.client import DandizarrClient
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
    assert downloaded.ok and downloaded.local_checksum == result.server_checksum
    for path in files:
        assert (tmp_path / "copy" / path).read_bytes() == (root / path).read_bytes()
