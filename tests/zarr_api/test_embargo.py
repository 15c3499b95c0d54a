"""Embargoed dandisets: created private (``?embargo=true`` as the DANDI API takes it, or the
``embargo`` field), released by their owners (``POST unembargo/``: nothing uploaded again,
``UNEMBARGOING`` until the storage side is done, a crash finished by the sweep), the real
status in the DANDI shapes; and on a public bucket (SeaweedFS), a private archive's raw
objects refused to anonymous readers until it is released."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from django.test import Client

from dandizarr_server.zarr_api.models import Dandiset
from dandizarr_server.zarr_api.services.embargo import unfinished_releases_finish
from tests.support.api import Actor, md5, put, upload


def _embargoed(owner: Actor, how: str = "query") -> str:
    if how == "query":
        created = owner.client.post("/api/dandisets/?embargo=true", {"name": "e"}, format="json")
    else:
        created = owner.client.post("/api/dandisets/", {"name": "e", "embargo": True}, "json")
    assert created.status_code == 201, created.content
    assert created.json()["embargo_status"] == "EMBARGOED"
    return str(created.json()["identifier"])


def _archive(owner: Actor, identifier: str, name: str = "a.zarr") -> str:
    created = owner.client.post("/api/zarr/", {"name": name, "dandiset": identifier}, "json")
    assert created.status_code == 201, created.content
    return str(created.json()["zarr_id"])


@pytest.mark.parametrize("how", ["query", "field"])
def test_created_private_and_released_by_its_owner(
    owner: Actor, stranger: Actor, s3_storage: str, how: str
) -> None:
    identifier = _embargoed(owner, how)
    zarr_id = _archive(owner, identifier)
    assert upload(owner.client, zarr_id, {"x": b"secret"}).status_code == 200
    anonymous = Client()
    # As for a dandiset that does not exist: sign in (the DANDI client's cue), or not found.
    hidden = anonymous.get(f"/api/dandisets/{identifier}/")
    assert hidden.status_code == 401
    absent = anonymous.get("/api/dandisets/999999/").json()
    assert hidden.json() == {**absent, "detail": absent["detail"].replace("999999", identifier)}
    assert stranger.client.get(f"/api/dandisets/{identifier}/").status_code == 404
    assert anonymous.get(f"/zarr/{zarr_id}/x").status_code == 404
    versions = owner.client.get(f"/api/dandisets/{identifier}/versions/draft/info/").json()
    assert versions["dandiset"]["identifier"] == identifier

    assert stranger.client.post(f"/api/dandisets/{identifier}/unembargo/").status_code == 404
    released = owner.client.post(f"/api/dandisets/{identifier}/unembargo/")
    assert released.status_code == 202, released.content
    # Tasks run when the request commits here: the release is done by the time it answers.
    assert owner.client.get(f"/api/dandisets/{identifier}/").json()["embargo_status"] == "OPEN"
    assert anonymous.get(f"/api/dandisets/{identifier}/").status_code == 200
    read = anonymous.get(f"/zarr/{zarr_id}/x")
    assert read.status_code == 200 and b"".join(read.streaming_content) == b"secret"
    again = owner.client.post(f"/api/dandisets/{identifier}/unembargo/")
    assert again.status_code == 409 and "not embargoed (OPEN)" in again.json()["detail"]


def test_release_waits_for_open_uploads(owner: Actor, s3_storage: str) -> None:
    identifier = _embargoed(owner)
    zarr_id = _archive(owner, identifier)
    assert upload(owner.client, zarr_id, {"x": b"1"}, complete=False)
    refused = owner.client.post(f"/api/dandisets/{identifier}/unembargo/")
    assert refused.status_code == 409
    assert f"upload in progress in zarr archive {zarr_id}" in refused.json()["detail"]
    assert Dandiset.objects.get(pk=int(identifier)).embargo_status == "EMBARGOED"


def test_a_release_a_crash_interrupted_is_finished_by_the_sweep(
    owner: Actor, s3_storage: str
) -> None:
    identifier = _embargoed(owner)
    Dandiset.objects.filter(pk=int(identifier)).update(embargo_status="UNEMBARGOING")
    assert Client().get(f"/api/dandisets/{identifier}/").status_code == 401  # still private
    assert unfinished_releases_finish() == 1
    assert Dandiset.objects.get(pk=int(identifier)).embargo_status == "OPEN"
    assert unfinished_releases_finish() == 0


def test_bad_embargo_values_are_refused(owner: Actor, transactional_db: None) -> None:
    refused = owner.client.post("/api/dandisets/?embargo=maybe", {"name": "e"}, format="json")
    assert refused.status_code == 400 and "embargo" in refused.json()["detail"]
    assert not Dandiset.objects.exists()


@pytest.fixture
def public_bucket(settings: Any, seaweedfs_storage: str, seaweedfs: Any) -> str:
    """SeaweedFS serving the bucket's public part without signatures (docs/embargo.md)."""
    settings.DANDIZARR_S3_PUBLIC_READ_URL = f"{seaweedfs.endpoint_url}/{seaweedfs_storage}"
    return str(settings.DANDIZARR_S3_PUBLIC_READ_URL)


def _raw(public_url: str, zarr_id: str, path: str) -> int:
    return requests.get(f"{public_url}/zarr/{zarr_id}/{path}", timeout=30).status_code


def test_on_a_public_bucket_private_objects_need_a_signature(
    owner: Actor, dandiset: str, public_bucket: str
) -> None:
    public_id = _archive(owner, dandiset, "public.zarr")
    private_set = _embargoed(owner)
    private_id = _archive(owner, private_set, "private.zarr")
    for zarr_id in (public_id, private_id):
        targets = owner.client.post(
            f"/api/zarr/{zarr_id}/upload/", [{"path": "0/0", "etag": md5(b"chunk")}], "json"
        ).json()
        assert put(targets[0]["upload_url"], b"chunk").status_code == 200
        assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 200

    assert _raw(public_bucket, public_id, "0/0") == 200  # anyone, no signature
    assert _raw(public_bucket, private_id, "0/0") == 403  # a signature only
    signed = owner.client.get(f"/api/zarr/{private_id}/files/0/0").json()["download_url"]
    assert requests.get(signed, timeout=30).status_code == 200
    manifest = owner.client.get(f"/api/zarr/{private_id}/manifest.json")
    refs = b"".join(manifest.streaming_content)
    assert b"X-Amz-Signature" in refs  # never the public URL form for a private archive

    assert owner.client.post(f"/api/dandisets/{private_set}/unembargo/").status_code == 202
    assert _raw(public_bucket, private_id, "0/0") == 200
    assert _raw(public_bucket, public_id, "0/0") == 200
