"""Races with real threads, real transactions and real HTTP to moto's S3."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from dandizarr_server.zarr_api.models import Batch, BatchFile, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services import upload_batches
from dandizarr_server.zarr_api.services.tree_updates import tree_update_apply
from tests.support.api import Actor, create_archive, md5, upload
from tests.support.multipart import huge_declaration
from tests.support.tree_check import assert_tree_matches_storage

# Each thread has its own connection and transaction: the test's rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


def run_together(functions: list[Callable[[], Any]]) -> list[Any]:
    """Run the functions in threads released at the same instant; return their results."""
    barrier = threading.Barrier(len(functions))
    results: list[Any] = [None] * len(functions)

    def runner(index: int, function: Callable[[], Any]) -> None:
        try:
            barrier.wait()
            results[index] = function()
        except BaseException as error:  # surfaced to the test below
            results[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=runner, args=(i, f)) for i, f in enumerate(functions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_clients_start_a_batch_at_once_exactly_one_wins(owner: Actor, zarr_id: str) -> None:
    def start(path: str) -> int:
        body = [{"path": path, "etag": md5(b"x")}]
        return int(
            owner.client.post(f"/api/zarr/{zarr_id}/upload/", body, format="json").status_code
        )

    for attempt in range(3):
        codes = run_together(
            [lambda a=attempt: start(f"a{a}"), lambda a=attempt: start(f"b{a}")]  # type: ignore[misc]
        )
        assert sorted(codes) == [200, 409], codes
        assert Batch.objects.filter(archive__zarr_id=zarr_id, state="open").count() == 1
        assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204


def test_completes_on_different_archives_run_in_parallel(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    zarr_ids = []
    for name in ("one", "two", "three"):
        response = owner.client.post(
            "/api/zarr/", {"name": name, "dandiset": dandiset}, format="json"
        )
        zarr_ids.append(response.json()["zarr_id"])
    contents = {z: {f"{z[:4]}/{i}": f"{z}{i}".encode() for i in range(20)} for z in zarr_ids}
    for zarr_id in zarr_ids:
        upload(owner.client, zarr_id, contents[zarr_id], complete=False)

    def complete(zarr_id: str) -> int:
        return int(owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code)

    codes = run_together([lambda z=z: complete(z) for z in zarr_ids])  # type: ignore[misc]
    assert codes == [200, 200, 200]
    for zarr_id in zarr_ids:
        assert ZarrArchive.objects.get(zarr_id=zarr_id).file_count == 20
        assert_tree_matches_storage(zarr_id)


def test_concurrent_tree_updates_of_one_archive_lose_nothing(owner: Actor, zarr_id: str) -> None:
    """Several pending batches, several workers applying them at once: all land exactly once."""
    assert upload(owner.client, zarr_id, {"base/0": b"0"}).status_code == 200
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    store = get_store()
    sequence = Batch.objects.filter(archive=archive).count() + 10
    for batch_number in range(6):
        batch = Batch.objects.create(
            archive=archive, kind="upload", state="pending", sequence=sequence + batch_number
        )
        for i in range(15):
            path = f"b{batch_number % 3}/{i}/{batch_number}"
            body = f"{batch_number}-{i}".encode()
            store.put(archive.storage_prefix + path, body)
            BatchFile.objects.create(batch=batch, path=path, md5=md5(body), size=len(body))
    results = run_together([lambda: tree_update_apply(archive.pk) for _ in range(4)])
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert sum(r is not None for r in results) >= 1
    assert not Batch.objects.filter(archive=archive, state="pending").exists()
    assert ZarrArchive.objects.get(pk=archive.pk).file_count == 1 + 6 * 15
    assert_tree_matches_storage(zarr_id)


def test_next_batch_starts_while_previous_is_pending(owner: Actor, zarr_id: str) -> None:
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    batch = Batch.objects.create(archive=archive, kind="upload", state="pending", sequence=1)
    get_store().put(archive.storage_prefix + "p", b"p")
    BatchFile.objects.create(batch=batch, path="p", md5=md5(b"p"), size=1)
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["checksum_status"] == "pending"
    response = upload(owner.client, zarr_id, {"q": b"q"})
    assert response.status_code == 200
    # Its tree update applied both, in order.
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["file_count"] == 2
    assert_tree_matches_storage(zarr_id)


def test_one_accounts_starts_in_two_dandisets_are_capped_together(
    owner: Actor, dandiset: str, s3_storage: str, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap on what one account's open batches declare in parts holds across archives of
    different dandisets (whose starts lock no row in common): a start is held after its check,
    before it commits, while another dandiset's archive's start comes; the second is checked
    once the first committed, and refused."""
    settings.DANDIZARR_ACCOUNT_DECLARED_BYTES_LIMIT = 3 << 39  # 1.5 TiB: one start of 1 TiB
    other = owner.client.post("/api/dandisets/", {"name": "other"}, format="json").json()
    archives = [
        create_archive(owner, dandiset, "a.zarr", layout="loose"),
        create_archive(owner, other["identifier"], "b.zarr", layout="loose"),
    ]
    held, release = threading.Event(), threading.Event()
    sign = upload_batches.first_pages_sign

    def hold_first(uploads: Any) -> Any:
        if not held.is_set():
            held.set()
            release.wait(timeout=10)
        return sign(uploads)

    monkeypatch.setattr(upload_batches, "first_pages_sign", hold_first)
    body = huge_declaration(1, 1 << 40)

    def start(zarr_id: str) -> int:
        path = f"/api/zarr/{zarr_id}/upload/"
        return int(
            owner.client.generic("POST", path, body, content_type="application/json").status_code
        )

    def second() -> int:
        assert held.wait(timeout=10)
        # Released after a while: meanwhile the second start waits for the first (or, were
        # the account not locked, passes its check and commits).
        threading.Timer(1.0, release.set).start()
        return start(archives[1])

    codes = run_together([lambda: start(archives[0]), second])
    assert codes == [200, 400], codes
    assert Batch.objects.filter(state="open").count() == 1
