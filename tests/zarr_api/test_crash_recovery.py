"""A web process killed at any step of a deletion or a cancel leaves nothing a person must
clear (issue #16, finding 7): the service runs as a real separate process (``dandizarr serve``
on the test database and a local storage directory), its web worker is SIGKILLed at each crash
point (``DANDIZARR_CRASH_AT``), and the service is restarted; the restart finishes what was
left (the periodic sweep's work) and the tree equals storage again.

Each start of ``dandizarr serve`` is most of the test's time, so one process does three jobs:
it is the restart of the previous crash (its recovery at start, then the checks), then the
process crashed at the next point. Deletion and cancel points alternate, so the recovery of one
kind never passes the other kind's armed point (a cancel's recovery makes a deletion batch but
never finishes one); had it passed it, the restart would have died before answering and the
test failed. Six crash points: seven starts, not thirteen.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from django.db import connection

from dandizarr_server.zarr_api.models import Batch
from tests.support.api import md5, put
from tests.support.processes import Processes
from tests.support.tree_check import assert_tree_matches_storage

DELETE_POINTS = ["delete:intent-committed", "delete:storage-deleted", "delete:pending-committed"]
CANCEL_POINTS = ["cancel:intent-committed", "cancel:storage-deleted", "cancel:pending-committed"]
FIRST = {"keep": b"keep", "gone/1": b"g1", "gone/2": b"g2", "over": b"old"}
# The cancelled batch re-sends "keep" unchanged, overwrites "over", adds "new".
SECOND = {"keep": b"keep", "over": b"new over", "new": b"n"}


def database_url() -> str:
    """The test database, for the service's own process."""
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db["HOST"] or "127.0.0.1"
    return f"postgresql://{db['USER']}{password}@{host}:{db['PORT'] or 5432}/{db['NAME']}"


class Api:
    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.headers = {"Authorization": f"Token {token}"}

    def call(self, method: str, path: str, body: Any = None) -> requests.Response:
        return requests.request(
            method, self.url + path, json=body, headers=self.headers, timeout=30
        )

    def start_batch(self, zarr_id: str, files: dict[str, bytes]) -> None:
        declared = [{"path": p, "etag": md5(b)} for p, b in files.items()]
        response = self.call("POST", f"/api/zarr/{zarr_id}/upload/", declared)
        assert response.status_code == 200, response.text
        for target in response.json():
            assert put(target["upload_url"], files[target["path"]]).status_code == 200

    def complete(self, zarr_id: str) -> None:
        """Complete the open batch and wait for its tree update (``dandizarr serve`` runs it in
        a background thread)."""
        response = self.call("POST", f"/api/zarr/{zarr_id}/upload/complete/")
        assert response.status_code == 200, response.text
        deadline = time.monotonic() + 60
        while self.call("GET", f"/api/zarr/{zarr_id}/").json()["checksum_status"] != "complete":
            assert time.monotonic() < deadline, "the tree update never ran"
            time.sleep(0.05)

    def files(self, zarr_id: str) -> dict[str, str]:
        response = self.call("GET", f"/api/zarr/{zarr_id}/files/?recursive=true")
        assert response.status_code == 200, response.text
        return {f["path"]: f["digest"] for f in response.json()["results"]}


@pytest.fixture
def serve(
    processes: Processes, tmp_path: Path, settings: Any, transactional_db: None
) -> Callable[..., AbstractContextManager[Api]]:
    """Start ``dandizarr serve`` on the test database and a local storage directory (which
    this process reads too), with extra settings."""
    settings.DANDIZARR_STORAGE = "local"
    settings.DANDIZARR_LOCAL_STORAGE_DIR = tmp_path / "storage"

    @contextmanager
    def running(**env: str) -> Iterator[Api]:
        with processes.serve(
            tmp_path / "data",
            DATABASE_URL=database_url(),
            DANDIZARR_STORAGE="local",
            DANDIZARR_LOCAL_STORAGE_DIR=str(settings.DANDIZARR_LOCAL_STORAGE_DIR),
            **env,
        ) as (url, token):
            yield Api(url, token)

    return running


def crash(api: Api, point: str, zarr_id: str) -> None:
    """Send the request that reaches ``point``: the web worker is SIGKILLed in its middle."""
    with pytest.raises(requests.ConnectionError):
        if point in DELETE_POINTS:
            paths = [{"path": "gone/1"}, {"path": "gone/2"}]
            api.call("DELETE", f"/api/zarr/{zarr_id}/files/", paths)
        else:
            api.call("DELETE", f"/api/zarr/{zarr_id}/upload/")


def assert_converged(api: Api, point: str, zarr_id: str) -> None:
    """After a restart: what the crash at ``point`` left is finished, and the archive takes
    new work."""
    expected = (
        {"keep": md5(b"keep"), "over": md5(b"old")}
        if point in DELETE_POINTS
        else {"keep": md5(b"keep"), "gone/1": md5(b"g1"), "gone/2": md5(b"g2")}
    )
    assert api.files(zarr_id) == expected, point
    assert_tree_matches_storage(zarr_id)
    unfinished = Batch.objects.filter(archive__zarr_id=zarr_id).exclude(
        state__in=[Batch.State.APPLIED, Batch.State.CANCELLED]
    )
    assert list(unfinished.values_list("state", flat=True)) == [], point
    api.start_batch(zarr_id, {"later": b"l"})
    api.complete(zarr_id)
    assert_tree_matches_storage(zarr_id)


def test_a_crash_at_any_step_of_delete_or_cancel_converges(
    serve: Callable[..., AbstractContextManager[Api]],
) -> None:
    # A deletion point, then a cancel point, and so on (the module's docstring says why).
    points = [p for pair in zip(DELETE_POINTS, CANCEL_POINTS, strict=True) for p in pair]
    archives: dict[str, str] = {}
    crashed: str | None = None
    for point in [*points, None]:
        with serve(**({"DANDIZARR_CRASH_AT": point} if point else {})) as api:
            if crashed is None:  # the first process: every archive, in its state before
                dandiset = api.call("POST", "/api/dandisets/", {"name": "crash"}).json()
                for name in points:
                    body = {"name": name, "dandiset": dandiset["identifier"]}
                    response = api.call("POST", "/api/zarr/", body)
                    assert response.status_code == 201, response.text
                    zarr_id = archives[name] = response.json()["zarr_id"]
                    api.start_batch(zarr_id, FIRST)
                    api.complete(zarr_id)
                    if name in CANCEL_POINTS:
                        api.start_batch(zarr_id, SECOND)
            else:  # the restart after the crash at ``crashed``
                assert_converged(api, crashed, archives[crashed])
            if point is not None:
                crash(api, point, archives[point])
                crashed = point
