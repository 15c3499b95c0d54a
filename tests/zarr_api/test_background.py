"""``dandizarr serve`` without a broker: tasks run in a background thread of the server process
(``zarr_api.runtime.background``), not in the request that scheduled them, and the beat
schedule's sweeps run there periodically."""

from __future__ import annotations

import time

import pytest

from dandizarr_server.zarr_api.models import Batch, ZarrArchive
from dandizarr_server.zarr_api.runtime.background import WORKER, start_periodic_tasks
from tests.support.api import Actor, cancel_while_storage_is_down, upload
from tests.support.tree_check import assert_tree_matches_storage

# The background thread reads the test's rows: they must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


def test_a_completed_batch_is_applied_by_the_background_thread(
    owner: Actor, zarr_id: str, settings
) -> None:
    settings.DANDIZARR_TASKS_IN_BACKGROUND = True
    for number in range(3):
        files = {f"d{number}/{i}": f"{number}-{i}".encode() for i in range(20)}
        assert upload(owner.client, zarr_id, files).status_code == 200
    assert WORKER.wait_idle(timeout=60)
    assert not Batch.objects.filter(archive__zarr_id=zarr_id, state="pending").exists()
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    assert archive.file_count == 60
    assert_tree_matches_storage(zarr_id)


def test_the_periodic_sweeps_finish_a_cancel_storage_failed(
    owner: Actor, zarr_id: str, settings
) -> None:
    settings.DANDIZARR_TASKS_IN_BACKGROUND = True
    working_endpoint = cancel_while_storage_is_down(owner, zarr_id, settings)
    assert Batch.objects.filter(archive__zarr_id=zarr_id, state="cancelling").exists()
    settings.DANDIZARR_S3_ENDPOINT_URL = working_endpoint
    stop = start_periodic_tasks(
        {
            "finish-batch-ends": {
                "task": "dandizarr_server.zarr_api.tasks.finish_batch_ends",
                "schedule": 0.2,
            }
        }
    )
    try:
        deadline = time.monotonic() + 60
        while Batch.objects.filter(archive__zarr_id=zarr_id, state="cancelling").exists():
            assert time.monotonic() < deadline, "the sweep never finished the cancel"
            time.sleep(0.1)
    finally:
        stop.set()
    assert WORKER.wait_idle(timeout=60)
    assert_tree_matches_storage(zarr_id)
