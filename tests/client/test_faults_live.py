"""Storage that misbehaves (``tests.support.flaky_storage``, the ``flaky`` fixture): transient
errors are retried, a refused URL is replaced, storage that keeps failing stops the upload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dandizarr.client import ClientError
from dandizarr_server.zarr_api.edge.echo import LISTED_ITEMS
from tests.support.flaky_storage import DROP, FlakyStorage
from tests.support.live_client import Service, make_tree


def test_transient_storage_errors_are_retried(
    service: Service, flaky: FlakyStorage, tree: tuple[Path, dict[str, str]]
) -> None:
    root, files = tree
    flaky.put_failures = [503, 500, 429, DROP, 502]
    with service.client() as client:
        result = client.upload(root, dandiset=service.dandiset)
    assert result.ok, result
    assert flaky.failed_puts == 5
    assert result.retries >= 5
    assert result.batch_restarts == 0
    assert result.uploaded_files == len(files) == len(service.remote_files(result.zarr_id))


def test_a_refused_url_is_replaced_by_starting_the_batch_again(
    service: Service, flaky: FlakyStorage, tree: tuple[Path, dict[str, str]]
) -> None:
    root, files = tree
    flaky.expire_first_put_of = {"zarr.json"}
    with service.client() as client:
        result = client.upload(root, dandiset=service.dandiset)
    assert result.ok, result
    assert flaky.failed_puts == 1 and result.batch_restarts == 1
    assert service.remote_files(result.zarr_id).keys() == files.keys()


def test_storage_that_keeps_failing_stops_the_upload_and_cancels_its_batch(
    service: Service, flaky: FlakyStorage, tree: tuple[Path, dict[str, str]]
) -> None:
    root, _ = tree
    flaky.always_fail_puts = 503
    with service.client() as client, pytest.raises(ClientError, match="kept failing"):
        client.upload(root, dandiset=service.dandiset, name="failing.zarr")
    with service.client() as client:
        archive = client.find_archive(service.dandiset, "failing.zarr")
        assert archive is not None
        assert not client.has_open_batch(archive.zarr_id)
        assert archive.file_count == 0
    assert not list(service.state_dir.glob("*.json"))
    # Once storage recovers, the same command finishes the job.
    flaky.always_fail_puts = None
    with service.client() as client:
        result = client.upload(root, dandiset=service.dandiset, name="failing.zarr")
    assert result.ok and result.zarr_id == archive.zarr_id


def test_download_through_flaky_storage_retries_and_verifies(
    service: Service, flaky: FlakyStorage, tree: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, files = tree
    with service.client() as client:
        uploaded = client.upload(root, dandiset=service.dandiset)
    flaky.get_failures = [503, DROP, 500]
    with service.client() as client:
        downloaded = client.download(uploaded.zarr_id, tmp_path / "copy")
    assert not flaky.get_failures and downloaded.retries >= 3
    assert downloaded.ok and downloaded.local_checksum == uploaded.server_checksum
    assert all((tmp_path / "copy" / p).read_bytes() == (root / p).read_bytes() for p in files)


def test_files_storage_lost_are_sent_again_however_many(
    service: Service, flaky: FlakyStorage, settings: Any, tmp_path: Path
) -> None:
    """Storage acknowledged every PUT of a batch and kept none. Completing names the missing
    files, as many as an error names (edge/echo.py's LISTED_ITEMS, with ``missing_count``):
    the client sends those again and completes again until none is missing."""
    count = 2 * LISTED_ITEMS + 50
    settings.DANDIZARR_BATCH_LIMIT = settings.DANDIZARR_OPEN_BATCH_FILE_LIMIT = count
    root = tmp_path / "lost.zarr"
    files = make_tree(root, count)
    flaky.lose_puts = count
    with service.client() as client:
        result = client.upload(root, dandiset=service.dandiset)
    assert result.ok, result
    assert flaky.lose_puts == 0 and len(flaky.puts) == 2 * count
    assert service.remote_files(result.zarr_id).keys() == files.keys()
