"""Acting on the API as users do in tests: users with tokens, real PUTs, batch uploads."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import requests
from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from dandizarr.checksums import compute_tree
from dandizarr.objectstore import ObjectStore
from dandizarr.objectstore.local import LocalObjectStore
from dandizarr_server.zarr_api.domain.keys import file_key, files_prefix
from dandizarr_server.zarr_api.models import Asset, Batch, BatchFile, Dandiset, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.reconciliation import due_batches_reconcile
from tests.support.moto_objects import put_to_upload_url

SAMPLE_FILES = {
    ".zgroup": b'{"zarr_format": 2}',
    "0/.zarray": b"{}",
    "0/0.0": b"a" * 100,
    "0/0.1": b"b" * 50,
    "1/x/y/z": b"deep",
    "caf\u00e9": b"non-ascii name",
}
"""A small archive: nested paths, a deep one, a non-ASCII name."""


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def expected_checksum(files: dict[str, bytes]) -> str:
    """The tree checksum an archive holding exactly ``files`` has."""
    return compute_tree((p, len(b), md5(b)) for p, b in files.items()).digest


@dataclass
class Actor:
    user: User
    client: APIClient


def make_actor(username: str, *, staff: bool = False) -> Actor:
    user = User.objects.create_user(username=username, is_staff=staff)
    token = Token.objects.create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return Actor(user, client)


def put(url: str, body: bytes) -> requests.Response:
    content_md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    return requests.put(url, data=body, headers={"Content-MD5": content_md5}, timeout=30)


def upload(
    client: APIClient,
    zarr_id: str,
    files: dict[str, bytes],
    *,
    complete: bool = True,
    into_moto: bool = False,
) -> Any:
    """Start a batch, PUT every file for real, and complete it; returns the complete response.

    ``into_moto``: the bytes go straight into moto's S3 model where the upload URL is of this
    process' moto server (tests/support/moto_objects.py), not PUT over HTTP; the batch, its
    URLs and the completion are the service's all the same.
    """
    response = client.post(
        f"/api/zarr/{zarr_id}/upload/",
        [{"path": p, "etag": md5(b)} for p, b in files.items()],
        format="json",
    )
    assert response.status_code == 200, response.content
    for target in response.json():
        url, body = target["upload_url"], files[target["path"]]
        if into_moto and put_to_upload_url(url, body):
            continue
        assert put(url, body).status_code == 200
    if not complete:
        return response
    return client.post(f"/api/zarr/{zarr_id}/upload/complete/")


def cancel_while_storage_is_down(owner: Actor, zarr_id: str, settings: Any) -> str:
    """Upload "over" and "keep", then a batch overwriting "over" and adding "added", PUT it, and
    cancel it with storage unreachable; returns the working endpoint, to put back."""
    upload(owner.client, zarr_id, {"over": b"old", "keep": b"k"})
    assert upload(owner.client, zarr_id, {"over": b"new", "added": b"a"}, complete=False)
    working_endpoint: str = settings.DANDIZARR_S3_ENDPOINT_URL
    # One retry, not five with backoff: what is tested is the answer once storage is gone.
    settings.DANDIZARR_S3_RETRIES = 1
    settings.DANDIZARR_S3_ENDPOINT_URL = "http://127.0.0.1:9"  # nothing listens there
    assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    return working_endpoint


def batch_start_urls(actor: Actor, zarr_id: str, files: dict[str, bytes]) -> dict[str, str]:
    """Start an upload batch for ``files`` without PUTting them; returns path -> upload URL."""
    response = actor.client.post(
        f"/api/zarr/{zarr_id}/upload/",
        [{"path": p, "etag": md5(b)} for p, b in files.items()],
        format="json",
    )
    assert response.status_code == 200, response.content
    return {t["path"]: t["upload_url"] for t in response.json()}


def storage_listing(zarr_id: str) -> dict[str, tuple[int, str]]:
    prefix = files_prefix(zarr_id)
    return {i.key[len(prefix) :]: (i.size, i.etag) for i in get_store().list(prefix)}


def create_archive(actor: Actor, dandiset: str, name: str, layout: str = "sharded") -> str:
    response = actor.client.post(
        "/api/zarr/", {"name": name, "dandiset": dandiset, "layout": layout}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["layout"] == layout
    return str(response.json()["zarr_id"])


def age_upload_urls() -> None:
    """The upload URLs' lifetime and the reconciliation margin passed, in the database: every
    archive's URLs expired, every ended batch due (an UPDATE instead of waiting for them)."""
    margin = timedelta(seconds=settings.DANDIZARR_RECONCILE_MARGIN_SECONDS + 1)
    ZarrArchive.objects.filter(upload_urls_valid_until__isnull=False).update(
        upload_urls_valid_until=timezone.now() - margin
    )
    Batch.objects.filter(reconcile_after__isnull=False).update(reconcile_after=timezone.now())


def let_upload_urls_expire() -> None:
    """What the passing of the upload URLs' lifetime does on S3 (the URLs cannot be revoked):
    the archives' URLs are expired, and every ended batch is reconciled with storage."""
    age_upload_urls()
    due_batches_reconcile()


def expected_upload(path: str, md5_hex: str) -> str:
    """The key of ``path`` in a new archive whose open upload batch expects it with
    ``md5_hex``: the only PUTs the local storage endpoint accepts."""
    dandiset = Dandiset.objects.create(name="object store tests")
    # Its uploader an owner: the endpoint takes PUTs only of batches whose uploader may write.
    uploader = User.objects.create_user(f"uploader-{dandiset.pk}")
    dandiset.owners.add(uploader)
    archive = ZarrArchive.objects.create(name="a.zarr", dandiset=dandiset)
    batch = Batch.objects.create(
        archive=archive, kind=Batch.Kind.UPLOAD, state=Batch.State.OPEN, user=uploader
    )
    BatchFile.objects.create(batch=batch, path=path, md5=md5_hex)
    return file_key(archive.zarr_id, path)


def put_key_for(store: ObjectStore, path: str, md5_hex: str) -> str:
    """A key ``store`` takes a presigned PUT of ``path`` at: the local storage endpoint accepts
    only keys an open upload batch expects (``expected_upload``); S3 accepts any key."""
    return expected_upload(path, md5_hex) if isinstance(store, LocalObjectStore) else path


def db_snapshot() -> tuple[Any, ...]:
    """Assets, archives and batch states: what a rejected request must leave as it was."""
    return (
        list(Asset.objects.values_list("path", "metadata", "zarr_id").order_by("pk")),
        list(ZarrArchive.objects.values_list("name", "checksum").order_by("pk")),
        list(Batch.objects.values_list("state").order_by("pk")),
    )
