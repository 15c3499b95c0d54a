"""Fixtures for the API: users with tokens, S3 on moto's server, helpers to upload for real."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from zarr_api.storage import get_store


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.fixture
def s3_storage(settings: Any, moto_server: str, s3_bucket: str) -> Iterator[str]:
    """Point the service at a fresh bucket on moto's S3 server."""
    settings.DANDIZARR_STORAGE = "s3"
    settings.DANDIZARR_S3_ENDPOINT_URL = moto_server
    settings.DANDIZARR_S3_PRESIGN_ENDPOINT_URL = None
    settings.DANDIZARR_S3_BUCKET = s3_bucket
    yield s3_bucket


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


@pytest.fixture
def owner(transactional_db: None) -> Actor:
    return make_actor("owner")


@pytest.fixture
def stranger(transactional_db: None) -> Actor:
    return make_actor("stranger")


@pytest.fixture
def admin_actor(transactional_db: None) -> Actor:
    return make_actor("boss", staff=True)


@pytest.fixture
def dandiset(owner: Actor) -> str:
    response = owner.client.post("/api/dandisets/", {"name": "test"}, format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["identifier"])


@pytest.fixture
def zarr_id(owner: Actor, dandiset: str, s3_storage: str) -> str:
    response = owner.client.post(
        "/api/zarr/", {"name": "a.zarr", "dandiset": dandiset}, format="json"
    )
    assert response.status_code == 201, response.content
    return str(response.json()["zarr_id"])


def put(url: str, body: bytes) -> requests.Response:
    content_md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    return requests.put(url, data=body, headers={"Content-MD5": content_md5}, timeout=30)


def upload(
    client: APIClient, zarr_id: str, files: dict[str, bytes], *, complete: bool = True
) -> Any:
    """Start a batch, PUT every file for real, and complete it; returns the complete response."""
    response = client.post(
        f"/api/zarr/{zarr_id}/upload/",
        [{"path": p, "etag": md5(b)} for p, b in files.items()],
        format="json",
    )
    assert response.status_code == 200, response.content
    for target in response.json():
        assert put(target["upload_url"], files[target["path"]]).status_code == 200
    if not complete:
        return response
    return client.post(f"/api/zarr/{zarr_id}/upload/complete/")


def storage_listing(zarr_id: str) -> dict[str, tuple[int, str]]:
    prefix = f"zarr/{zarr_id}/"
    return {i.key[len(prefix) :]: (i.size, i.etag) for i in get_store().list(prefix)}
