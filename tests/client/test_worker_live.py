"""The client against the production shape: the service hands tree updates to a real Celery
worker (Redis), so ``complete`` answers before the checksum is updated and the client has to
wait for ``checksum_status: complete`` before it can prove the checksum."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dandizarr.client import UploadResult
from dandizarr_server.zarr_api.models import Batch
from tests.support.celery_worker import Worker, needs_redis, tasks_to_worker
from tests.support.live_client import Service, local_checksum, make_tree
from tests.support.sharded_client import MakeUploader, write_v2

pytestmark = needs_redis


def upload_with_a_late_worker(
    settings: Any, run: Callable[[], UploadResult], waiting_until: Callable[[], bool], what: str
) -> UploadResult:
    """``run`` an upload in a thread with no worker to apply its batches until ``waiting_until``
    holds (the upload still running half a second later), then with one; its result."""
    outcome: dict[str, Any] = {}

    def upload() -> None:
        try:
            outcome["result"] = run()
        except BaseException as error:  # reported by the test thread
            outcome["error"] = error

    with tasks_to_worker(settings) as env:
        uploading = threading.Thread(target=upload)
        uploading.start()
        deadline = time.monotonic() + 120
        while not waiting_until():
            assert uploading.is_alive(), outcome
            assert time.monotonic() < deadline, what
            time.sleep(0.05)
        time.sleep(0.5)
        assert uploading.is_alive(), "the upload ended before its batches were applied"
        assert waiting_until()
        with Worker(env):
            uploading.join(timeout=120)
    assert not uploading.is_alive()
    assert "error" not in outcome, outcome.get("error")
    result: UploadResult = outcome["result"]
    assert result.ok, result.to_json()
    # The worker applied all of them (in as few updates as it liked).
    assert not Batch.objects.filter(state=Batch.State.PENDING).exists()
    return result


def test_upload_waits_for_the_workers_tree_updates_then_proves_the_checksum(
    service: Service, settings: Any, tmp_path: Path
) -> None:
    root = tmp_path / "w.zarr"
    files = make_tree(root, 30)

    def upload() -> UploadResult:
        with service.client() as client:
            return client.upload(root, dandiset=service.dandiset)

    # No worker yet: every batch (30 files, 14 per batch: 3) is verified and left pending, and
    # the client waits.
    result = upload_with_a_late_worker(
        settings,
        upload,
        lambda: Batch.objects.filter(state=Batch.State.PENDING).count() >= 3,
        "the batches never all completed",
    )
    assert (result.uploaded_files, result.batches) == (30, 3)
    assert result.server_checksum == local_checksum(root)
    assert service.archive(result.zarr_id)["checksum_status"] == "complete"
    assert service.remote_files(result.zarr_id).keys() == files.keys()


def test_pack_batches_are_sent_while_the_worker_applies_the_one_before(
    service: Service, uploader: MakeUploader, settings: Any, tmp_path: Path
) -> None:
    """The next pack batch is started and PUT while the one before waits for the worker (the
    server's member check and apply took as long as a start, and the upload waited for both);
    it is completed once that one is applied, so at most one of ours is ever pending."""
    root = tmp_path / "p.zarr"
    files = write_v2(root)
    pack = Batch.objects.filter(kind=Batch.Kind.PACK)

    def one_pending_one_open() -> bool:
        pending = pack.filter(state=Batch.State.PENDING).count()
        return pending == 1 and pack.filter(state=Batch.State.OPEN).exists()

    # 60 chunks in shards of 100 bytes (5 chunks), batches of 7 shards: 2 pack batches. No
    # worker yet: the first stays pending, and the second is opened and PUT meanwhile, and not
    # completed while the first is pending.
    result = upload_with_a_late_worker(
        settings,
        uploader(root, pack=True, shard_target_bytes=100).run,
        one_pending_one_open,
        "no pack batch was opened while one was pending",
    )
    assert (result.packed_files, result.pack_batches) == (60, 2)
    assert service.remote_files(result.zarr_id).keys() == files.keys()
