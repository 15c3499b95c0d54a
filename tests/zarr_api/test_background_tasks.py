"""Without a broker, `dandizarr serve` runs tasks on a background thread of the web process."""

from __future__ import annotations

import threading
import time
from typing import Any

from dandizarr.celery import enqueue, wait_for_background_tasks
from tests.zarr_api.conftest import Actor, upload
from tests.zarr_api.tree_check import assert_tree_matches_storage


def test_complete_returns_before_the_tree_update_which_follows_in_the_background(
    owner: Actor, zarr_id: str, settings: Any
) -> None:
    settings.DANDIZARR_INLINE_TASKS = "background"
    release = threading.Event()

    class Blocker:
        """Occupies the background thread until released."""

        name = "blocker"

        def apply(self, args: Any) -> Any:
            release.wait(30)
            return type("Result", (), {"failed": staticmethod(lambda: False)})()

    try:
        enqueue(Blocker())
        # The thread is busy, so the tree update cannot have run when complete answers.
        response = upload(owner.client, zarr_id, {"a/b": b"1"})
        assert response.status_code == 200
        assert response.json()["checksum_status"] == "pending"
        release.set()
        for round_ in range(3):
            files = {
                f"{round_}/{i}/{j}": f"{round_}{i}{j}".encode() for i in range(8) for j in range(8)
            }
            assert upload(owner.client, zarr_id, files).status_code == 200
        deadline = time.monotonic() + 60
        while owner.client.get(f"/api/zarr/{zarr_id}/").json()["checksum_status"] != "complete":
            assert time.monotonic() < deadline, "the background tree update never finished"
            time.sleep(0.05)
    finally:
        release.set()
        wait_for_background_tasks()
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert archive["file_count"] == 3 * 64 + 1
    assert_tree_matches_storage(zarr_id)


def test_inline_tasks_setting_is_checked(monkeypatch: Any) -> None:
    import importlib

    import pytest
    from django.core.exceptions import ImproperlyConfigured

    import dandizarr.settings

    monkeypatch.setenv("DANDIZARR_INLINE_TASKS", "sometimes")
    with pytest.raises(ImproperlyConfigured, match="sometimes"):
        importlib.reload(dandizarr.settings)
    monkeypatch.delenv("DANDIZARR_INLINE_TASKS")
    importlib.reload(dandizarr.settings)
