"""Helpers of the page tests: an archive created with its files uploaded, a PNG's pixels."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from tests.support.api import Actor, upload


def create(actor: Actor, dandiset: str, name: str, files: dict[str, bytes]) -> str:
    """A new archive of the default layout in ``dandiset``, ``files`` uploaded; its id.

    On moto the files' bytes are not PUT over HTTP (``upload(into_moto=True)``): the page tests
    upload hundreds of chunks, which cost more CPU than the pages, and PUTs to the service's
    upload URLs have tests of their own (test_upload_flow.py and others)."""
    response = actor.client.post("/api/zarr/", {"name": name, "dandiset": dandiset}, format="json")
    assert response.status_code == 201, response.content
    zarr_id = str(response.json()["zarr_id"])
    if files:
        assert upload(actor.client, zarr_id, files, into_moto=True).status_code == 200
    return zarr_id


def png_pixels(data: bytes) -> np.ndarray:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return np.asarray(Image.open(io.BytesIO(data)))
