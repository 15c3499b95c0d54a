"""The newest dandi flow's guarantees at the API (moto's S3): an open upload gathered over
several POST files/, deletions while it is open, finalize keeping only what storage verified."""

from __future__ import annotations

import base64
import hashlib

import requests

from tests.support.api import Actor, md5, put, storage_listing, upload
from tests.support.tree_check import assert_tree_matches_storage


def _b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def test_open_upload_finalize_keeps_only_verified(owner: Actor, zarr_id: str) -> None:
    assert upload(owner.client, zarr_id, {"old": b"old", "keep": b"k"}).status_code == 200
    files = f"/api/zarr/{zarr_id}/files/"
    first = owner.client.post(files, [{"path": "a/1", "base64md5": _b64(b"1")}], format="json")
    second = owner.client.post(
        files,
        [{"path": "a/2", "base64md5": _b64(b"2")}, {"path": "keep", "base64md5": _b64(b"K")}],
        format="json",
    )
    assert first.status_code == second.status_code == 200, second.content
    (url_1,) = first.json()
    _never_put, url_keep = second.json()
    assert put(url_1, b"1").status_code == 200
    assert put(url_keep, b"K").status_code == 200
    # a/2 is never PUT. While the upload is open: delete a committed file and an uploaded one.
    response = owner.client.delete(files, [{"path": "old"}, {"path": "a/1"}], format="json")
    assert response.status_code == 204, response.content
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["status"] == "Pending"

    done = owner.client.post(f"/api/zarr/{zarr_id}/finalize/")
    assert done.status_code == 200, done.content
    assert done.json()["verified"] == 1 and done.json()["missing"] == ["a/2"]
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert archive["status"] == "Complete"
    assert storage_listing(zarr_id) == {"keep": (1, md5(b"K"))}
    listing = owner.client.get(f"/api/zarr/{zarr_id}/files").json()
    assert [(r["Key"], r["ETag"]) for r in listing["results"]] == [("keep", md5(b"K"))]
    assert listing["count"] == 1
    assert_tree_matches_storage(zarr_id)


def test_open_upload_refuses_file_directory_clashes_across_requests(
    owner: Actor, zarr_id: str
) -> None:
    """A later POST files/ is checked against the paths earlier ones added (each request checks
    only its own paths against the archive, not the whole open upload again)."""
    assert upload(owner.client, zarr_id, {"committed/f": b"c"}).status_code == 200
    files = f"/api/zarr/{zarr_id}/files/"

    def ask(*paths: str) -> requests.Response:
        body = [{"path": p, "base64md5": _b64(p.encode())} for p in paths]
        return owner.client.post(files, body, format="json")

    assert ask("a/b/1", "c").status_code == 200
    assert ask("a/b/1", "d").status_code == 200  # asked again: no clash with itself
    inside_a_file = ask("c/2")
    assert inside_a_file.status_code == 400, inside_a_file.content
    assert "is also a directory in this batch" in inside_a_file.content.decode()
    over_a_directory = ask("a/b")
    assert over_a_directory.status_code == 400, over_a_directory.content
    assert ask("a").status_code == 400
    assert ask("committed").status_code == 400  # a directory of the archive
    done = owner.client.post(f"/api/zarr/{zarr_id}/finalize/")
    assert done.status_code == 200 and done.json()["missing"] == ["a/b/1", "c", "d"]
    assert_tree_matches_storage(zarr_id)


def test_open_upload_and_batch_flow_exclude_each_other(owner: Actor, zarr_id: str) -> None:
    upload(owner.client, zarr_id, {"x": b"x"}, complete=False)
    response = owner.client.post(
        f"/api/zarr/{zarr_id}/files/", [{"path": "y", "base64md5": _b64(b"y")}], format="json"
    )
    assert response.status_code == 409
    bad = owner.client.post(
        f"/api/zarr/{zarr_id}/files/", [{"path": "y", "base64md5": "nope"}], format="json"
    )
    assert bad.status_code == 400 and "base64md5" in bad.json()["detail"]


def test_batch_flow_dandi_048_gets_acl_urls(owner: Actor, zarr_id: str) -> None:
    body = b"acl body"
    response = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/",
        [{"path": "f", "etag": md5(body)}],
        format="json",
        HTTP_USER_AGENT="dandi/0.48.1 requests/2.34.2 CPython/3.11.7",
    )
    (target,) = response.json()
    assert "x-amz-acl" in target["upload_url"] and "content-md5" not in target["upload_url"]
    headers = {"X-Amz-ACL": "bucket-owner-full-control"}
    assert requests.put(target["upload_url"], data=body, headers=headers, timeout=30).ok
    assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 200
    assert storage_listing(zarr_id) == {"f": (len(body), md5(body))}
