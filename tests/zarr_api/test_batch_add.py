"""``POST upload/add/``: more files for the open batch while its earlier PUTs run, on both
storage backends; every refusal is a 4xx naming the problem and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from dandizarr_server.zarr_api.models import Batch
from tests.support.api import (
    Actor,
    batch_start_urls,
    db_snapshot,
    expected_checksum,
    md5,
    put,
    storage_listing,
    upload,
)
from tests.support.tree_check import assert_tree_matches_storage


def add(actor: Actor, zarr_id: str, files: dict[str, bytes]) -> Any:
    return actor.client.post(
        f"/api/zarr/{zarr_id}/upload/add/",
        [{"path": p, "etag": md5(b)} for p, b in files.items()],
        format="json",
    )


def test_files_added_to_the_open_batch_are_verified_and_applied_together(
    owner: Actor, archive: str
) -> None:
    first = {"a/0": b"zero", "a/1": b"one"}
    more = {"a/2": b"two", "b/0": b"bee"}
    urls = batch_start_urls(owner, archive, first)
    response = add(owner, archive, more)
    assert response.status_code == 200, response.content
    assert [t["path"] for t in response.json()] == list(more)
    urls.update({t["path"]: t["upload_url"] for t in response.json()})
    for path, url in urls.items():
        assert put(url, {**first, **more}[path]).status_code == 200

    batch = Batch.objects.get(archive__zarr_id=archive, state=Batch.State.OPEN)
    assert batch.files.count() == 4
    completed = owner.client.post(f"/api/zarr/{archive}/upload/complete/")
    assert completed.status_code == 200, completed.content
    assert completed.json()["files"] == 4
    detail = owner.client.get(f"/api/zarr/{archive}/").json()
    assert detail["checksum"] == expected_checksum({**first, **more})
    assert Batch.objects.filter(archive__zarr_id=archive).count() == 1
    assert_tree_matches_storage(archive)


def test_complete_verifies_the_added_files_too(owner: Actor, archive: str) -> None:
    batch_start_urls(owner, archive, {"x": b"x"})
    added = add(owner, archive, {"y": b"y"}).json()
    # Only the added file is sent: the batch is not complete without the first.
    assert put(added[0]["upload_url"], b"y").status_code == 200
    response = owner.client.post(f"/api/zarr/{archive}/upload/complete/")
    assert response.status_code == 400
    assert response.json()["missing"] == ["x"]
    assert owner.client.get(f"/api/zarr/{archive}/upload/").status_code == 204


def test_adding_a_path_again_renews_its_url_and_takes_the_new_md5(
    owner: Actor, archive: str
) -> None:
    batch_start_urls(owner, archive, {"f": b"old"})
    again = add(owner, archive, {"f": b"new"})
    assert again.status_code == 200, again.content
    assert put(again.json()[0]["upload_url"], b"new").status_code == 200
    batch = Batch.objects.get(archive__zarr_id=archive, state=Batch.State.OPEN)
    assert list(batch.files.values_list("path", "md5")) == [("f", md5(b"new"))]
    assert owner.client.post(f"/api/zarr/{archive}/upload/complete/").status_code == 200
    assert storage_listing(archive)["f"][1] == md5(b"new")


@pytest.mark.parametrize(
    ("held", "added"),
    [
        ({"d/f": b"1"}, {"d": b"2"}),  # a file where the batch has a directory
        ({"d": b"1"}, {"d/f": b"2"}),  # a file inside one of the batch's files
    ],
)
def test_a_file_directory_clash_with_the_batch_is_refused(
    owner: Actor, archive: str, held: dict[str, bytes], added: dict[str, bytes]
) -> None:
    batch_start_urls(owner, archive, held)
    before = db_snapshot()
    response = add(owner, archive, added)
    assert response.status_code == 400, response.content
    assert response.json()["paths"] == [
        {"path": "d", "problem": "is also a directory in this batch"}
    ]
    assert db_snapshot() == before


def test_a_clash_with_the_archive_is_refused(owner: Actor, archive: str) -> None:
    assert upload(owner.client, archive, {"dir/f": b"1"}).status_code == 200
    batch_start_urls(owner, archive, {"other": b"o"})
    before = db_snapshot()
    response = add(owner, archive, {"dir": b"clash"})
    assert response.status_code == 400
    assert "is a directory in the archive" in str(response.json())
    assert db_snapshot() == before


def test_the_batch_may_not_grow_past_its_limit(owner: Actor, archive: str, settings: Any) -> None:
    settings.DANDIZARR_OPEN_BATCH_FILE_LIMIT = 3
    batch_start_urls(owner, archive, {"1": b"1", "2": b"2"})
    before = db_snapshot()
    response = add(owner, archive, {"3": b"3", "4": b"4"})
    assert response.status_code == 400
    assert "at most 3" in response.json()["detail"]
    assert db_snapshot() == before
    assert add(owner, archive, {"3": b"3", "1": b"1"}).status_code == 200  # "1" is held


def test_no_open_batch_is_404(owner: Actor, archive: str) -> None:
    response = add(owner, archive, {"a": b"a"})
    assert response.status_code == 404
    assert "no upload batch in progress" in response.json()["detail"]


def test_only_the_batch_uploader_may_add(
    owner: Actor, admin_actor: Actor, stranger: Actor, archive: str
) -> None:
    batch_start_urls(owner, archive, {"a": b"a"})
    before = db_snapshot()
    assert add(stranger, archive, {"b": b"b"}).status_code == 403
    response = add(admin_actor, archive, {"b": b"b"})
    assert response.status_code == 409
    assert "another client's upload" in response.json()["detail"]
    assert db_snapshot() == before


def test_a_dandi_open_upload_takes_no_upload_add(owner: Actor, archive: str) -> None:
    opened = owner.client.post(
        f"/api/zarr/{archive}/files/",
        [{"path": "a", "base64md5": "AAAAAAAAAAAAAAAAAAAAAA=="}],
        format="json",
    )
    assert opened.status_code == 200, opened.content
    response = add(owner, archive, {"b": b"b"})
    assert response.status_code == 409
    assert "started with POST upload/" in response.json()["detail"]


def test_bad_bodies_are_refused_before_anything_changes(owner: Actor, archive: str) -> None:
    batch_start_urls(owner, archive, {"a": b"a"})
    before = db_snapshot()
    for body in ({"path": "x"}, [{"path": "/abs", "etag": md5(b"")}], [{"path": "x"}]):
        response = owner.client.post(f"/api/zarr/{archive}/upload/add/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert response.json()["detail"]
    assert db_snapshot() == before


def test_info_names_how_many_files_a_batch_may_gather(owner: Actor, settings: Any) -> None:
    settings.DANDIZARR_OPEN_BATCH_FILE_LIMIT = 1234
    assert owner.client.get("/api/info/").json()["open_batch_file_limit"] == 1234


def test_a_directory_emptied_from_an_open_upload_may_become_a_file(
    owner: Actor, archive: str
) -> None:
    """DANDI's open upload: once "d/f" leaves it, "d" is no directory of it any more."""
    files = f"/api/zarr/{archive}/files/"
    declared = [{"path": "d/f", "base64md5": "AAAAAAAAAAAAAAAAAAAAAA=="}]
    assert owner.client.post(files, declared, format="json").status_code == 200
    clash = owner.client.post(
        files, [{"path": "d", "base64md5": "AAAAAAAAAAAAAAAAAAAAAA=="}], format="json"
    )
    assert clash.status_code == 400 and "is also a directory in this batch" in str(clash.json())
    assert owner.client.delete(files, [{"path": "d/f"}], format="json").status_code == 204
    again = owner.client.post(
        files, [{"path": "d", "base64md5": "AAAAAAAAAAAAAAAAAAAAAA=="}], format="json"
    )
    assert again.status_code == 200, again.content
