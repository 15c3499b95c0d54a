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
