"""Tree updates by a real Celery worker process on Redis, including one killed mid-update."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from dandizarr_server.zarr_api.models import Batch, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from tests.support.api import Actor, create_archive, upload
from tests.support.celery_worker import (
    VISIBILITY_TIMEOUT_SECONDS,
    Worker,
    needs_redis,
    tasks_to_worker,
)
from tests.support.processes import Processes
from tests.support.sharded import (
    array_files,
    build_shards,
    pack_upload,
    read_file,
)
from tests.support.tree_check import assert_tree_matches_storage

# The worker is another process on the test database: the test's rows must be committed.
pytestmark = [needs_redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker_env(
    processes: Processes, settings: Any, s3_storage: str, zarr_id: str
) -> Iterator[dict[str, str]]:
    """Send tasks to Redis on a queue of this test's own; yields a worker's environment (the
    test starts the Celery worker processes)."""
    with tasks_to_worker(settings) as env:
        yield env


def wait_for(condition: Any, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(message)


def pending(zarr_id: str) -> bool:
    return Batch.objects.filter(archive__zarr_id=zarr_id, state="pending").exists()


def test_worker_applies_batches_asynchronously(
    owner: Actor, zarr_id: str, worker_env: dict[str, str]
) -> None:
    files = {f"{i}/{j}": f"{i}{j}".encode() for i in range(5) for j in range(5)}
    response = upload(owner.client, zarr_id, files)
    assert response.status_code == 200
    # No worker yet: the update waits in the queue and the archive says so.
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["checksum_status"] == "pending"
    worker = Worker(worker_env)
    worker.start()
    try:
        wait_for(lambda: not pending(zarr_id), 60, "the worker never applied the batch")
    finally:
        worker.stop()
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert archive["checksum_status"] == "complete"
    assert archive["file_count"] == 25
    assert_tree_matches_storage(zarr_id)


def test_worker_killed_mid_update_is_finished_by_redelivery(
    owner: Actor, zarr_id: str, worker_env: dict[str, str], settings: Any
) -> None:
    settings.DANDIZARR_BATCH_LIMIT = 500
    # Many directories (331 listings to write), so the update takes long enough to be caught
    # half-way; 500 files (581) took twice the PUTs, listings and checks and tested the same.
    files = {f"{i % 10}/{i % 7}/{i}/c": str(i).encode() for i in range(250)}
    assert upload(owner.client, zarr_id, files).status_code == 200
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    store = get_store()
    worker = Worker(worker_env)
    worker.start()
    try:
        # Kill it as soon as it has written some, but not all, of the tree.
        wait_for(
            lambda: next(iter(store.list(archive.checksum_prefix, page_size=1)), None) is not None,
            60,
            "the worker never started writing the tree",
        )
        worker.kill()
        assert pending(zarr_id), "the update finished before the kill; nothing was tested"
        # A new worker gets the unacknowledged message once its visibility timeout has passed
        # (Redis restores it when a worker starts, or at its periodic check): start it after.
        time.sleep(VISIBILITY_TIMEOUT_SECONDS + 1)
        worker.start()
        wait_for(lambda: not pending(zarr_id), 90, "the killed update was never finished")
    finally:
        worker.stop()
    archive.refresh_from_db()
    assert archive.file_count == 250
    assert_tree_matches_storage(zarr_id)


def _chunked_array(n: int) -> dict[str, bytes]:
    """A zarr v2 array of n x n chunks of 16 bytes."""
    zarray = (
        f'{{"zarr_format": 2, "shape": [{4 * n}, {4 * n}], "chunks": [4, 4], "dtype": "|u1", '
        '"compressor": null, "fill_value": 0, "filters": null, "order": "C"}'
    ).encode()
    files = {"arr/.zarray": zarray}
    for i in range(n):
        for j in range(n):
            files[f"arr/{i}.{j}"] = bytes((i * 31 + j * 7 + k) % 256 for k in range(16))
    return files


def test_worker_verifies_and_applies_a_pack_batch(
    owner: Actor, dandiset: str, worker_env: dict[str, str]
) -> None:

    files = array_files()
    zarr_id = create_archive(owner, dandiset, "s.zarr")
    declarations, bodies, loose = build_shards(files)
    assert upload(owner.client, zarr_id, {p: files[p] for p in loose}).status_code == 200
    complete = pack_upload(owner, zarr_id, declarations, bodies)
    assert complete.status_code == 200, complete.content
    batch_url = f"/api/zarr/{zarr_id}/batches/{complete.json()['batch']}/"
    assert owner.client.get(batch_url).json()["state"] == "pending"
    worker = Worker(worker_env)
    worker.start()
    try:
        wait_for(lambda: not pending(zarr_id), 60, "the worker never applied the pack batch")
    finally:
        worker.stop()
    assert owner.client.get(batch_url).json()["state"] == "applied"
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["file_count"] == len(files)
    assert read_file(owner, zarr_id, "arr/8.1") == files["arr/8.1"]
    assert_tree_matches_storage(zarr_id)


def test_pack_killed_mid_way_loses_nothing_and_a_rerun_finishes(
    owner: Actor, zarr_id: str, worker_env: dict[str, str], settings: Any
) -> None:
    from dandizarr_server.zarr_api.models import ShardMember
    from dandizarr_server.zarr_api.services.audit import archive_audit

    settings.DANDIZARR_BATCH_LIMIT = 500
    files = _chunked_array(20)  # 400 chunks
    assert upload(owner.client, zarr_id, files).status_code == 200
    env = {**worker_env, "DANDIZARR_SHARD_TARGET_BYTES": str(4 * 16)}  # 4 chunks per shard
    worker = Worker(env)
    worker.start()
    try:
        wait_for(lambda: not pending(zarr_id), 60, "the upload was never applied")
        before = owner.client.get(f"/api/zarr/{zarr_id}/").json()
        assert owner.client.post(f"/api/zarr/{zarr_id}/pack/").status_code == 202
        wait_for(
            lambda: ShardMember.objects.filter(archive__zarr_id=zarr_id).count() >= 40,
            60,
            "the worker never started packing",
        )
        worker.kill()
        archive = ZarrArchive.objects.get(zarr_id=zarr_id)
        packed = ShardMember.objects.filter(archive=archive).count()
        assert archive.packing and 0 < packed < 400, f"{packed} packed: nothing was tested"
        # Half-way: every file still reads right, from its shard or its loose object.
        for path in ["arr/0.0", "arr/0.1", "arr/10.10", "arr/19.19", "arr/.zarray"]:
            assert read_file(owner, zarr_id, path) == files[path], path
        assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["checksum"] == before["checksum"]
        # A new worker gets the unacknowledged pack task (restored at its start once the
        # visibility timeout has passed) and finishes the job.
        time.sleep(4)
        worker.start()
        wait_for(
            lambda: not ZarrArchive.objects.get(zarr_id=zarr_id).packing,
            90,
            "the killed pack was never finished",
        )
    finally:
        worker.stop()
    after = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert (after["checksum"], after["file_count"]) == (before["checksum"], before["file_count"])
    assert ShardMember.objects.filter(archive__zarr_id=zarr_id).count() == 400
    assert sorted(get_store().list(f"zarr/{zarr_id}/"), key=lambda i: i.key)[0].key.endswith(
        ".zarray"
    )
    assert len(list(get_store().list(f"zarr/{zarr_id}/"))) == 1
    assert_tree_matches_storage(zarr_id)
    for path in ["arr/0.0", "arr/7.13", "arr/19.19"]:
        assert read_file(owner, zarr_id, path) == files[path], path
    # At most the shard being written at the kill is left over: the audit removes it.
    report = archive_audit(ZarrArchive.objects.get(zarr_id=zarr_id))
    assert report.checksum_after == before["checksum"]
    assert not report.corrupted_members and not report.directories_rewritten
    assert len(report.orphan_shards_deleted) <= 1
