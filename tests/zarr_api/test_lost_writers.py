"""An owner removed from a dandiset loses their uploads: their open batch is cancelled once the
change commits (what it uploaded deleted, the tree untouched), it cannot be completed, and
their local-backend URLs stop PUTing at once."""

from __future__ import annotations

import pytest

from dandizarr_server.zarr_api.models import Batch, Dandiset
from dandizarr_server.zarr_api.runtime.storage import get_store
from tests.support.api import Actor, md5, put, upload


def test_removed_owner_loses_open_batches(
    owner: Actor, stranger: Actor, archive: str, backend: str
) -> None:
    dandiset = Dandiset.objects.get(zarr_archives__zarr_id=archive)
    dandiset.owners.add(stranger.user)  # a co-owner
    assert upload(owner.client, archive, {"kept": b"k"}).status_code == 200
    targets = stranger.client.post(
        f"/api/zarr/{archive}/upload/",
        [{"path": "a", "etag": md5(b"aa")}, {"path": "b", "etag": md5(b"bb")}],
        format="json",
    ).json()
    urls = {t["path"]: t["upload_url"] for t in targets}
    assert put(urls["a"], b"aa").status_code == 200

    dandiset.owners.remove(stranger.user)  # as the admin does; commits at once here

    batch = Batch.objects.get(archive__zarr_id=archive, user=stranger.user, kind="upload")
    assert batch.state == Batch.State.CANCELLED
    assert "lost write access" in batch.note or "lost write access" in batch.error
    complete = stranger.client.post(f"/api/zarr/{archive}/upload/complete/")
    assert complete.status_code in (403, 404)
    refused = put(urls["b"], b"bb")
    if backend == "local":  # revocable: refused at once
        assert refused.status_code == 403 and "AccessDenied" in refused.text
    listing = get_store().list(f"zarr/{archive}/")
    keys = {info.key.rsplit("/", 1)[-1] for info in listing}
    assert "a" not in keys and "kept" in keys
    files = owner.client.get(f"/api/zarr/{archive}/files/?recursive=1")
    assert [r["path"] for r in files.json()["results"]] == ["kept"]


def test_a_url_refused_while_the_removal_is_not_yet_applied(
    owner: Actor, stranger: Actor, archive: str, backend: str
) -> None:
    """Between the removal and the cancel, the local endpoint already refuses the URL."""
    if backend != "local":
        pytest.skip("S3 cannot refuse a presigned URL it signed; the cancel deletes the upload")
    dandiset = Dandiset.objects.get(zarr_archives__zarr_id=archive)
    dandiset.owners.add(stranger.user)
    target = stranger.client.post(
        f"/api/zarr/{archive}/upload/", [{"path": "a", "etag": md5(b"aa")}], format="json"
    ).json()[0]
    # The membership row goes without the signal (as a crash between the two would leave it).
    Dandiset.owners.through.objects.filter(user=stranger.user).delete()
    refused = put(target["upload_url"], b"aa")
    assert refused.status_code == 403
