"""The client against the production shape: the service hands tree updates to a real Celery
worker (Redis), so ``complete`` answers before the checksum is updated and the client has to
wait for ``checksum_status: complete`` before it can prove the checksum."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from dandizarr.client import UploadResult
from dandizarr_server.zarr_api.models import Batch
from tests.support.celery_worker import Worker, needs_redis, tasks_to_worker
from tests.support.live_client import Service, local_checksum, make_tree

pytestmark = needs_redis


def test_upload_waits_for_the_workers_tree_updates_then_proves_the_checksum(
    service: Service, settings: Any, tmp_path: Path
) -> None:
    root = tmp_path / "w.zarr"
    files = make_tree(root, 30)
    outcome: dict[str, Any] = {}

    def upload() -> None:
        try:
            with service.client() as client:
                outcome["result"] = client.upload(root, dandiset=service.dandiset)
        except BaseException as error:  # reported by the test thread
            outcome["error"] = error

    with tasks_to_worker(settings) as env:
        uploading = threading.Thread(target=upload)
        uploading.start()
        # No worker yet: every batch is verified and left pending, and the client waits.
        deadline = time.monotonic() + 120
        # 30 files, 14 per batch: 3 batches.
        while Batch.objects.filter(state=Batch.State.PENDING).count() < 3:
            assert uploading.is_alive(), outcome
            assert time.monotonic() < deadline, "the batches never all completed"
            time.sleep(0.05)
        time.sleep(0.5)
        assert uploading.is_alive(), "the upload ended before its checksum was updated"
        with Worker(env):
            uploading.join(timeout=120)
    assert not uploading.is_alive()
    assert "error" not in outcome, outcome.get("error")
    result: UploadResult = outcome["result"]
    assert result.ok, result.to_json()
    assert (result.uploaded_files, result.batches) == (30, 3)
    assert result.server_checksum == local_checksum(root)
    assert service.archive(result.zarr_id)["checksum_status"] == "complete"
    assert service.remote_files(result.zarr_id).keys() == files.keys()
    # The worker applied all of them (in as few updates as it liked).
    assert not Batch.objects.filter(state=Batch.State.PENDING).exists()
