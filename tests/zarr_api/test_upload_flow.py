"""The upload flow end to end: real HTTP PUTs to moto's S3, PostgreSQL, tasks run inline."""

from __future__ import annotations

import pytest

from dandizarr_server.zarr_api.models import Batch
from tests.support.api import (
    SAMPLE_FILES,
    Actor,
    expected_checksum,
    let_upload_urls_expire,
    md5,
    put,
    storage_listing,
    upload,
)
from tests.support.tree_check import assert_tree_matches_storage
from tests.support.versions import state_of


def test_upload_complete_and_browse(owner: Actor, zarr_id: str) -> None:
    response = upload(owner.client, zarr_id, SAMPLE_FILES)
    assert response.status_code == 200, response.content
    assert response.json()["verified"] is True

    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert archive["checksum_status"] == "complete"
    assert archive["checksum"] == expected_checksum(SAMPLE_FILES)
    assert archive["file_count"] == len(SAMPLE_FILES)
    assert archive["size"] == sum(len(b) for b in SAMPLE_FILES.values())
    assert archive["upload_in_progress"] is False
    assert (archive["generation"], archive["version_count"]) == (1, 0)
    assert archive["s3_path"].endswith(f"zarr/{zarr_id}/")
    assert_tree_matches_storage(zarr_id)

    root = owner.client.get(f"/api/zarr/{zarr_id}/tree/").json()
    assert root["type"] == "directory"
    assert root["digest"] == archive["checksum"]
    assert [e["name"] for e in root["results"]] == ["0", "1", ".zgroup", "caf\u00e9"]

    file = owner.client.get(f"/api/zarr/{zarr_id}/0/0.0").json()
    assert file["type"] == "file"
    assert (file["size"], file["digest"]) == (100, md5(b"a" * 100))
    assert file["s3_key"] == f"zarr/{zarr_id}/0/0.0"
    import requests

    assert requests.get(file["download_url"], timeout=10).content == b"a" * 100

    # The unambiguous alias gives the same answers.
    assert owner.client.get(f"/api/zarr/{zarr_id}/files/0/0.0").json()["digest"] == file["digest"]
    assert owner.client.get(f"/api/zarr/{zarr_id}/nope").status_code == 404
    assert owner.client.get(f"/api/zarr/{zarr_id}/0/0.0/x").status_code == 404

    recursive = owner.client.get(f"/api/zarr/{zarr_id}/files/?recursive=true&limit=2").json()
    assert [r["path"] for r in recursive["results"]] == [".zgroup", "0/.zarray"]
    rest = owner.client.get(recursive["next"]).json()
    assert [r["path"] for r in rest["results"]] == ["0/0.0", "0/0.1"]


def test_directory_listing_is_paginated(owner: Actor, zarr_id: str) -> None:
    files = {f"d/{i:03d}": bytes([i]) for i in range(25)}
    assert upload(owner.client, zarr_id, files).status_code == 200
    page = owner.client.get(f"/api/zarr/{zarr_id}/d?page_size=10&page=3").json()
    assert page["count"] == 25
    assert [e["name"] for e in page["results"]] == [f"{i:03d}" for i in range(20, 25)]
    assert page["next"] is None and page["previous"] is not None


def test_upload_status_endpoint(owner: Actor, zarr_id: str) -> None:
    assert owner.client.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404
    upload(owner.client, zarr_id, {"a": b"1"}, complete=False)
    assert owner.client.get(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["upload_in_progress"] is True


def test_complete_names_missing_and_mismatched_and_keeps_batch_open(
    owner: Actor, zarr_id: str
) -> None:
    files = {"ok": b"fine", "missing": b"never sent", "wrong": b"declared"}
    response = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/",
        [{"path": p, "etag": md5(b)} for p, b in files.items()],
        format="json",
    )
    urls = {t["path"]: t["upload_url"] for t in response.json()}
    put(urls["ok"], b"fine")
    # moto does not enforce the signed Content-MD5, so a different body lands: the server's
    # own ETag check must catch it.
    put(urls["wrong"], b"something else")
    response = owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert response.status_code == 400
    body = response.json()
    assert body["missing"] == ["missing"]
    assert [m["path"] for m in body["mismatched"]] == ["wrong"]
    assert "missing" in body["detail"] and "wrong" in body["detail"]
    assert owner.client.get(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["file_count"] == 0

    put(urls["missing"], b"never sent")
    put(urls["wrong"], b"declared")
    assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 200
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["checksum"] == expected_checksum(files)
    assert_tree_matches_storage(zarr_id)


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/abs", "must not start with '/'"),
        ("a//b", "empty"),
        ("a/./b", "'.'"),
        ("a/../b", "'..'"),
        ("", "empty"),
        ("a\\b", "backslash"),
        ("a\nb", "control"),
        ("x" * 1000, "bytes"),
    ],
)
def test_bad_paths_are_named_and_change_nothing(
    owner: Actor, zarr_id: str, path: str, fragment: str
) -> None:
    response = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/",
        [{"path": "good", "etag": md5(b"")}, {"path": path, "etag": md5(b"")}],
        format="json",
    )
    assert response.status_code == 400
    assert fragment in response.json()["detail"]
    assert response.json()["paths"][0]["path"] == path
    assert owner.client.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404


def test_batch_rules(owner: Actor, zarr_id: str, settings) -> None:
    settings.DANDIZARR_BATCH_LIMIT = 3
    url = f"/api/zarr/{zarr_id}/upload/"
    too_many = [{"path": f"f{i}", "etag": md5(b"")} for i in range(4)]
    response = owner.client.post(url, too_many, format="json")
    assert response.status_code == 400 and "at most 3" in response.json()["detail"]

    duplicate = [{"path": "a", "etag": md5(b"")}, {"path": "a", "etag": md5(b"")}]
    response = owner.client.post(url, duplicate, format="json")
    assert response.status_code == 400 and "more than once" in response.json()["detail"]

    response = owner.client.post(url, [{"path": "a", "etag": "ABC"}], format="json")
    assert response.status_code == 400 and "'a' etag" in response.json()["detail"]

    response = owner.client.post(url, [{"path": "a", "etag": md5(b"")}], format="json")
    assert response.status_code == 200
    response = owner.client.post(url, [{"path": "b", "etag": md5(b"")}], format="json")
    assert response.status_code == 409


def test_file_and_directory_may_not_share_a_path(owner: Actor, zarr_id: str) -> None:
    assert upload(owner.client, zarr_id, {"a/b": b"1", "f": b"2"}).status_code == 200
    url = f"/api/zarr/{zarr_id}/upload/"
    for batch, named in [
        ([{"path": "a", "etag": md5(b"")}], "'a' is a directory"),
        ([{"path": "f/g", "etag": md5(b"")}], "inside 'f'"),
        ([{"path": "n", "etag": md5(b"")}, {"path": "n/m", "etag": md5(b"")}], "'n' is also"),
    ]:
        response = owner.client.post(url, batch, format="json")
        assert response.status_code == 400, batch
        assert named in response.json()["detail"]


def test_cancel_deletes_uploads_and_tree_follows_storage(owner: Actor, zarr_id: str) -> None:
    assert (
        upload(owner.client, zarr_id, {"keep": b"old", "over": b"old", "same": b"s"}).status_code
        == 200
    )
    # The next batch overwrites "over", declares "keep" but never sends it, re-sends "same"
    # unchanged, and adds "new".
    files = {"keep": b"new keep", "over": b"new over", "same": b"s", "new": b"n"}
    response = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/",
        [{"path": p, "etag": md5(b)} for p, b in files.items()],
        format="json",
    )
    urls = {t["path"]: t["upload_url"] for t in response.json()}
    for path in ("over", "same", "new"):
        put(urls[path], files[path])
    assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert owner.client.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404
    listing = storage_listing(zarr_id)
    assert sorted(listing) == ["keep", "same"]
    assert listing["keep"][1] == md5(b"old")
    assert_tree_matches_storage(zarr_id)
    # A new batch can start right away.
    assert upload(owner.client, zarr_id, {"over": b"again"}).status_code == 200
    assert_tree_matches_storage(zarr_id)


def test_delete_files(owner: Actor, zarr_id: str) -> None:
    assert upload(owner.client, zarr_id, {"a/1": b"1", "a/2": b"2", "b": b"3"}).status_code == 200
    url = f"/api/zarr/{zarr_id}/files/"
    response = owner.client.delete(url, [{"path": "a/1"}, {"path": "nope"}], format="json")
    assert response.status_code == 404
    assert response.json()["missing"] == ["nope"]
    assert sorted(storage_listing(zarr_id)) == ["a/1", "a/2", "b"]

    assert (
        owner.client.delete(url, [{"path": "a/1"}, {"path": "a/2"}], format="json").status_code
        == 204
    )
    assert sorted(storage_listing(zarr_id)) == ["b"]
    assert owner.client.get(f"/api/zarr/{zarr_id}/a").status_code == 404
    assert_tree_matches_storage(zarr_id)
    assert owner.client.delete(url, [{"path": "b"}], format="json").status_code == 204
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert (archive["checksum"], archive["file_count"]) == (
        "481a2f77ab786a0f45aafd5db0971caa-0--0",
        0,
    )
    assert_tree_matches_storage(zarr_id)


def test_permissions(owner: Actor, stranger: Actor, admin_actor: Actor, zarr_id: str) -> None:
    from rest_framework.test import APIClient

    anonymous = APIClient()
    assert anonymous.get(f"/api/zarr/{zarr_id}/").status_code == 200
    body = [{"path": "a", "etag": md5(b"1")}]
    assert anonymous.post(f"/api/zarr/{zarr_id}/upload/", body, format="json").status_code == 401
    response = stranger.client.post(f"/api/zarr/{zarr_id}/upload/", body, format="json")
    assert response.status_code == 403 and "owners" in response.json()["detail"]
    upload(owner.client, zarr_id, {"a": b"1"}, complete=False)
    assert stranger.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 403
    assert admin_actor.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204


def test_a_stranger_is_refused_before_the_body_is_read(
    owner: Actor, stranger: Actor, zarr_id: str
) -> None:
    """403, not 400: who may write is checked before a (possibly huge) body is parsed."""
    upload_url = f"/api/zarr/{zarr_id}/upload/"
    malformed = [
        (upload_url, {"shards": [{"name": "s", "members": "not a list"}]}),  # a pack body
        (upload_url, [{"path": "/absolute", "etag": "not an md5"}]),  # a loose upload body
        (upload_url, "not a list"),
    ]
    for url, body in malformed:
        response = stranger.client.post(url, body, format="json")
        assert response.status_code == 403, (body, response.content)
        assert "owners" in response.json()["detail"]
        assert owner.client.post(url, body, format="json").status_code == 400, body
    # Not even JSON: the body is never read.
    response = stranger.client.post(upload_url, b"{not json", content_type="application/json")
    assert response.status_code == 403, response.content
    response = stranger.client.delete(
        f"/api/zarr/{zarr_id}/files/", b"{not json", content_type="application/json"
    )
    assert response.status_code == 403, response.content
    assert not Batch.objects.filter(archive__zarr_id=zarr_id).exists()


def test_publish_makes_a_version_and_the_draft_stays_editable(
    owner: Actor, dandiset: str, zarr_id: str
) -> None:
    assert upload(owner.client, zarr_id, {"a": b"1"}).status_code == 200
    assets = f"/api/dandisets/{dandiset}/versions/draft/assets/"
    response = owner.client.post(
        assets, {"path": "x.zarr", "zarr_id": zarr_id, "metadata": {"k": 1}}, format="json"
    )
    assert response.status_code == 201, response.content
    asset_id = response.json()["asset_id"]
    response = owner.client.post(assets, {"path": "y", "blob_id": "abc"}, format="json")
    assert response.status_code == 400 and "blob_id" in response.json()["detail"]

    # This bucket kept no object versions before: upload URLs issued until now could still
    # replace bytes for good, so the first publish waits for them.
    response = owner.client.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert response.status_code == 409, response.content
    assert "upload URLs" in response.json()["detail"]
    let_upload_urls_expire()
    response = owner.client.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert response.status_code == 201, response.content
    version = response.json()["version"]
    detail = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert (detail["generation"], detail["version_count"]) == (2, 1)

    # The draft stays editable; version 1 is what it was.
    assert upload(owner.client, zarr_id, {"b": b"2"}).status_code == 200
    response = owner.client.delete(f"/api/zarr/{zarr_id}/files/", [{"path": "a"}], format="json")
    assert response.status_code == 204, response.content
    (archive_version,) = owner.client.get(f"/api/zarr/{zarr_id}/versions/").json()["results"]
    assert state_of(owner, archive_version["zarr_id"]) == {"a": b"1"}
    assert state_of(owner, zarr_id) == {"b": b"2"}

    # Draft metadata stays editable; the published version is read-only.
    response = owner.client.put(f"{assets}{asset_id}/", {"metadata": {"k": 2}}, format="json")
    # (the server adds what it knows: path, encodingFormat, identifier, size, zarr checksum)
    assert response.status_code == 200 and response.json()["metadata"]["k"] == 2
    published = owner.client.get(f"/api/dandisets/{dandiset}/versions/{version}/assets/").json()
    assert published["results"][0]["metadata"]["k"] == 1
    assert published["results"][0]["zarr"] == archive_version["zarr_id"]


def test_unknown_or_malformed_archive_ids_are_404(
    owner: Actor, dandiset: str, zarr_id: str
) -> None:
    for bad in ("no-such-archive", "00000000-0000-0000-0000-000000000000"):
        for url in (f"/api/zarr/{bad}/", f"/api/zarr/{bad}/files/", f"/api/zarr/{bad}/upload/"):
            response = owner.client.get(url)
            assert response.status_code == 404, (url, response.content)
            assert bad in response.json()["detail"]
    assets = f"/api/dandisets/{dandiset}/versions/draft/assets/"
    response = owner.client.post(assets, {"path": "p", "zarr_id": "nope"}, format="json")
    assert response.status_code == 400 and "nope" in response.json()["detail"]
